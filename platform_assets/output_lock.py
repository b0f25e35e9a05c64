"""One writer at a time per output directory, across processes and runs, and a stale-read check.

Two runs materializing the same partition at once (two `dagster asset materialize` commands, a backfill
beside a sensor run) both stage and commit the same output. Without a lock the second one's crash repair
(`Storage._recover`, which deletes every `.<name>.staging-*` it finds as a dead writer's leftover) deletes
the first run's staging directory while it is being written, and the first run fails with a missing file.
`Storage.staged_dir` therefore holds `<root>/.locks/<output>.lock` (flock, exclusive) from before that
repair until its commit (and removes it then): the second writer waits, then writes its own complete output.
flock, not a lock file made with O_EXCL: the kernel drops it when the process dies (SIGKILL, OOM), so a
crashed run never leaves a lock that needs clearing by hand.

S3 has no flock and pyarrow's S3 filesystem no conditional put; there the runs are serialised by the
Dagster instance instead (RELIABILITY.md, "Concurrency"), and `BasedOn` still stops a stale commit
except in the moment between its check and the copy.

`BasedOn` is for outputs that build on their previous version (incremental dedup reads `_signatures`):
the committing run checks that the output is still the version it read, else it fails without writing,
so two runs that read the same version cannot both commit (the second would drop the first's additions).
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

log = logging.getLogger("platform_assets.storage")


class ConcurrentCommitError(RuntimeError):
    """The output changed after this run read it: another run committed first (nothing was written)."""


@dataclass(frozen=True)
class BasedOn:
    """The version (sha256 of `_manifest.json`, None: no output yet) of an output a run read before
    computing its next version."""

    version: str | None


def check_based_on(based_on: BasedOn, current: str | None, uri: str) -> None:
    if current != based_on.version:
        raise ConcurrentCommitError(
            f"{uri} changed while this run was computing from it (read version {based_on.version or 'none: no output'}"
            f", now {current or 'none'}): another run committed first, and committing this one would drop what that "
            f"run added. Nothing was written; run again to build on the new version.")


@contextmanager
def output_lock(lock_path: str, uri: str) -> Iterator[None]:
    """Hold the exclusive lock of one output; waits while another process holds it.

    The lock file is removed by its holder on release, so no lock file stays behind; a waiter that then
    gets the lock of the removed file sees that the path now names another file (or none) and locks again
    (the usual flock + unlink protocol: two holders would otherwise each hold a different file)."""
    waited_since = None
    while True:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as err:
            if err.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                os.close(fd)
                raise
            if waited_since is None:
                holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "unknown"
                log.warning("waiting for %s: another process is writing it (%s; lock %s)", uri, holder, lock_path)
                waited_since = time.monotonic()
            fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            current = os.stat(lock_path).st_ino
        except FileNotFoundError:
            current = None
        if current == os.fstat(fd).st_ino:
            break
        os.close(fd)  # the holder removed (and maybe someone recreated) the file we waited on: lock anew
    if waited_since is not None:
        log.warning("got %s after waiting %.1f s", uri, time.monotonic() - waited_since)
    try:
        try:  # who holds it, for the waiting message only: a full disk must not fail the write here
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()} since {time.time():.0f}\n".encode(), 0)
        except OSError:
            pass
        yield
    finally:
        os.unlink(lock_path)  # while still holding it: a waiter on this file then sees it gone
        os.close(fd)  # closing the last descriptor releases the flock
