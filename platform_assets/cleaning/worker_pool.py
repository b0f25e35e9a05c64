"""Where the cleaning workers come from: forked from a forkserver that has imported what they need.

A worker started with `spawn` is a new interpreter that imports pyarrow and platform_assets, loads the
compiled kernels from numba's cache and maps py3langid's model before its first slice: ~1.4 CPU-s each
(measured: two sources cleaned with 2 workers each, 1.2 MB of prose per source: 6.1-6.8 CPU-s in the
workers with `spawn`, 1.5 with the forkserver, its own start included; the same outputs). A plain
`fork` of the caller is not safe: a Dagster run has threads whose locks a fork would copy mid-use. The
forkserver is a fresh single-threaded interpreter, started once per process on first use, which
imports `worker_preload` and then forks each worker: the workers share its pages copy-on-write.

It stays up while the per-source job's stages run (ingest, cleaning and dedup keys, for every source in
turn) and is stopped when a corpus stage starts (stage_caches), so the one-process CLI run does not
carry it (~250 MB resident) through dedup, tokenize and packing. Where the platform has no forkserver
(Windows), workers are spawned as before.
"""

from __future__ import annotations

import atexit
import multiprocessing
from multiprocessing import forkserver
from multiprocessing.context import BaseContext

from platform_assets import stage_caches

PRELOAD_MODULE = "platform_assets.cleaning.worker_preload"


def worker_context() -> BaseContext:
    """The multiprocessing context cleaning's process pools start their workers with."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    # read when the server starts; a server another caller started keeps its own list (the workers
    # then import what they need themselves: slower, the same results)
    context.set_forkserver_preload([PRELOAD_MODULE])
    return context


def stop_forkserver() -> bool:
    """Stop this process's forkserver, if one runs (the next pool starts another); True if it ran.
    `_stop` is multiprocessing's own (its tests use it; Python 3.8-3.13): without it the server stays."""
    server = getattr(forkserver, "_forkserver", None)
    if server is None or getattr(server, "_forkserver_pid", None) is None or not hasattr(server, "_stop"):
        return False
    server._stop()
    return True


stage_caches.register("cleaning forkserver", stage_caches.PER_SOURCE_STAGES, stop_forkserver)
# and at exit, so that this process reaps it: its CPU, and that of the workers it reaped, then counts in
# this process's children's time (wait4, `time`, the benchmarks); an orphaned server would take the
# workers' CPU with it to init (without a server running, nothing to do)
atexit.register(stop_forkserver)
