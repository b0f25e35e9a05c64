"""The torchrun command line and the Pipes extras of a training run (no Dagster here)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from platform_assets.training_launch.settings import TrainingLaunchSettings

PIPES_ENTRY = "training.pipes_entry"
DIE_WITH_PARENT = "platform_assets.training_launch.die_with_parent"


def torchrun_command(settings: TrainingLaunchSettings, die_with: int | None = None) -> list[str]:
    """torchrun running the Pipes entry point; `die_with`: a pid (the Dagster run's) whose death sends
    torchrun SIGTERM (see die_with_parent.py), so a killed run leaves no training behind."""
    torchrun = settings.torchrun or str(Path(sys.executable).parent / "torchrun")
    guard = [sys.executable, "-m", DIE_WITH_PARENT, str(die_with)] if die_with is not None else []
    cmd = [*guard, torchrun, "--nproc-per-node", str(settings.nproc_per_node), "--nnodes", str(settings.nnodes)]
    if settings.nnodes == 1 and settings.rdzv_endpoint is None:
        cmd.append("--standalone")  # a local rendezvous on a free port: two runs on one box never collide
    else:
        cmd += ["--rdzv-backend", "c10d", "--rdzv-endpoint", settings.rdzv_endpoint or ""]
    return [*cmd, "-m", PIPES_ENTRY]


def checkpoint_dir(root: Path, dataset_md5: str) -> Path:
    """One directory per dataset version: `3f2a...dir` -> `<root>/3f2a...`."""
    return root / dataset_md5.removesuffix(".dir")


def run_extras(settings: TrainingLaunchSettings, run_config: Path, version_record: dict,
               checkpoint_root: Path) -> dict[str, object]:
    """What the Pipes entry point receives: the run config plus what only the platform knows."""
    extras: dict[str, object] = {
        "config": str(run_config),
        "dataset_version": version_record["md5"],
        "data_dir": f"{version_record['shards_uri']}/flat",
        "checkpoint_dir": str(checkpoint_dir(checkpoint_root, version_record["md5"])),
    }
    if settings.max_steps is not None:
        extras["max_steps"] = settings.max_steps
    if settings.overrides:
        extras["overrides"] = json.loads(json.dumps(settings.overrides))
    return extras
