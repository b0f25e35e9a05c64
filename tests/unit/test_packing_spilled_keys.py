"""SpilledKeys: distinct counts and repeats over hash partitions, on disk or in memory, equal to
numpy's over all the keys at once."""

from __future__ import annotations

import os

import numpy as np
import pytest

from platform_assets.packing import spilled_keys
from platform_assets.packing.spilled_keys import MAX_PARTITIONS, SpilledKeys


def _keys(dtype: str, n: int, distinct: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    pool = rng.integers(0, 2**63, (distinct, 2 if dtype == "V16" else 1), dtype=np.uint64)
    picked = pool[rng.integers(0, distinct, n)]
    return np.ascontiguousarray(picked).view(dtype).reshape(-1)


@pytest.mark.parametrize("on_disk", [True, False])
@pytest.mark.parametrize("dtype", ["uint64", "V16"])
def test_distinct_and_repeated_are_numpys_over_every_partition(tmp_path, on_disk, dtype):
    keys = _keys(dtype, 20_000, 7_000, seed=1)
    store = SpilledKeys(tmp_path if on_disk else None, "k", dtype, expected=keys.size, budget_bytes=4096)
    assert store.partitions > 1
    for a in range(0, keys.size, 997):  # added in uneven batches, as runs arrive
        store.add(keys[a : a + 997])
    values, counts = np.unique(keys, return_counts=True)
    assert store.distinct() == values.size
    assert sorted(store.repeated().tolist()) == sorted(values[counts > 1].tolist())
    if on_disk:
        assert any(tmp_path.iterdir())
    store.close()
    assert not any(tmp_path.iterdir())


def test_partitions_follow_the_budget_up_to_the_cap(tmp_path):
    assert SpilledKeys(tmp_path, "a", np.uint64, expected=0).partitions == 1
    assert SpilledKeys(tmp_path, "b", np.uint64, expected=1000, budget_bytes=8000).partitions == 1
    assert SpilledKeys(tmp_path, "c", np.uint64, expected=1001, budget_bytes=8000).partitions == 2
    assert SpilledKeys(tmp_path, "d", "V16", expected=10**9).partitions == MAX_PARTITIONS


def test_a_partition_holds_every_copy_of_its_keys(tmp_path):
    """No repeat is missed because its copies went to different partitions: the same key added in
    separate calls, among others, is reported once."""
    store = SpilledKeys(tmp_path, "k", np.uint64, expected=10_000, budget_bytes=1024)
    rng = np.random.default_rng(2)
    unique = np.unique(rng.integers(0, 2**63, 5_000, dtype=np.uint64))
    store.add(unique)
    store.add(unique[[17, 4_000]])
    assert store.distinct() == unique.size
    assert sorted(store.repeated().tolist()) == sorted(unique[[17, 4_000]].tolist())
    store.close()


def test_keys_must_be_whole_words(tmp_path):
    with pytest.raises(ValueError, match="64-bit words"):
        SpilledKeys(tmp_path, "k", "V12", expected=1)


def test_no_file_stays_open_between_adds(tmp_path, monkeypatch):
    """A packing run holds a store per (split, source) to its end: its partition files are opened for
    each flush and closed again, so open files do not grow with sets x partitions."""
    monkeypatch.setattr(spilled_keys, "FLUSH_BYTES", 256)
    fds = len(os.listdir("/proc/self/fd"))
    stores = [SpilledKeys(tmp_path, f"set-{i}", np.uint64, expected=50_000, budget_bytes=1024) for i in range(8)]
    rng = np.random.default_rng(3)
    for _ in range(5):
        for store in stores:
            store.add(rng.integers(0, 2**63, 300, dtype=np.uint64))
    assert all(store.partitions == 256 for store in stores)
    assert len(list(tmp_path.iterdir())) > 8 * 100  # flushed into many partition files ...
    assert len(os.listdir("/proc/self/fd")) == fds  # ... none of them left open
    assert [store.distinct() for store in stores] == [1500] * 8
    for store in stores:
        store.close()
    assert not any(tmp_path.iterdir())
