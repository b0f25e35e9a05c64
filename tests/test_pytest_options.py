"""The suite's own options: pyproject's addopts run it on 2 xdist workers, and a run without xdist
(`-p no:xdist`, e.g. to debug one test with pdb) still parses them and runs serially."""

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_addopts_parse_without_xdist_and_the_run_is_serial():
    # --collect-only keeps it to collection (~3 s); without tests/conftest.py's stand-in options pytest
    # stops at addopts' --numprocesses=2 with "unrecognized arguments" (exit 4)
    res = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:xdist", "-p", "no:cacheprovider", "--collect-only",
                          "-q", "tests/unit/test_config.py"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    assert "tests/unit/test_config.py::" in res.stdout and "bringing up nodes" not in res.stdout, res.stdout[-2000:]
