"""SpilledColumn (packing/spilled_columns.py): per-row numbers appended in row order and read back by
row range from a raw file, whatever was buffered or flushed."""

import numpy as np
import pytest

from platform_assets.packing import spilled_columns
from platform_assets.packing.spilled_columns import SpilledColumn


@pytest.mark.parametrize("dtype", [np.int64, np.int32])
@pytest.mark.parametrize("flush_bytes", [8, 64 * 1024])
def test_ranges_rows_chunks_and_sum_equal_the_appended_values(tmp_path, monkeypatch, dtype, flush_bytes):
    monkeypatch.setattr(spilled_columns, "FLUSH_BYTES", flush_bytes)
    rng = np.random.default_rng(0)
    parts = [rng.integers(-(2**30), 2**30, int(n)) for n in rng.integers(0, 50, 40)]
    want = np.concatenate(parts).astype(dtype)
    col = SpilledColumn(tmp_path / "c.bin", dtype)
    for part in parts:
        col.append(part)
    assert len(col) == want.size and col.sum() == int(want.sum(dtype=np.int64))
    for a, b in [(0, want.size), (0, 0), (5, 6), (17, 300), (want.size - 3, want.size + 10), (-7, None)]:
        got = col[a:b]
        assert got.dtype == np.dtype(dtype) and np.array_equal(got, want[a:b]), (a, b)
    assert col[13] == int(want[13]) and isinstance(col[13], int)
    assert np.array_equal(np.concatenate(list(col.chunks(37))), want)
    with pytest.raises(IndexError):
        col[want.size]
    with pytest.raises(ValueError):
        col[::2]
    # appended after reads: the file grows, earlier reads' rows are unchanged
    col.append(np.array([1, 2, 3]))
    assert col[want.size : want.size + 3].tolist() == [1, 2, 3]
    if flush_bytes == 8:  # everything but the last small append is on disk, nothing is held
        assert (tmp_path / "c.bin").stat().st_size >= want.nbytes
    col.close()
    assert not (tmp_path / "c.bin").exists()


def test_values_wait_in_memory_only_until_the_flush_size(tmp_path, monkeypatch):
    monkeypatch.setattr(spilled_columns, "FLUSH_BYTES", 80)
    col = SpilledColumn(tmp_path / "c.bin", np.int64)
    col.append(np.arange(9))  # 72 bytes: held
    assert (tmp_path / "c.bin").stat().st_size == 0
    col.append(np.arange(2))  # 88 bytes: written
    assert (tmp_path / "c.bin").stat().st_size == 88 and col._pending_bytes == 0
