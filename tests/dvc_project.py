"""A git repository laid out like the platform's checkout, for the tests that version shard sets with
the real `dvc` CLI: `configs/`, a git-ignored `data/`, and a dvc.yaml whose stages own the shard sets."""

from __future__ import annotations

import subprocess
from pathlib import Path


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
