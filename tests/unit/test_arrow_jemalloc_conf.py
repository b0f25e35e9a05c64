"""Every platform process starts Arrow's jemalloc with decay 0 (platform_assets/__init__.py): buffers a
stage frees leave RSS at once instead of staying up to Arrow's built-in 1,000 ms, which held a freed
batch beside the next one (platform_assets/heap.py has the stage figures). jemalloc reads its
configuration once, at its first allocation, so each case runs in a fresh interpreter."""

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the jemalloc pool is chosen on Linux")

# 200 MB of 64 KiB buffers (jemalloc's slab/large classes that decay applies to; 8 MiB ones are purged
# either way), written so they are resident, then freed: RSS right after the free, in MB above the start
PROBE = """
import json, os, sys
import platform_assets, pyarrow as pa, ctypes
def rss():
    return int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
start = rss()
bufs = [pa.allocate_buffer(64 * 1024) for _ in range(3200)]
for b in bufs:
    ctypes.memset(b.address, 1, b.size)
full = rss()
del bufs
print(json.dumps({"pool": pa.default_memory_pool().backend_name, "conf": os.environ.get("JE_ARROW_MALLOC_CONF"),
                  "held_mb": full - start, "left_mb": rss() - start}))
"""


def _probe(env_conf: str | None) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("JE_ARROW_MALLOC_CONF", "ARROW_DEFAULT_MEMORY_POOL")}
    if env_conf is not None:
        env["JE_ARROW_MALLOC_CONF"] = env_conf
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def test_a_platform_process_returns_freed_arrow_buffers_at_once():
    from platform_assets import ARROW_JEMALLOC_CONF

    result = _probe(None)
    assert result["pool"] == "jemalloc" and result["conf"] == ARROW_JEMALLOC_CONF
    assert result["held_mb"] > 150  # the buffers were resident
    assert result["left_mb"] < 30, result  # and gone right after the free


def test_a_configuration_in_the_environment_wins():
    result = _probe("dirty_decay_ms:1000,muzzy_decay_ms:1000")  # Arrow's own build setting
    assert result["conf"] == "dirty_decay_ms:1000,muzzy_decay_ms:1000"
    assert result["held_mb"] > 150
    assert result["left_mb"] > 60, result  # jemalloc kept the freed pages: the decay above is what returns them
