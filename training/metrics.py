"""Per-step metrics: a JSON lines file, a line on stdout, and callbacks (the Pipes entry's reporter).

One record per logged step (`kind: train`) and per evaluation (`kind: eval`). Every record carries
the run's `dataset_version`, so a curve can never be attributed to the wrong data. Only rank 0
logs metrics (the loss and token counts are already reduced over all ranks).

On resume, records of steps after the checkpoint are dropped from the file before training goes on:
those steps are trained again, and the file must hold one history, not two overlapping ones.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TextIO

MetricsCallback = Callable[[dict[str, Any]], None]


def read_records(path: str | Path) -> list[dict[str, Any]]:
    """Every record of a metrics (or sample-id) file; a torn last line (killed mid-write) is skipped."""
    path = Path(path)
    if not path.exists():
        return []
    records = []
    for line in path.read_text().splitlines():
        try:
            records.append(json.loads(line))
        except ValueError:
            continue
    return records


def truncate_after(path: str | Path, step: int) -> None:
    """Keep the records with `step <= step` (written atomically: temp file + rename)."""
    path = Path(path)
    if not path.exists():
        return
    kept = [r for r in read_records(path) if r.get("step", 0) <= step]
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in kept))
    tmp.replace(path)


def finite_or_none(record: dict[str, Any]) -> dict[str, Any]:
    """inf/NaN (an fp16 step the GradScaler skipped has an infinite grad norm) become null: JSON has
    no spelling for them, and json.dumps' `Infinity` breaks strict readers (Dagster's, browsers')."""
    return {k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in record.items()}


def _num(value: float | None, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)


def format_line(record: dict[str, Any], max_steps: int) -> str:
    """The human-readable stdout form of a record."""
    step = f"step {record['step']}/{max_steps}"
    if record["kind"] == "eval":
        return f"{step} | eval loss {_num(record['eval_loss'], '.4f')} over {record['eval_tokens']} tokens"
    line = (
        f"{step} | loss {_num(record['loss'], '.4f')} | lr {record['lr']:.3e} | "
        f"grad norm {_num(record['grad_norm'], '.3f')} | {record['tokens_per_s']:,.0f} tok/s | "
        f"data wait {100 * record['data_wait_fraction']:.1f}% | tokens {record['tokens_seen']:,}"
    )
    if "decode_fraction" in record:  # media runs: samples are the unit, decoding the loader's main cost
        line += (f" | {record.get('samples_per_s', 0.0):,.1f} samples/s | decode {100 * record['decode_fraction']:.0f}%"
                 f" of loader work")
    return line


class JsonLinesLog:
    """Append-only JSON lines, flushed per record so a killed run loses at most the last line."""

    def __init__(self, path: str | Path, resume_step: int) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        truncate_after(self.path, resume_step)
        self._fh: TextIO = open(self.path, "a")  # noqa: SIM115 -- held for the run, closed by close()

    def write(self, record: dict[str, Any]) -> None:
        self._fh.write(json.dumps(record, sort_keys=True) + "\n")
        self._fh.flush()

    def close(self) -> None:
        self._fh.close()


class MetricsLogger:
    """Rank 0's metrics sink: file + stdout + callbacks. A callback that raises stops the run (the
    Pipes entry must know when it can no longer report)."""

    def __init__(
        self,
        path: str | Path,
        *,
        resume_step: int,
        max_steps: int,
        dataset_version: str,
        callbacks: Sequence[MetricsCallback] = (),
        stdout: TextIO | None = None,
    ) -> None:
        self._file = JsonLinesLog(path, resume_step)
        self._max_steps = max_steps
        self._dataset_version = dataset_version
        self._callbacks = list(callbacks)
        self._stdout = stdout if stdout is not None else sys.stdout

    def log(self, record: dict[str, Any]) -> dict[str, Any]:
        record = finite_or_none({**record, "dataset_version": self._dataset_version})
        self._file.write(record)
        print(format_line(record, self._max_steps), file=self._stdout, flush=True)
        for callback in self._callbacks:
            callback(record)
        return record

    def close(self) -> None:
        self._file.close()
