"""release_freed_heap gives glibc's free pages back: a heap of many small allocations with a few
kept alive (what a tokenizer's freed Encoding objects leave) shrinks in RSS only when trimmed; and
mmap_threshold_fixed keeps large blocks in their own mappings while tokenize runs."""

import ctypes
import json
import platform
import subprocess
import sys

import psutil
import pytest

from platform_assets import heap

pytestmark = pytest.mark.skipif(platform.system() != "Linux" or heap._MALLOC_TRIM is None,
                                reason="malloc_trim is glibc's")


def _rss() -> int:
    return psutil.Process().memory_info().rss


def test_trimming_returns_a_fragmented_heaps_free_pages():
    libc = ctypes.CDLL(None)
    libc.malloc.restype = ctypes.c_void_p
    libc.free.argtypes = [ctypes.c_void_p]
    n, size = 400_000, 256  # ~100 MB in small blocks, below the mmap threshold: they live in the heap
    blocks = [libc.malloc(size) for _ in range(n)]
    for b in blocks:
        ctypes.memset(b, 1, size)  # touched: resident
    kept = blocks[::64]  # a few survivors pin the heap: glibc cannot shrink it from the top
    for i, b in enumerate(blocks):
        if i % 64:
            libc.free(b)
    del blocks
    before = _rss()
    heap.release_freed_heap()
    released = before - _rss()
    for b in kept:
        libc.free(b)
    assert released > 50 * 2**20  # most of the ~98 MB freed between the survivors


MMAP_PROBE = """
import ctypes, json
from platform_assets import heap

class MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                "fsmblks", "uordblks", "fordblks", "keepcost")]

libc = ctypes.CDLL(None)
libc.mallinfo2.restype = MallInfo2
libc.malloc.restype, libc.malloc.argtypes, libc.free.argtypes = ctypes.c_void_p, [ctypes.c_size_t], [ctypes.c_void_p]

def mapped(size):
    # the threshold is consulted only when the heap must grow: no free space may serve the block first
    heap.release_freed_heap()
    before = libc.mallinfo2().hblkhd  # bytes in blocks glibc mmapped on their own
    block = libc.malloc(size)
    own_mapping = libc.mallinfo2().hblkhd - before >= size
    libc.free(block)
    return own_mapping

libc.free(libc.malloc(6 << 20))  # freeing a mapped 6 MiB block raises the dynamic threshold past 5 MiB
out = {"dynamic": mapped(5 << 20)}
with heap.mmap_threshold_fixed(4 << 20) as applied:
    out["applied"] = applied
    out["fixed"] = mapped(5 << 20)
    libc.free(libc.malloc(8 << 20))  # a larger free does not raise a fixed threshold
    out["fixed_after_a_larger_free"] = mapped(5 << 20)
out["after"] = mapped(5 << 20)
print(json.dumps(out))
"""


def test_a_fixed_mmap_threshold_withstands_the_dynamic_raise_inside_its_block_only():
    """tokenize fixes M_MMAP_THRESHOLD while it runs: a block at or above it gets its own mapping (freed
    pages leave RSS) even after larger frees, which raise glibc's dynamic threshold; after the stage
    the threshold is glibc's ceiling. In a child process: the threshold is process-wide."""
    done = subprocess.run([sys.executable, "-c", MMAP_PROBE], capture_output=True, text=True, check=True)
    assert json.loads(done.stdout) == {"dynamic": False, "applied": True, "fixed": True,
                                       "fixed_after_a_larger_free": True, "after": False}


ARENA_PROBE = """
import ctypes, os, sys, threading
from platform_assets import heap

cap = None if sys.argv[1] == "-" else int(sys.argv[1])
libc = ctypes.CDLL(None)
libc.malloc.restype, libc.malloc.argtypes, libc.free.argtypes = ctypes.c_void_p, [ctypes.c_size_t], [ctypes.c_void_p]
libc.malloc_stats()  # one "Arena N:" section per arena, on stderr: those the imports' threads made
os.write(2, b"-- threads\\n")
applied = heap.cap_malloc_arenas(cap)
together = threading.Barrier(7)

def allocate():
    block = libc.malloc(1024)  # the thread's first malloc picks its arena
    together.wait()  # all six alive at once: an arena left by an ended thread would be reused
    libc.free(block)

threads = [threading.Thread(target=allocate) for _ in range(6)]
for t in threads:
    t.start()
together.wait()
libc.malloc_stats()
for t in threads:
    t.join()
print(applied)
"""


@pytest.mark.parametrize("cap", [None, 2, 1])
def test_capped_arenas_are_shared_by_the_threads_that_start_after(cap):
    """tokenize caps glibc's arenas before its threads start (tokenize.malloc_arena_max): six threads
    alive at once get an arena each under glibc's default (up to 8 per core), and share the cap's
    otherwise, or the arenas the process had made before if more. In a child process: the limit is
    process-wide and cannot be undone."""
    done = subprocess.run([sys.executable, "-c", ARENA_PROBE, "-" if cap is None else str(cap)],
                          capture_output=True, text=True, check=True)
    assert done.stdout.strip() == str(cap is not None)
    before, after = (sum(line.startswith("Arena ") for line in part.splitlines())
                     for part in done.stderr.split("-- threads\n"))
    assert before >= 1  # the main arena at least
    assert after == (before + 6 if cap is None else max(before, cap))
