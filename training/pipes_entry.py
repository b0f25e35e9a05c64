"""The Dagster Pipes entry point: the `training_run` asset launches this under torchrun.

    PipesSubprocessClient().run(
        command=["torchrun", "--nproc-per-node", "2", "-m", "training.pipes_entry"],
        context=context,
        extras={"config": "run.yaml", "dataset_version": md5, "data_dir": ..., "checkpoint_dir": ...},
    )

The one module of training/ that imports `dagster_pipes`. Rank 0 opens the Pipes session: it logs
through `context.log`, streams every metric record as a custom message, and at the end reports the
asset materialization (final loss, tokens, throughput, steps, checkpoint, the loss curve). The other
ranks read the same extras from the injected context without opening a session (one writer per
message channel), then train as plain ranks.

Extras (all but `config` optional; the named ones override the run config's keys):
- `config`: a run config file path, or the config itself as a mapping (paths relative to the cwd);
- `dataset_version` -> dataset_version, `data_dir` -> data.data_dir, `checkpoint_dir` -> checkpoint.dir,
  `max_steps` -> max_steps;
- `overrides`: more dotted keys, e.g. {"optimizer.lr": 1e-3}.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping
from typing import Any

from dagster_pipes import PipesContext, PipesDefaultContextLoader, PipesEnvVarParamsLoader, open_dagster_pipes

from training.config import RunConfig, load_run_config, parse_run_config
from training.metrics import read_records
from training.train import TrainResult, configure_logging, run

EXTRA_TO_KEY = {
    "dataset_version": "dataset_version",
    "data_dir": "data.data_dir",
    "checkpoint_dir": "checkpoint.dir",
    "max_steps": "max_steps",
    "tokenizer_path": "data.media.tokenizer_path",  # media models: the token shards' tokenizer
}
KNOWN_EXTRAS = {"config", "overrides", *EXTRA_TO_KEY}
MAX_CURVE_POINTS = 500
"""The loss curve in the materialization is thinned to at most this many points (evenly by index,
last point kept): 100k steps logged every 10 would otherwise put 10k points in one metadata entry."""

log = logging.getLogger("training")


class PipesExtrasError(ValueError):
    """The Pipes extras do not describe a run; the message names the extra."""


def config_from_extras(extras: Mapping[str, Any]) -> RunConfig:
    unknown = sorted(set(extras) - KNOWN_EXTRAS)
    if unknown:
        raise PipesExtrasError(f"unknown Pipes extras {unknown}; known: {sorted(KNOWN_EXTRAS)}")
    if "config" not in extras:
        raise PipesExtrasError("Pipes extras need 'config': a run config path or the config as a mapping")
    overrides = dict(extras.get("overrides") or {})
    for extra, key in EXTRA_TO_KEY.items():
        if extras.get(extra) is not None:
            overrides[key] = extras[extra]
    config = extras["config"]
    if isinstance(config, str):
        return load_run_config(config, overrides)
    if isinstance(config, Mapping):
        return parse_run_config(dict(config), os.getcwd(), overrides)
    raise PipesExtrasError(f"Pipes extra 'config' must be a path or a mapping, got {type(config).__name__}")


def _thin(points: list[dict[str, Any]], limit: int) -> list[dict[str, Any]]:
    if len(points) <= limit:
        return points
    picks = sorted({round(i * (len(points) - 1) / (limit - 1)) for i in range(limit)})
    return [points[i] for i in picks]


def loss_curve(metrics_path: str) -> dict[str, list]:
    """The run's train and eval losses by step, from the metrics file (so a resumed run's curve
    includes the steps before the resume)."""
    records = read_records(metrics_path)
    train = _thin([r for r in records if r.get("kind") == "train"], MAX_CURVE_POINTS)
    evals = _thin([r for r in records if r.get("kind") == "eval"], MAX_CURVE_POINTS)
    return {
        "step": [r["step"] for r in train],
        "loss": [r["loss"] for r in train],
        "eval_step": [r["step"] for r in evals],
        "eval_loss": [r["eval_loss"] for r in evals],
    }


def materialization_metadata(result: TrainResult, cfg: RunConfig) -> dict[str, Any]:
    metadata: dict[str, Any] = {
        "final_loss": {"type": "float", "raw_value": result.loss},
        "tokens_seen": {"type": "int", "raw_value": result.tokens_seen},
        "tokens_per_s": {"type": "float", "raw_value": round(result.tokens_per_s, 1)},
        "data_wait_fraction": {"type": "float", "raw_value": round(result.data_wait_fraction, 4)},
        "first_step_wait_s": {"type": "float", "raw_value": round(result.first_step_wait_s, 3)},
        "steps": {"type": "int", "raw_value": result.step},
        "dataset_version": {"type": "text", "raw_value": cfg.dataset_version},
        "checkpoint": {"type": "path", "raw_value": result.checkpoint},
        "metrics_file": {"type": "path", "raw_value": result.metrics_path},
        "loss_curve": {"type": "json", "raw_value": loss_curve(result.metrics_path)},
    }
    metadata["samples_per_s"] = {"type": "float", "raw_value": round(result.samples_per_s, 2)}
    if result.modalities_seen is not None:
        # the modality mix actually trained on (whole run, resumed segments included)
        metadata["modalities_seen"] = {"type": "json", "raw_value": result.modalities_seen}
    if result.decode_fraction is not None:
        metadata["decode_fraction"] = {"type": "float", "raw_value": round(result.decode_fraction, 4)}
    if result.eval_loss is not None:
        metadata["eval_loss"] = {"type": "float", "raw_value": result.eval_loss}
    if result.resumed_from is not None:
        metadata["resumed_from_step"] = {"type": "int", "raw_value": result.resumed_from}
    return metadata


class _ToPipesLog(logging.Handler):
    """Forwards the trainer's log lines (start, resume, stop) to Dagster's event log."""

    def __init__(self, pipes: PipesContext) -> None:
        super().__init__()
        self._pipes = pipes

    def emit(self, record: logging.LogRecord) -> None:
        self._pipes.log.log(record.levelno, record.getMessage())


def _run_rank0() -> int:
    with open_dagster_pipes() as pipes:
        handler = _ToPipesLog(pipes)
        log.addHandler(handler)
        try:
            cfg = config_from_extras(pipes.extras)
            result = run(cfg, callbacks=[pipes.report_custom_message])
            if result.stopped_by_signal:
                # Not materialized: the run is incomplete. Re-materializing resumes it from the checkpoint.
                pipes.log.warning(f"stopped by a signal at step {result.step}/{result.max_steps}; "
                                  f"checkpoint {result.checkpoint}")
                pipes.report_custom_message({"kind": "stopped", "step": result.step, "checkpoint": result.checkpoint})
            else:
                pipes.report_asset_materialization(metadata=materialization_metadata(result, cfg))
        finally:
            log.removeHandler(handler)
    return 0


def _run_other_rank() -> int:
    params = PipesEnvVarParamsLoader()
    with PipesDefaultContextLoader().load_context(params.load_context_params()) as data:
        extras = data["extras"]
    run(config_from_extras(extras))
    return 0


def main() -> int:
    if not PipesEnvVarParamsLoader().is_dagster_pipes_process():
        print("training.pipes_entry is launched by Dagster's PipesSubprocessClient (the training_run asset); "
              "run `python -m training.train --config run.yaml` for a standalone run", file=sys.stderr)
        return 2
    configure_logging()
    return _run_rank0() if int(os.environ.get("RANK", "0")) == 0 else _run_other_rank()


if __name__ == "__main__":
    sys.exit(main())
