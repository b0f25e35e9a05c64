"""The code base stays lint-clean (pyflakes, bugbear, import order, pyupgrade, line length)."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def test_ruff_finds_nothing():
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    if ruff is None:
        pytest.skip("ruff not installed (it is in the test extra)")
    res = subprocess.run([ruff, "check", "platform_assets", "training", "tests", "benchmarks"], cwd=REPO,
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stdout[-4000:]
