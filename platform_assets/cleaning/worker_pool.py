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

Before the server starts, a cold kernel cache is filled by a short-lived child (`warm_kernel_cache`),
so that the server loads the kernels rather than compiling them and keeps no compiler heap that every
worker would inherit.
"""

from __future__ import annotations

import atexit
import hashlib
import importlib.metadata
import logging
import multiprocessing
import os
import subprocess
import sys
from multiprocessing import forkserver
from multiprocessing.context import BaseContext
from pathlib import Path

from platform_assets import stage_caches
from platform_assets.cache_dir import kernel_cache_dir

PRELOAD_MODULE = "platform_assets.cleaning.worker_preload"
CLEANING_PACKAGE = Path(__file__).resolve().parent  # every kernel is under cleaning/ (quality/kernels.py)
PRELOADED_MARKER_PREFIX = "preloaded-"

logger = logging.getLogger(__name__)


def _sources_stamp(package: Path) -> str:
    """What numba's cache index checks a kernel against (its source file's mtime and size, and numba's
    version), for every module under `package`, and Python's version: a new stamp means a cold cache
    (a fresh install or clone, a `git pull`), even where the sources' bytes are the same."""
    digest = hashlib.sha256(f"{sys.version}|numba {importlib.metadata.version('numba')}".encode())
    for path in sorted(package.rglob("*.py")):
        st = path.stat()
        digest.update(f"|{path.relative_to(package).as_posix()}:{st.st_mtime_ns}:{st.st_size}".encode())
    return digest.hexdigest()[:16]


def warm_kernel_cache(module: str = PRELOAD_MODULE, package: Path = CLEANING_PACKAGE) -> bool:
    """Fill numba's on-disk cache of the kernels under `package` in a child process that imports
    `module`, when this checkout has not done so yet; True if a child ran.

    Why a child: the forkserver's preload from a warm cache costs ~2 CPU-s and leaves the server at
    ~277 MB resident; from a cold one it compiles every kernel (~25 CPU-s) and LLVM's heap stays, 439
    MB resident, which each worker forked from it starts with. pipeline_scaling's 1x on a fresh clone:
    cleaned_documents[code] peaked at 1,948 MB by high-water marks (server and two workers at 448-487
    MB each), where a warm cache gives ~1,400. The child's heap goes with it; the compile's CPU is the
    same, paid once. A marker named for the sources' stamp records a child that finished; where no
    cache location is configured (numba then caches beside the sources, or compiles in each process)
    nothing is done."""
    configured = os.environ.get("NUMBA_CACHE_DIR")
    cache = Path(configured) if configured else kernel_cache_dir(package)
    if cache is None:
        return False
    marker = cache / f"{PRELOADED_MARKER_PREFIX}{_sources_stamp(package)}"
    if marker.exists():
        return False
    env = dict(os.environ)
    platform_root = str(Path(__file__).resolve().parents[2])  # the folder that holds platform_assets
    env["PYTHONPATH"] = os.pathsep.join(p for p in (platform_root, env.get("PYTHONPATH")) if p)
    done = subprocess.run([sys.executable, "-c", f"import {module}"], env=env, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True, check=False)
    if done.returncode != 0:  # the forkserver then compiles as it did before; its workers report any error
        logger.warning("compiling the cleaning kernels ahead of the workers failed (exit %s): %s",
                       done.returncode, done.stderr.strip()[-2000:])
        return True
    try:
        cache.mkdir(parents=True, exist_ok=True)
        for old in cache.glob(f"{PRELOADED_MARKER_PREFIX}*"):  # markers of earlier checkouts' stamps
            old.unlink(missing_ok=True)
        marker.touch()
    except OSError as err:  # a cache numba could not write either: the next run tries again, as numba does
        logger.debug("no marker for the warmed kernel cache at %s: %s", cache, err)
    return True


def worker_context() -> BaseContext:
    """The multiprocessing context cleaning's process pools start their workers with."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    warm_kernel_cache()
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
