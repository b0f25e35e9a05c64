"""The process's memory allocators, tuned where a stage's measured peak called for it: glibc's heap and
Arrow's jemalloc pool. One module for the knobs; each stage uses the ones it measured a gain from.

- `release_freed_heap` (tokenize, after each slice): malloc_trim. A slice's Encoding objects are
  millions of small allocations (~71 bytes a token) that glibc keeps in its arenas once freed,
  fragmented, so each batch's RSS stacked on the last: tokenize's peak on the pipeline_scaling 16x
  input (base 16 MB, 64 MiB batches) was 1,060 MiB in-process, 815 MiB with a trim after each batch;
  a few ms a batch. After the real corpus's 1 MB documents the ordinary slices peaked 30-45 MB lower
  with a trim per slice than per batch (the freed space of a costly slice is not spread over by the
  next slices before it is returned).
- `fix_mmap_threshold` (dedup, under Arrow's system pool only). glibc serves an allocation of at least
  M_MMAP_THRESHOLD (128 KiB at start) with its own mmap, unmapped on free; but each such free raises
  the threshold to the freed size (up to 32 MiB on 64-bit), so after the first batch the shingle and
  signature temporaries of every later batch (numpy arrays of 1-30 MB) come from the heap, whose free
  holes stay resident. On 600 MB of text in 16 MiB batches (tests/test_dedup_bounded_memory.py's
  input) RSS grew 330 -> 466 MB over 35 batches while the live data grew 28 MB, and the stage ended at
  599 MB; with the threshold fixed at 128 KiB, 220 -> 251 MB and 286 MB at the end (mallopt also turns
  off the dynamic raise). Under the default jemalloc pool it bought nothing and cost time
  (pipeline_scaling 16x at --base-mb 8 in 2 MiB batches: peak 543 MB before, 553 with it, 546 without;
  work 2.5 -> 3.7 s, the page faults of every large temporary), so it applies under the system pool.
- Arrow's jemalloc decay (every platform process, set in `platform_assets/__init__.py` as
  `JE_ARROW_MALLOC_CONF`, before jemalloc starts). Arrow builds it with `dirty_decay_ms:1000`: freed
  pages stay resident up to ~1 s, so a stage that frees one batch and reads the next holds both.
  With decay 0, freed 64 KiB-1 MiB buffers (200 MB of them) leave RSS at once (139 -> 55 MB after the
  free; 8 MiB ones are purged either way); `pa.jemalloc_set_decay_ms(0)` called after start-up
  changed nothing there: it sets the default of arenas created later, not the main thread's.
  pipeline_scaling's 16x input (base 32 MB, 8 MiB batches, each stage process alone): packed_shards
  550 -> 452 MB, raw_documents[text] 493 -> 460 MB, cleaned_documents[text] 1.15x -> 1.08x of its 1x
  peak; its cost is page faults when the next batch reuses the memory: raw_documents' work CPU 1.6 ->
  2.1 s and packed_shards' 4.8 -> 5.6 s on 250-510 MB (system time; about 1% of the run's CPU, which
  cleaning and tokenize dominate). A decay of 100 ms kept most of the CPU and little of the memory
  (packed_shards 515 MB). Set `JE_ARROW_MALLOC_CONF` yourself to trade it back.

- `mmap_threshold_fixed` (tokenize, whatever Arrow's pool: the allocations are the Rust tokenizer's).
  The same ratchet: a freed 16 MB vector of a 1 MB document's alignments raises the threshold, and the
  vectors of every later slice come from the arenas. On the real corpus's six 1 MB documents among
  6,000 ordinary ones (in-process, quiet machine, two runs each): the large documents peaked at
  638-660 MB dynamic, 594-607 MB with 4 MiB fixed; the ordinary slices after them 606-621 against
  573-584 MB (arenas 350-359 against 271-293 MB); CPU 79.3 / 84.1 against 80.3 / 82.3 s. 128 KiB
  saved no more (577-582 MB; measured loaded, where it also took 96.6 CPU-s against 75.2). Scoped to
  the stage: the in-process job runs packing next in the same process. Ingest too (128 KiB, scoped to
  a source): the C heap's blocks there are the JSON parsers', Parquet's and Python's; on
  pipeline_scaling's 16x text source glibc's free heap grew 3 -> 28-33 MB over the run, and the
  peak's growth from 1x fell 25-29 -> 15-16 MB (in-process, two runs each, the same CPU).

- `cap_malloc_arenas` (tokenize, for the rest of its process: glibc cannot undo it). glibc gives a
  thread that finds every arena busy an arena of its own, up to 8 per core, each keeping its own
  fragmented free space. The stage's slice threads, a thread per document of 256 Ki characters or
  more, Arrow's and the writers' threads spread the encoders' blocks over up to 16 arenas on 2 cores,
  and RSS crept through the pipeline_scaling 16x input (8.1 GB, since tiktoken encodes the
  documents): 412 MiB in its first minute, 491 at its end, the thread arenas 43 -> 76 MiB and the
  small mappings 150 -> 190 MiB (/proc/PID/smaps); the process's peak 539-549 MB against 474 at 1x
  (1.13x over the corpus' sizes). With two arenas: 498 MB at 16x, and 865 against 910 CPU-s
  (2026-11-30, the stage alone on the kept run directory, MALLOC_ARENA_MAX=2).

glibc's knobs are no-ops where the C library is not glibc.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pyarrow as pa

M_MMAP_THRESHOLD = -3  # glibc malloc.h
M_ARENA_MAX = -8  # glibc malloc.h
# glibc's DEFAULT_MMAP_THRESHOLD_MAX on 64-bit: the most the dynamic threshold rises to, and where a
# scoped fixed threshold leaves it (glibc has no call that turns the dynamic raise back on)
MMAP_THRESHOLD_CEILING = 32 * 2**20


def _glibc_function(name: str) -> Callable[..., int] | None:
    """A function of the C library when it is glibc's (None for musl, macOS: no such knob)."""
    try:
        return getattr(ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6"), name)
    except (OSError, AttributeError):
        return None


_MALLOPT = _glibc_function("mallopt")
if _MALLOPT is not None:
    _MALLOPT.argtypes, _MALLOPT.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
_MALLOC_TRIM = _glibc_function("malloc_trim")


def _mallopt(param: int, value: int) -> bool:
    return _MALLOPT is not None and _MALLOPT(param, int(value)) == 1


def fix_mmap_threshold(threshold_bytes: int | None) -> bool:
    """mallopt(M_MMAP_THRESHOLD, threshold_bytes) for this process when Arrow's default pool is the
    system allocator; False when not applied (None, another Arrow pool, or no glibc)."""
    if threshold_bytes is None or pa.default_memory_pool().backend_name != "system":
        return False
    return _mallopt(M_MMAP_THRESHOLD, threshold_bytes)


@contextmanager
def mmap_threshold_fixed(threshold_bytes: int | None) -> Iterator[bool]:
    """M_MMAP_THRESHOLD fixed at `threshold_bytes` while the block runs (yields whether it was applied:
    not for None or without glibc), then left at MMAP_THRESHOLD_CEILING, as the dynamic threshold
    would stand after any freed block of that size."""
    applied = threshold_bytes is not None and _mallopt(M_MMAP_THRESHOLD, threshold_bytes)
    try:
        yield applied
    finally:
        if applied:
            _mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_CEILING)


def cap_malloc_arenas(arenas: int | None) -> bool:
    """mallopt(M_ARENA_MAX, arenas): threads that start after it share at most `arenas` of glibc's
    arenas (False when not applied: None, or no glibc). For the rest of the process, not a scope:
    glibc fixes its limit (arena.c's `narenas_limit`) the first time a thread needs a new arena after
    this is set, or, never set, once the process has more than 8, and never reads it again; arenas
    made before stay (new threads then share them). The tokenize stage calls it before its threads
    start."""
    return arenas is not None and _mallopt(M_ARENA_MAX, arenas)


def release_freed_heap() -> None:
    """Give the C heap's free pages back to the OS. A slice's Encoding objects are millions of small
    allocations (~71 bytes a token) that glibc keeps in its arenas once freed, fragmented, so each
    batch's RSS stacked on the last: tokenize's peak on the pipeline_scaling 16x input (base 16 MB,
    64 MiB batches) was 1,060 MiB in-process, 815 MiB with a trim after each batch (per slice: the
    same there; after the real corpus's 1 MB documents the ordinary slices peaked 30-45 MB lower with
    a trim per slice, so the stage trims per slice); a few ms a call."""
    if _MALLOC_TRIM is not None:
        _MALLOC_TRIM(0)
