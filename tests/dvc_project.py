"""A git repository laid out like the platform's checkout, for the tests that version shard sets with
the real `dvc` CLI: `configs/`, a git-ignored `data/`, and a dvc.yaml whose stages own the shard sets."""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml


def init_dvc_project(root: Path, outputs: tuple[str, ...] = ("packed_shards",)) -> Path:
    """Create `root` as that repository (git init with a committer; `dvc init` is the platform's job) and
    return it. dvc.yaml stages own `data/platform/<output>/_all`: data/ is git-ignored, so `dvc add`
    could not write a .dvc file beside them."""
    (root / "configs").mkdir(parents=True)
    for args in (["init", "-q"], ["config", "user.email", "t@example.org"], ["config", "user.name", "t"]):
        subprocess.run(["git", *args], cwd=root, check=True, capture_output=True)
    (root / ".gitignore").write_text("/data/\n")
    (root / "dvc.yaml").write_text("stages:\n" + "".join(
        f"  {out}:\n    cmd: echo the platform builds it\n    outs:\n      - data/platform/{out}/_all\n"
        for out in outputs))
    return root


def write_tiny_run_config(root: Path, checkpoint_interval: int) -> None:
    """`configs/run.yaml` for a training_run of 6 steps of a one-layer Llama (hidden 32, random weights),
    checkpointing every `checkpoint_interval` steps: seconds on one CPU thread."""
    (root / "configs" / "run.yaml").write_text(yaml.safe_dump({
        "model": {"model_type": "llama", "overrides": {"hidden_size": 32, "intermediate_size": 64,
                                                        "num_hidden_layers": 1, "num_attention_heads": 2,
                                                        "num_key_value_heads": 2}},
        "data": {"global_batch_size": 4, "micro_batch_size": 2},
        "validation": {"eval_interval": 4, "eval_batches": 1},
        "optimizer": {"lr": 0.01}, "checkpoint": {"interval": checkpoint_interval}, "max_steps": 6,
        "log_interval": 1, "cpu_threads": 1,
    }))
