"""Placement windows: an offline strategy places at most `packing.max_pieces_in_memory` pieces at once.

Offline strategies need every piece of what they place before placing any, and the layout costs
~200-300 bytes a piece while it is made and checked (pack(): the pieces' int64 arrays, the sort, the
placement lists; verify_packing's sort and masks; tracemalloc on the GPT-2 lengths of the whole
corpus x4 copied 4 times, 321,684 documents in 883,416 pieces: pack 75 MB, the check 79 MB). Over a
whole set that is memory in proportion to the corpus (packed_shards' peak tree RSS 355 MB at 1x of
the real corpus, 463 MB at 16x; 436 MB with these windows). A set of more pieces than the cap is
therefore packed in consecutive windows of whole documents, each window by the strategy on its own
with its samples closed at its end, as the `window` strategy does with a fixed number of documents;
the layout is then bounded by the cap, not the set (~20 MB at the default 65,536 pieces). A set
within the cap is one window: the layout of a global pass, byte for byte.

Windows hold whole documents (a document's pieces are never in two windows); a document of more
pieces than the cap is a window by itself. The `window` strategy's own windows are never cut: a
placement window holds whole strategy windows, so its layout does not depend on the cap; `none`
places each piece alone, so neither does it. For best_fit_decreasing, first_fit_decreasing and
first_fit the cap is part of the layout (and of index.json's `packing`), and what it costs is the
partly filled samples closed at each window's end: a few per 65,536 pieces.
"""

from __future__ import annotations

import numpy as np

from platform_assets.packing.pieces import check_overlong, check_positive_int
from platform_assets.packing.spilled_columns import SpilledColumn

__all__ = ["piece_counts", "placement_windows"]


def piece_counts(lengths: np.ndarray, seq_len: int, overlong: str) -> np.ndarray:
    """Pieces of each document (pieces.py): ceil(L / seq_len) when overlong documents are split; one,
    or none for a document longer than seq_len, when they are filtered."""
    check_overlong(overlong)
    lengths = np.asarray(lengths, np.int64)
    if overlong == "split":
        return (lengths + (seq_len - 1)) // seq_len
    return (lengths <= seq_len).astype(np.int64)


# documents whose lengths are read at once while the windows are cut (8 B each: 8 MB)
LENGTHS_PER_READ = 1 << 20


def placement_windows(lengths: np.ndarray | SpilledColumn, seq_len: int, overlong: str, max_pieces: int,
                      strategy_window: int | None = None,
                      lengths_per_read: int = LENGTHS_PER_READ) -> list[tuple[int, int]]:
    """Consecutive document ranges [d0, d1) covering `lengths`, each of at most `max_pieces` pieces
    unless a single unit has more. The units are documents, or blocks of `strategy_window` documents
    (the `window` strategy's own windows, never cut). One range for a set within the cap; none for an
    empty one. Greedy from the first document, so the ranges depend on the lengths and settings only.

    The lengths are read `lengths_per_read` at a time (rounded to whole units), so that a set's
    spilled lengths (spilled_columns.py) are never in memory together; the ranges are the same for
    any read size: a window ends where the next unit would exceed the cap, which the reads carry over."""
    max_pieces = check_positive_int("max_pieces", max_pieces)
    block = check_positive_int("strategy_window", strategy_window) if strategy_window is not None else 1
    n = len(lengths)
    if n == 0:
        return []
    read = max(1, check_positive_int("lengths_per_read", lengths_per_read) // block) * block
    bounds = [0]  # in units
    before = 0  # pieces of the units already in windows
    units_read = pieces_read = 0  # units and pieces of the reads before this one
    for first in range(0, n, read):
        counts = piece_counts(lengths[first : first + read], seq_len, overlong)
        if block > 1:
            counts = np.add.reduceat(counts, np.arange(0, counts.size, block))
        total = pieces_read + np.cumsum(counts)  # pieces up to each unit of this read, from the set's start
        while bounds[-1] < units_read + total.size:
            start = bounds[-1]
            end = units_read + int(np.searchsorted(total, before + max_pieces, side="right"))
            if end == units_read + total.size:
                break  # the window may go on into the next read
            end = max(end, start + 1)  # a unit of more pieces than the cap is a window by itself
            bounds.append(end)
            # pieces up to the window's last unit (the last of the read before, if it ends there)
            before = int(total[end - 1 - units_read]) if end > units_read else pieces_read
        units_read += total.size
        pieces_read = int(total[-1])
    if bounds[-1] < units_read:
        bounds.append(units_read)
    return [(a * block, min(b * block, n)) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
