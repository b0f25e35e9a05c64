"""`python -m platform_assets.training_launch.die_with_parent <parent pid> <program> [args...]`: exec the
program so that it receives SIGTERM when the parent process dies.

The training_run asset starts torchrun through Dagster Pipes. If the Dagster run process is killed
(SIGKILL, out of memory), torchrun used to be orphaned and trained on unsupervised: measured, the
orphan of a 6-step run wrote checkpoints 4 and 6 after its run was dead, and a re-run started
meanwhile would have been a second writer of the same checkpoint directory. With this, torchrun gets
SIGTERM, passes it to its workers, and the training loop finishes its step, saves a checkpoint and
exits; the re-run resumes from it. Linux only (prctl PR_SET_PDEATHSIG); elsewhere the program just runs.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1  # linux/prctl.h


def main(argv: list[str]) -> None:
    parent, program = int(argv[0]), argv[1:]
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent:  # the parent died before the signal was armed
            sys.exit(f"die_with_parent: parent {parent} is gone; not starting {program[0]}")
    os.execv(program[0], program)  # the death signal survives exec (not a set-uid program)


if __name__ == "__main__":
    main(sys.argv[1:])
