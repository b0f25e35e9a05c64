"""Whether a run's worker process is still the one that started it (defs/dead_runs.py)."""

import os
import subprocess
import sys
import time

import pytest

from platform_assets.defs.dead_runs import _process_alive_since

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


def test_a_live_worker_is_alive_and_a_pid_reused_after_the_run_started_is_not():
    assert _process_alive_since(os.getpid(), time.time())
    # this process started after the epoch: for a run that began at 0 it would be a reused pid
    assert not _process_alive_since(os.getpid(), 0)


def test_an_exited_worker_is_dead_reaped_or_not():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.monotonic() + 30
    while open(f"/proc/{child.pid}/stat").read().rsplit(")", 1)[1].split()[0] != "Z":  # exited, not reaped
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert not _process_alive_since(child.pid, time.time())
    child.wait()
    assert not _process_alive_since(child.pid, time.time())
