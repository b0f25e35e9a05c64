"""release_freed_heap gives glibc's free pages back: a heap of many small allocations with a few
kept alive (what a tokenizer's freed Encoding objects leave) shrinks in RSS only when trimmed."""

import ctypes
import platform

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
