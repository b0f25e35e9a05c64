"""Atomic checkpoints in one directory, and finding the newest complete one.

```
<dir>/step-00000100/model.pt        model state_dict (unwrapped: no DDP `module.` / compile `_orig_mod.` prefixes)
<dir>/step-00000100/optim.pt        optimizer, lr scheduler, GradScaler
<dir>/step-00000100/rng.pt          every rank's RNG states (python, numpy, torch CPU, CUDA)
<dir>/step-00000100/meta.json       step, dataset_version, loader state, config, sizes of the files above
<dir>/latest                        "step-00000100\n": the newest checkpoint, for readers outside the job
```

A checkpoint is written into `.tmp-step-<n>-<pid>/`, every file fsynced, `meta.json` last, the
directory fsynced and renamed to `step-<n>/` (rename is atomic on POSIX filesystems), the parent
fsynced, and only then is `latest` replaced (write temp, fsync, rename). A crash at any point
leaves either a `.tmp-*` directory (ignored, and removed by the next save) or a complete checkpoint.

Resume does not trust `latest` alone: it scans `step-*` directories newest first and takes the first
whose meta.json parses and whose files have the recorded sizes; a crash between the directory rename
and the pointer update leaves a complete checkpoint that `latest` does not name yet. Sizes, not
hashes, are checked: hashing a multi-GB model on every resume costs minutes, and a torn write shows
up as a short file.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

FORMAT_VERSION = 1
META_FILE = "meta.json"
LATEST_POINTER = "latest"
TEMP_PREFIX = ".tmp-"
_STEP_DIR = re.compile(r"^step-(\d{8,})$")


class CheckpointError(RuntimeError):
    """A checkpoint is incomplete, corrupt or does not fit this run; the message says which and why."""


class CheckpointWriteError(OSError):
    """Writing a checkpoint failed in the filesystem (disk full, quota, file size limit): names the file
    and says the earlier checkpoints are unchanged. torch.save reports such a failure as "[enforce fail
    at inline_container.cc] unexpected pos 704 vs 598", with neither the path nor the cause."""


class _WriteFailureRecorder:
    """A file object for torch.save that keeps the OSError its writes raised (torch's C++ writer replaces
    it by its own RuntimeError)."""

    def __init__(self, fh: Any) -> None:
        self._fh, self.failure = fh, None

    def write(self, data: Any) -> int:
        try:
            return self._fh.write(data)
        except OSError as err:
            self.failure = self.failure or err
            raise

    def __getattr__(self, name: str) -> Any:
        return getattr(self._fh, name)


def step_dir_name(step: int) -> str:
    return f"step-{step:08d}"


@dataclass(frozen=True)
class Checkpoint:
    path: Path
    step: int
    meta: dict[str, Any]

    def load(self, name: str) -> Any:
        """One payload (`model`, `optim`, `rng`), on CPU. weights_only: a checkpoint is data, never code."""
        return torch.load(self.path / f"{name}.pt", map_location="cpu", weights_only=True)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_durable(path: Path, write: Any) -> None:
    recorder = None
    try:
        with open(path, "wb") as fh:
            recorder = _WriteFailureRecorder(fh)
            write(recorder)
            fh.flush()
            os.fsync(fh.fileno())
    except Exception as err:
        cause = recorder.failure if recorder is not None and recorder.failure else err
        if isinstance(cause, OSError) and not isinstance(cause, CheckpointWriteError):
            raise CheckpointWriteError(cause.errno, f"{os.strerror(cause.errno) if cause.errno else cause} "
                                       f"writing {path}") from cause
        raise


def _write_latest(root: Path, name: str) -> None:
    tmp = root / f"{TEMP_PREFIX}{LATEST_POINTER}-{os.getpid()}"
    _write_durable(tmp, lambda fh: fh.write(f"{name}\n".encode()))
    os.replace(tmp, root / LATEST_POINTER)
    _fsync_dir(root)


def _remove(path: Path) -> None:
    """Rename out of the `step-*` namespace first, so a crash mid-delete never leaves a half-deleted
    directory that looks like a checkpoint."""
    doomed = path.with_name(f"{TEMP_PREFIX}deleting-{path.name}-{os.getpid()}")
    os.rename(path, doomed)
    shutil.rmtree(doomed)


def save_checkpoint(
    root: str | Path, step: int, payloads: Mapping[str, Any], meta: Mapping[str, Any], keep_last: int
) -> Path:
    """Write `payloads` (name -> torch-saveable object, saved as `<name>.pt`) and `meta` (JSON) as
    checkpoint `step`; keep the newest `keep_last` checkpoints. Only one process may call this."""
    if keep_last < 1:
        raise ValueError(f"keep_last must be at least 1, got {keep_last}")
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    for stale in root.glob(f"{TEMP_PREFIX}*"):  # left by a writer that crashed mid-save
        shutil.rmtree(stale) if stale.is_dir() else stale.unlink()

    name = step_dir_name(step)
    tmp = root / f"{TEMP_PREFIX}{name}-{os.getpid()}"
    tmp.mkdir()
    try:
        sizes = {}
        for key, obj in payloads.items():
            target = tmp / f"{key}.pt"
            _write_durable(target, lambda fh, obj=obj: torch.save(obj, fh))
            sizes[target.name] = target.stat().st_size
        record = {**meta, "format_version": FORMAT_VERSION, "step": step, "files": sizes}
        # sort_keys: the same state gives the same meta.json bytes.
        _write_durable(tmp / META_FILE, lambda fh: fh.write(json.dumps(record, indent=1, sort_keys=True).encode()))
        _fsync_dir(tmp)
    except CheckpointWriteError as err:
        # the partial files go at once: on a full disk they hold the space the next save needs
        shutil.rmtree(tmp, ignore_errors=True)
        kept = [c.step for c in list_checkpoints(root)]
        raise CheckpointWriteError(err.errno, f"checkpoint step {step}: {err.strerror}; the earlier checkpoints "
                                   f"(steps {kept}) are unchanged: free space and resume") from err

    final = root / name
    if final.exists():  # the same step saved again (e.g. a stop request right after a resume)
        _remove(final)
    os.rename(tmp, final)
    _fsync_dir(root)
    _write_latest(root, name)

    complete = list_checkpoints(root)
    for old in complete[: max(0, len(complete) - keep_last)]:
        _remove(old.path)
    return final


def read_checkpoint(path: str | Path) -> Checkpoint:
    """A complete checkpoint at `path`, or CheckpointError naming what is missing."""
    path = Path(path)
    match = _STEP_DIR.match(path.name)
    if not match:
        raise CheckpointError(f"{path}: not a checkpoint directory (expected step-<n>)")
    try:
        meta = json.loads((path / META_FILE).read_text())
    except (OSError, ValueError) as err:
        raise CheckpointError(f"{path}: no readable {META_FILE} ({err})") from None
    if not isinstance(meta, dict) or meta.get("format_version") != FORMAT_VERSION:
        raise CheckpointError(f"{path}: {META_FILE} is not a format_version {FORMAT_VERSION} checkpoint record")
    if meta.get("step") != int(match.group(1)):
        raise CheckpointError(f"{path}: {META_FILE} says step {meta.get('step')}")
    for file_name, size in meta.get("files", {}).items():
        actual = (path / file_name).stat().st_size if (path / file_name).is_file() else None
        if actual != size:
            raise CheckpointError(f"{path}: {file_name} is {actual} bytes, the checkpoint recorded {size}")
    return Checkpoint(path=path, step=meta["step"], meta=meta)


def list_checkpoints(root: str | Path) -> list[Checkpoint]:
    """The complete checkpoints under `root`, oldest first; torn and temporary ones are skipped."""
    root = Path(root)
    if not root.is_dir():
        return []
    found = []
    for child in root.iterdir():
        if child.is_dir() and _STEP_DIR.match(child.name):
            try:
                found.append(read_checkpoint(child))
            except CheckpointError:
                continue
    return sorted(found, key=lambda c: c.step)


def find_latest_checkpoint(root: str | Path) -> Checkpoint | None:
    complete = list_checkpoints(root)
    return complete[-1] if complete else None


def read_latest_pointer(root: str | Path) -> Path | None:
    """The checkpoint `latest` names (for readers outside the job), if it names a complete one."""
    pointer = Path(root) / LATEST_POINTER
    try:
        name = pointer.read_text().strip()
        return read_checkpoint(Path(root) / name).path
    except (OSError, CheckpointError):
        return None
