"""What the dedup write pass keeps resident: a batch's kept rows are written without a copy of its text
(result.filter_batch: the batch itself, or slices of it), and finish() releases the per-document pieces."""

import random

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from platform_assets.contracts import IOSettings
from platform_assets.dedup.deduplicator import Deduplicator
from platform_assets.dedup.result import kept_runs
from platform_assets.dedup.settings import DedupSettings
from platform_assets.parquet_parts import TableSink
from platform_assets.storage import Storage


def _texts(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(f"w{rng.randrange(50_000)}" for _ in range(200)) for _ in range(n)]


def _batch(texts: list[str], ids: list[str]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict({
        "id": ids, "source": ["web"] * len(ids), "text": pa.array(texts, pa.large_string()),
        "ingested_at": pa.array([1_700_000_000_000_000 + i for i in range(len(ids))], pa.timestamp("us")),
    })


def _text_buffer(table: pa.Table) -> int:
    col = table.column("text")
    assert col.num_chunks == 1
    return col.chunk(0).buffers()[2].address


def test_kept_rows_are_written_without_a_copy():
    texts = _texts(40, seed=1)
    kept_batch = _batch(texts[:20], [f"a{i:02d}" for i in range(20)])
    # the second batch repeats a text of the first at row 7: that row is removed
    mixed = [*texts[20:39]]
    mixed.insert(7, texts[0])
    mixed_batch = _batch(mixed, [f"b{i:02d}" for i in range(20)])
    dedup = Deduplicator(DedupSettings())
    dedup.add_batch(kept_batch)
    dedup.add_batch(mixed_batch)
    result = dedup.finish()
    assert result.counts.removed_exact == 1

    kept = result.filter_batch(kept_batch)
    assert kept.num_rows == 20
    assert _text_buffer(kept) == kept_batch.column("text").buffers()[2].address  # the batch's own text
    assert kept["cluster_id"].to_pylist() == kept_batch.column("id").to_pylist()

    partial = result.filter_batch(mixed_batch)
    assert partial["id"].to_pylist() == [f"b{i:02d}" for i in range(20) if i != 7]
    # two runs of kept rows, each a slice of the batch's own text buffer (a take copied the batch)
    own = mixed_batch.column("text").buffers()[2].address
    assert [c.buffers()[2].address for c in partial["text"].chunks] == [own, own]
    assert partial["text"].to_pylist() == texts[20:39]
    assert partial["cluster_id"].to_pylist() == partial["id"].to_pylist()


@pytest.mark.parametrize("rows", [[0, 1, 2, 5, 6, 9, 10, 11, 19], [3], list(range(20)), [0, 19], []])
def test_kept_runs_equal_take_and_write_as_one_row_group(tmp_path, rows):
    batch = _batch(_texts(20, seed=3), [f"c{i:02d}" for i in range(20)])
    table = pa.Table.from_batches([batch])
    runs = kept_runs(table, np.array(rows, np.int64))
    assert runs.equals(table.take(pa.array(rows, pa.int64())))
    with TableSink(Storage(str(tmp_path)), "out", table.schema, IOSettings()) as sink:
        sink.write(runs, as_chunks=True)
        sink.write(table.slice(0, 4))
    files = sorted((tmp_path / "out").glob("part-*.parquet"))
    assert len(files) == 1
    written = pq.ParquetFile(files[0])
    # each write is one row group, whatever its chunks (an empty write adds none)
    assert [written.metadata.row_group(i).num_rows for i in range(written.num_row_groups)] == \
        [n for n in (len(rows), 4) if n]
    assert written.read().equals(pa.concat_tables([runs, table.slice(0, 4)]).combine_chunks())


def test_finish_releases_the_per_document_pieces_and_refuses_reuse():
    texts = _texts(30, seed=2)
    batch = _batch([*texts, texts[3]], [f"d{i:02d}" for i in range(31)])
    dedup = Deduplicator(DedupSettings())
    dedup.add_batch(batch.slice(0, 15))
    dedup.add_batch(batch.slice(15))
    # storage: disk (the default) spills the signatures as they come (signature_spill.py), the rest is kept
    assert len(dedup._sig_spill) == 31 and dedup._sigs == [] and len(dedup._ids) == 2
    result = dedup.finish()
    assert result.counts.documents == 31 and result.counts.removed_exact == 1
    assert result.accepted.signatures.shape == (30, 128)  # what the artifact needs stays with the result
    # the stage keeps the Deduplicator through the write pass: its signature pieces must not stay too
    assert (dedup._sigs, dedup._ids, dedup._hashes, dedup._prio, dedup._store) == ([], [], [], [], None)
    assert dedup._sig_spill is None and dedup._spill is None  # the spill files are removed
    with pytest.raises(RuntimeError, match="finished"):
        dedup.add_batch(batch)
    with pytest.raises(RuntimeError, match="finished"):
        dedup.finish()
