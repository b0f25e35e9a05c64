"""The survey's per-set id files: ids read back by row range across the appended batches."""

from __future__ import annotations

import pyarrow as pa
import pytest

from platform_assets.packing.id_store import SpilledIds


def _store(tmp_path, sizes: list[int]) -> tuple[SpilledIds, list[str]]:
    store, ids, n = SpilledIds(tmp_path / "ids-00000.arrow"), [], 0
    for size in sizes:
        batch = [f"doc-{n + i}-{'é' * (i % 3)}" for i in range(size)]
        store.append(pa.array(batch, pa.string()))
        ids += batch
        n += size
    store.seal()
    return store, ids


def test_any_row_range_reads_back_the_ids_appended(tmp_path):
    store, ids = _store(tmp_path, [5, 0, 1, 7, 3])
    assert store.rows == len(ids) == 16
    for d0 in range(len(ids) + 1):
        for d1 in range(d0, len(ids) + 1):
            got = store.range(d0, d1)
            assert got.type == pa.string() and got.to_pylist() == ids[d0:d1]
    assert [store[i] for i in range(len(ids))] == ids


def test_a_range_outside_the_rows_is_refused_and_close_removes_the_file(tmp_path):
    store, _ = _store(tmp_path, [4])
    for d0, d1 in ((-1, 2), (3, 2), (0, 5)):
        with pytest.raises(IndexError):
            store.range(d0, d1)
    store.close()
    assert not (tmp_path / "ids-00000.arrow").exists()


def test_large_string_and_dictionary_ids_are_stored_as_strings(tmp_path):
    store = SpilledIds(tmp_path / "ids.arrow")
    store.append(pa.array(["a", "b"], pa.large_string()))
    store.append(pa.array(["c", "a"]).dictionary_encode())
    store.seal()
    assert store.range(0, 4).to_pylist() == ["a", "b", "c", "a"]
