"""Cleaning's workers are forked from a forkserver that has loaded the stage, the compiled kernels and
py3langid's model (worker_pool.py): a worker starts with them in memory, and the server is stopped when a
stage other than the per-source job's starts."""

import multiprocessing
import os
import resource
import sys
from concurrent.futures import ProcessPoolExecutor

import pytest

from platform_assets import stage_caches
from platform_assets.cleaning import worker_pool

pytestmark = pytest.mark.skipif("forkserver" not in multiprocessing.get_all_start_methods(),
                                reason="no forkserver on this platform: workers are spawned")


def _what_a_worker_has() -> tuple[bool, bool, float]:
    from platform_assets.cleaning import language_id

    usage = resource.getrusage(resource.RUSAGE_SELF)
    return (worker_pool.PRELOAD_MODULE in sys.modules, language_id._MODEL is not None,
            usage.ru_utime + usage.ru_stime)


def _forkserver_pid() -> int | None:
    from multiprocessing import forkserver

    return forkserver._forkserver._forkserver_pid


def test_a_worker_starts_with_the_kernels_and_the_model_loaded():
    worker_pool.stop_forkserver()  # a server another test started may hold another preload list
    context = worker_pool.worker_context()
    assert context.get_start_method() == "forkserver"
    with ProcessPoolExecutor(2, mp_context=context) as pool:
        preloaded, model, cpu = pool.submit(_what_a_worker_has).result()
    assert preloaded and model
    assert cpu < 0.3  # a spawned worker spent ~1.4 CPU-s on imports, kernels and the model first
    assert _forkserver_pid() is not None


def test_the_forkserver_is_kept_by_the_per_source_stages_and_stopped_by_another_stage():
    with ProcessPoolExecutor(1, mp_context=worker_pool.worker_context()) as pool:
        pool.submit(_what_a_worker_has).result()
    pid = _forkserver_pid()
    assert pid is not None
    assert "cleaning forkserver" not in stage_caches.release_other_stages("raw_documents")
    assert "cleaning forkserver" not in stage_caches.release_other_stages("cleaned_documents")
    # the per-source job runs dedup_signatures between one source's cleaning and the next source's
    assert "cleaning forkserver" not in stage_caches.release_other_stages("dedup_signatures")
    assert _forkserver_pid() == pid
    assert "cleaning forkserver" in stage_caches.release_other_stages("tokenized_documents")
    assert _forkserver_pid() is None
    assert not worker_pool.stop_forkserver()  # nothing left to stop
    with ProcessPoolExecutor(1, mp_context=worker_pool.worker_context()) as pool:  # the next pool starts one
        assert pool.submit(_what_a_worker_has).result()[0]
    assert _forkserver_pid() not in (None, pid)


_BURN = """
from concurrent.futures import ProcessPoolExecutor
from platform_assets.cleaning import worker_pool

def burn(n):
    return sum(i * i for i in range(n))

if __name__ == "__main__":
    with ProcessPoolExecutor(2, mp_context=worker_pool.worker_context()) as pool:
        list(pool.map(burn, [6_000_000] * 2))
"""


def test_the_workers_cpu_counts_in_the_callers_children_time(tmp_path):
    """The server is stopped (and so reaped) when the caller exits: the workers' CPU reaches the
    caller's parent through wait4 (the benchmarks' CPU figures), not init through an orphan."""
    import subprocess

    script = tmp_path / "burn.py"
    script.write_text(_BURN)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, str(script)], check=True, timeout=300)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    children_cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    # 2 x 6 M squares in the workers, ~0.4 CPU-s each; 0.05 s reached the parent with the server orphaned
    assert children_cpu > 0.5


def _probe_package(tmp_path, body: str):
    package = tmp_path / "probe_kernels"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "warm.py").write_text(body)
    return package


def test_a_cold_kernel_cache_is_filled_by_a_child_once_per_sources_stamp(tmp_path, monkeypatch):
    runs = tmp_path / "runs.txt"
    package = _probe_package(tmp_path, f"with open({str(runs)!r}, 'a') as f:\n    f.write('x')\n")
    cache = tmp_path / "numba-cache"
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(cache))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))  # the child finds the probe package there

    assert worker_pool.warm_kernel_cache("probe_kernels.warm", package)  # cold: the child ran
    assert runs.read_text() == "x"
    assert len(list(cache.glob(worker_pool.PRELOADED_MARKER_PREFIX + "*"))) == 1
    assert not worker_pool.warm_kernel_cache("probe_kernels.warm", package)  # warm: nothing runs
    assert runs.read_text() == "x"

    # the same bytes with a new mtime (a fresh clone, a checkout): numba's index calls that stale
    source = package / "warm.py"
    stat = source.stat()
    os.utime(source, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    assert worker_pool.warm_kernel_cache("probe_kernels.warm", package)
    assert runs.read_text() == "xx"
    assert len(list(cache.glob(worker_pool.PRELOADED_MARKER_PREFIX + "*"))) == 1  # the old stamp's is gone


def test_a_failed_warm_up_leaves_no_marker_and_is_retried(tmp_path, monkeypatch, caplog):
    package = _probe_package(tmp_path, "raise SystemExit('no compiler here')\n")
    cache = tmp_path / "numba-cache"
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(cache))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    with caplog.at_level("WARNING", logger=worker_pool.__name__):
        assert worker_pool.warm_kernel_cache("probe_kernels.warm", package)
    assert "no compiler here" in caplog.text
    assert not list(cache.glob(worker_pool.PRELOADED_MARKER_PREFIX + "*"))
    assert worker_pool.warm_kernel_cache("probe_kernels.warm", package)  # tried again, not marked done


def test_without_a_cache_location_nothing_is_compiled_ahead(tmp_path, monkeypatch):
    runs = tmp_path / "runs.txt"
    package = _probe_package(tmp_path, f"open({str(runs)!r}, 'a').write('x')\n")
    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    monkeypatch.setenv("PLATFORM_ASSETS_CACHE_DIR", "")  # set but empty: the platform's cache is off
    assert not worker_pool.warm_kernel_cache("probe_kernels.warm", package)
    assert not runs.exists()
