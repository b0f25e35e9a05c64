"""N-gram repetition statistics for Gopher's repetition rules, exact, in numpy: the reference form.

N-grams are numbered exactly (no hashing) by sorting packed int64 keys; level n only looks at the
positions where level n-1 repeats (a few percent of the positions by n = 5 in prose); the duplicate
n-gram walk visits only positions whose n-gram occurred before. GopherRepetition runs the same levels,
bounds and walks compiled, one call per document (ngram_kernels.ngram_check_values: these took ~0.9 of the
1.9 CPU-s quality spent in benchmarks/cleaning_stage.py, ~25 numpy calls per level); the tests check
the semantics here and the kernel against them.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterator
from typing import NamedTuple

import numpy as np

from platform_assets.cleaning.quality.text_view import Vocab


class Level(NamedTuple):
    """The n-grams of one size, restricted to the positions where one can repeat.

    `pos` (increasing) are start positions in the token list; `ids[i]` numbers the n-gram at `pos[i]`
    (equal n-grams, equal ids); `counts[g]` is how often n-gram `g` occurs, `first[g]` the index into
    `pos` of its first occurrence. An n-gram that occurs twice or more is counted exactly: all of its
    occurrences are in `pos` (see :func:`ngram_levels`).
    """

    n: int
    pos: np.ndarray
    ids: np.ndarray
    counts: np.ndarray
    first: np.ndarray


def group(keys: np.ndarray, bound: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(ids, counts, first) of non-negative `keys` < `bound`, as in :class:`Level`.

    One sort of key * 2^B + index (numpy's SIMD sort of int64: ~1.5 ms for 200k values, where a
    stable argsort takes ~24 ms and np.unique(return_index=True) ~58 ms): equal keys end up adjacent
    and in position order, so the first of each run is the key's first occurrence.
    """
    m = keys.size
    bits = m.bit_length()
    if bound << bits < 2**63:
        packed = keys << bits
        packed |= np.arange(m, dtype=np.int64)
        packed.sort()
        sorted_keys, order = packed >> bits, packed & ((1 << bits) - 1)
    else:  # a key too wide to pack (several million tokens): the stable argsort
        order = np.argsort(keys, kind="stable")
        sorted_keys = keys[order]
    run_start = np.empty(m, dtype=bool)
    run_start[0] = True
    np.not_equal(sorted_keys[1:], sorted_keys[:-1], out=run_start[1:])
    starts = np.flatnonzero(run_start)
    ids = np.empty(m, dtype=np.int64)
    ids[order] = np.cumsum(run_start) - 1
    counts = np.empty(starts.size, dtype=np.int64)
    np.subtract(starts[1:], starts[:-1], out=counts[:-1])
    counts[-1] = m - starts[-1]
    return ids, counts, order[starts]


def ngram_levels(vocab: Vocab, max_n: int) -> Iterator[Level]:
    """The levels n = 1, 2, ..., max_n; stops early once no n-gram occurs twice (no longer one can).

    An n-gram that occurs twice starts with an (n-1)-gram that occurs twice, so level n only looks at
    the positions where level n-1 found a repeat: in prose, a few percent of the positions by n = 5.
    N-grams are numbered exactly (no hashing): the n-gram at a position is the pair (id of its
    (n-1)-gram, id of its last token), packed into one int64.
    """
    word_ids = vocab.ids
    n_tokens, n_distinct = len(word_ids), len(vocab.counts)
    level = Level(1, np.arange(n_tokens, dtype=np.int64), word_ids, vocab.counts, vocab.first)
    while True:
        yield level
        n = level.n + 1
        if n > max_n:
            return
        repeated = level.counts[level.ids] >= 2
        pos, prefix = level.pos[repeated], level.ids[repeated]
        end = int(np.searchsorted(pos, n_tokens - n, side="right"))  # the n-gram must fit
        pos, prefix = pos[:end], prefix[:end]
        if pos.size < 2:
            return
        keys = prefix * n_distinct + word_ids[pos + (n - 1)]
        level = Level(n, pos, *group(keys, len(level.counts) * n_distinct))


def top_ngram_chars(level: Level, cum: np.ndarray) -> int | None:
    """Characters in the most frequent n-gram's occurrences (joined with spaces, as datatrove's
    n-gram strings are), or None if no n-gram occurs twice. Ties go to the n-gram seen first, as with
    datatrove's Counter.most_common."""
    top = int(level.counts.max())
    if top < 2:
        return None
    tied = np.flatnonzero(level.counts == top)
    i = int(level.pos[level.first[tied].min()])
    n = level.n
    return (int(cum[i + n] - cum[i]) + n - 1) * top


def later_occurrences(level: Level) -> np.ndarray:
    """Indices into `level.pos` of the n-grams that occurred earlier (every occurrence but the first)."""
    later = np.ones(level.pos.size, dtype=bool)
    later[level.first] = False
    return np.flatnonzero(later)


def repeat_bound(starts: np.ndarray, cum: np.ndarray, m: int) -> int:
    """Characters in the m-grams at `starts` (those that fit): an upper bound of the duplicate m-gram
    characters when `starts` are the later occurrences of some level n <= m (see GopherRepetition)."""
    fits = starts[: int(np.searchsorted(starts, len(cum) - 1 - m, side="right"))]
    return int((cum[fits + m] - cum[fits]).sum())


def union_bound(starts: np.ndarray, cum: np.ndarray, m: int) -> int:
    """Characters in the union of the m-grams at `starts` (increasing; those that fit): a tighter
    bound than :func:`repeat_bound`, which counts overlapping m-grams once each. The walk counts
    disjoint m-grams, all at such starts, so it cannot count more. In repetitive text (a repeated
    passage of k tokens has ~k overlapping later m-grams) this rules out most walks the sum cannot."""
    fits = starts[: int(np.searchsorted(starts, len(cum) - 1 - m, side="right"))]
    if fits.size == 0:
        return 0
    new_run = np.empty(fits.size, dtype=bool)
    new_run[0] = True
    np.greater_equal(fits[1:], fits[:-1] + m, out=new_run[1:])
    run = np.flatnonzero(new_run)
    ends = fits[np.append(run[1:] - 1, fits.size - 1)] + m
    return int((cum[ends] - cum[fits[run]]).sum())


def dup_ngram_chars(
    level: Level, cum: np.ndarray, stop_above: float, candidates: np.ndarray | None = None
) -> int | None:
    """datatrove's find_all_duplicate on one level: walk the n-grams, and at one seen before add its
    characters and jump n tokens ahead (overlapping repeats are not counted twice; the n-grams jumped
    over are not remembered as seen). Stops once the total passes `stop_above`.

    Same result as that walk, but only the positions whose n-gram occurred earlier are visited (in
    prose a few percent): a position is "seen" if the n-gram's first occurrence was not jumped over,
    or if an earlier repeat of it was visited. None when no n-gram occurs twice. `candidates`:
    :func:`later_occurrences` of the level, if already computed.
    """
    if candidates is None:
        candidates = later_occurrences(level)
    if candidates.size == 0:
        return None
    n = level.n
    positions = level.pos[candidates]
    grams = level.ids[candidates]
    firsts = level.pos[level.first[grams]]
    lengths = cum[positions + n] - cum[positions]
    jumped_starts: list[int] = []  # jumped-over ranges are [start, start + n - 2], increasing
    visited_repeats: set[int] = set()
    next_visited = 0
    repeated = 0
    for p, gram, f, length in zip(
        positions.tolist(), grams.tolist(), firsts.tolist(), lengths.tolist(), strict=True
    ):
        if p < next_visited:
            continue  # jumped over
        i = bisect_right(jumped_starts, f) - 1
        first_jumped = i >= 0 and f <= jumped_starts[i] + n - 2
        if not first_jumped or gram in visited_repeats:
            repeated += length
            if repeated > stop_above:
                return repeated
            jumped_starts.append(p + 1)
            next_visited = p + n
        else:
            visited_repeats.add(gram)
    return repeated
