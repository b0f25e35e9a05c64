"""Placement windows (packing/windows.py): ranges of whole documents of at most max_pieces pieces,
greedy from the first document, the `window` strategy's own windows never cut."""

import numpy as np
import pytest

from platform_assets.packing.spilled_columns import SpilledColumn
from platform_assets.packing.strategies import pack
from platform_assets.packing.windows import piece_counts, placement_windows

SEQ_LEN = 64


def test_piece_counts_follow_the_overlong_mode():
    lengths = np.array([1, 63, 64, 65, 128, 129, 300])
    assert piece_counts(lengths, SEQ_LEN, "split").tolist() == [1, 1, 1, 2, 2, 3, 5]
    assert piece_counts(lengths, SEQ_LEN, "filter").tolist() == [1, 1, 1, 0, 0, 0, 0]
    # the same counts pack() makes
    for overlong in ("split", "filter"):
        counts = np.bincount(pack(lengths, SEQ_LEN, "none", overlong).piece_doc, minlength=lengths.size)
        assert counts.tolist() == piece_counts(lengths, SEQ_LEN, overlong).tolist()


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("overlong", ["split", "filter"])
@pytest.mark.parametrize("strategy_window", [None, 7])
def test_windows_cover_the_documents_greedily_within_the_cap(seed, overlong, strategy_window):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 5 * SEQ_LEN, int(rng.integers(1, 400)))
    cap = int(rng.integers(1, 60))
    windows = placement_windows(lengths, SEQ_LEN, overlong, cap, strategy_window)
    counts = piece_counts(lengths, SEQ_LEN, overlong)
    block = strategy_window or 1
    assert windows[0][0] == 0 and windows[-1][1] == lengths.size
    for (_, b), (c, _) in zip(windows, windows[1:], strict=False):
        assert b == c  # consecutive, no gap, no overlap
    for d0, d1 in windows:
        assert d1 > d0 and d0 % block == 0
        assert d1 % block == 0 or d1 == lengths.size  # a strategy window is never cut
        pieces = int(counts[d0:d1].sum())
        assert pieces <= cap or d1 - d0 <= block  # over the cap only as a single unit
        if d1 < lengths.size:  # the next unit would not have fit: windows are as full as they can be
            assert pieces + int(counts[d1 : d1 + block].sum()) > cap


def test_a_set_within_the_cap_is_one_window_and_an_empty_one_none():
    lengths = np.full(100, 10)
    assert placement_windows(lengths, SEQ_LEN, "split", 100) == [(0, 100)]
    assert placement_windows(lengths, SEQ_LEN, "split", 99) == [(0, 99), (99, 100)]
    assert placement_windows(np.zeros(0, np.int64), SEQ_LEN, "split", 5) == []
    # a document of more pieces than the cap is a window by itself
    assert placement_windows(np.array([10, 10, 10 * SEQ_LEN, 10]), SEQ_LEN, "split", 3) == [(0, 2), (2, 3), (3, 4)]
    with pytest.raises(ValueError, match="max_pieces must be >= 1"):
        placement_windows(lengths, SEQ_LEN, "split", 0)


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("overlong", ["split", "filter"])
@pytest.mark.parametrize("strategy_window", [None, 5])
def test_windows_are_the_same_whatever_the_lengths_read_at_once_and_from_a_spilled_column(
        seed, overlong, strategy_window, tmp_path):
    """The lengths are read a part at a time (a set's spilled lengths are never in memory together):
    windows that end at, just before or just after a read's end, or span several reads, come out as
    from one read of the whole set."""
    rng = np.random.default_rng(seed)
    # some documents of more pieces than the cap, so that single-unit windows fall on read boundaries too
    lengths = rng.integers(1, 12 * SEQ_LEN, int(rng.integers(1, 300)))
    cap = int(rng.integers(1, 40))
    whole = placement_windows(lengths, SEQ_LEN, overlong, cap, strategy_window, lengths_per_read=10**9)
    column = SpilledColumn(tmp_path / f"lengths-{seed}.i64", np.int64)
    for part in np.array_split(lengths, 7):
        column.append(part)
    for per_read in (1, 2, 3, 7, 16, 64, lengths.size):
        assert placement_windows(lengths, SEQ_LEN, overlong, cap, strategy_window, lengths_per_read=per_read) == whole
        assert placement_windows(column, SEQ_LEN, overlong, cap, strategy_window, lengths_per_read=per_read) == whole
