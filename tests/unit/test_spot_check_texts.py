"""The spot check's excerpt pass: the text of only the row groups that hold a sampled id."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.dataset as pads
import pyarrow.parquet as pq

from platform_assets import spot_checks


def _parts(tmp_path) -> pads.FileSystemDataset:
    """3 parts of 4 row groups of 5 rows; "d7" is written twice (in part 0 and part 2)."""
    paths = []
    for p in range(3):
        path = tmp_path / f"part-{p:05d}.parquet"
        ids = [f"d{p * 20 + i}" for i in range(20)]
        if p == 2:
            ids[3] = "d7"
        texts = [f"text of {i} in part {p}" for i in ids]
        pq.write_table(pa.table({"id": ids, "text": texts}), path, row_group_size=5)
        paths.append(str(path))
    return pads.dataset(paths, format="parquet")


def test_only_the_row_groups_holding_a_sampled_id_have_their_text_read(tmp_path, monkeypatch):
    dataset = _parts(tmp_path)
    decoded: list[tuple[int, list[int], list[str]]] = []
    real = pq.ParquetFile.iter_batches

    def spy(self, batch_size=65536, row_groups=None, columns=None, **kwargs):
        decoded.append((self.metadata.num_rows, row_groups, columns))
        return real(self, batch_size, row_groups, columns, **kwargs)

    monkeypatch.setattr(pq.ParquetFile, "iter_batches", spy)
    got = list(spot_checks._texts_of(dataset, ["d7", "d23", "d58"]))
    # d7's first copy (part 0, row group 1), then d23 (part 1, row group 0), d58 (part 2, row group 3);
    # part 2's copy of d7 comes after d7 was found and is not read again
    assert got == [("d7", "text of d7 in part 0"), ("d23", "text of d23 in part 1"),
                   ("d58", "text of d58 in part 2")]
    assert [(rg, cols) for _, rg, cols in decoded] == [([1], ["id", "text"]), ([0], ["id", "text"]),
                                                       ([3], ["id", "text"])]


def test_the_excerpt_pass_stops_once_every_id_is_found(tmp_path, monkeypatch):
    dataset = _parts(tmp_path)
    read: list[int] = []
    real = pq.ParquetFile.read_row_group

    def spy(self, i, columns=None, **kwargs):
        read.append(i)
        return real(self, i, columns, **kwargs)

    monkeypatch.setattr(pq.ParquetFile, "read_row_group", spy)
    assert list(spot_checks._texts_of(dataset, ["d1", "d6"])) == [("d1", "text of d1 in part 0"),
                                                                  ("d6", "text of d6 in part 0")]
    assert read == [0, 1]  # the ids of part 0's first two row groups, nothing after
    assert list(spot_checks._texts_of(dataset, ["nowhere"])) == []


def test_a_row_group_is_decoded_only_up_to_the_batch_of_its_last_wanted_id(tmp_path, monkeypatch):
    """Row groups of 1,000 rows in batches of 10: an id in the second batch costs two batches, not 100."""
    path = tmp_path / "part-00000.parquet"
    ids = [f"d{i}" for i in range(2000)]
    pq.write_table(pa.table({"id": ids, "text": [f"text of {i}" for i in ids]}), path, row_group_size=1000)
    monkeypatch.setattr(spot_checks, "EXCERPT_BATCH_ROWS", 10)
    batches: list[int] = []
    real = pq.ParquetFile.iter_batches

    def spy(self, *args, **kwargs):
        for batch in real(self, *args, **kwargs):
            batches.append(batch.num_rows)
            yield batch

    monkeypatch.setattr(pq.ParquetFile, "iter_batches", spy)
    got = list(spot_checks._texts_of(pads.dataset([str(path)], format="parquet"), ["d15", "d1003", "d1997"]))
    assert got == [("d15", "text of d15"), ("d1003", "text of d1003"), ("d1997", "text of d1997")]
    # row group 0: batches 0-1 (d15); row group 1: batch 0 (d1003) ... batch 99 (d1997): 2 + 100
    assert len(batches) == 102
