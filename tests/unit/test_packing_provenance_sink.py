"""provenance_sink: provenance rows are spilled per set and written in set order without being held,
and the (document, chunk) uniqueness check confirms repeated hashes on the keys themselves."""

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from platform_assets.packing import provenance_sink
from platform_assets.packing.provenance import PROVENANCE_FILE, PROVENANCE_SCHEMA, provenance_rows
from platform_assets.packing.provenance_sink import ProvenanceSink, chunk_key_hashes
from platform_assets.packing.survey import TokenizedInputError
from platform_assets.storage import Storage

SETS = [("test", "code"), ("train", "code"), ("train", "web")]  # (split, source) order, as the survey's


def _run_rows(set_index: int, run: int, sequences: int = 50, pieces_per_sequence: int = 3) -> pa.Table:
    """The provenance rows of run `run` (of `sequences` sequences) of a set, each piece its own document."""
    split, source = SETS[set_index]
    n = sequences * pieces_per_sequence
    seq_ptr = np.arange(0, n + 1, pieces_per_sequence, dtype=np.int64)
    ids = pa.array([f"{source}-{run:03d}-{p:04d}" for p in range(n)], pa.string())
    return provenance_rows(split, source, 64, run * sequences, seq_ptr, ids, np.zeros(n, np.int32),
                           np.zeros(n, np.int32), np.full(n, 7, np.int32))


def _write(tmp_path: Path, sink: ProvenanceSink) -> pa.Table:
    storage = Storage(str(tmp_path / "out"))
    with storage.staged_dir("packed") as staged:
        sink.write(staged)
    return pq.read_table(tmp_path / "out" / "packed" / PROVENANCE_FILE)


def test_sets_emitted_interleaved_are_written_in_set_order(tmp_path, monkeypatch):
    """The streaming strategy emits runs of several sets in turn; the file holds them sorted by
    (split, source, shard, sample, segment), in row groups of ROW_GROUP_ROWS, and the spills go."""
    monkeypatch.setattr(provenance_sink, "ROW_GROUP_ROWS", 400)
    spill = tmp_path / "spill"
    spill.mkdir()
    sink = ProvenanceSink(spill, len(SETS))
    emitted = []
    for run in range(6):
        for i in (2, 0, 1) if run % 2 else (1, 2, 0):
            emitted.append(_run_rows(i, run))
            sink.add(i, emitted[-1])
    table = _write(tmp_path, sink)
    sort_keys = [(c, "ascending") for c in ("split", "source", "shard", "sample", "segment")]
    assert table.equals(pa.concat_tables(emitted).sort_by(sort_keys))
    assert table.schema == PROVENANCE_SCHEMA
    assert sink.rows == table.num_rows == 6 * 3 * 150
    metadata = pq.ParquetFile(tmp_path / "out" / "packed" / PROVENANCE_FILE).metadata
    assert [metadata.row_group(g).num_rows for g in range(metadata.num_row_groups)] == [400] * 6 + [300]
    assert list(spill.iterdir())  # until closed
    sink.close()
    assert not list(spill.iterdir())


def test_an_empty_set_list_writes_an_empty_file(tmp_path):
    sink = ProvenanceSink(tmp_path, 0)
    table = _write(tmp_path, sink)
    assert table.num_rows == 0 and table.schema == PROVENANCE_SCHEMA
    sink.check_unique(pa.table({"id": pa.array([], pa.string()), "chunk": pa.array([], pa.int32())}))


def test_added_rows_are_not_held_in_memory(tmp_path):
    """Rows go to the spill file as they are added: Arrow memory after 40 runs is that of the
    hashes (8 B per first piece), not of the rows (~80 B each)."""
    sink = ProvenanceSink(tmp_path, len(SETS))
    runs = [_run_rows(1, run, sequences=1000) for run in range(40)]
    row_bytes = sum(t.nbytes for t in runs)
    before = pa.total_allocated_bytes()
    for run in runs:
        sink.add(1, run)
    held = pa.total_allocated_bytes() - before
    assert held < row_bytes / 20, (held, row_bytes)
    sink.close()


def test_check_unique_names_a_repeated_key(tmp_path):
    sink = ProvenanceSink(tmp_path, len(SETS))
    sink.add(0, _run_rows(0, 0))
    sink.add(1, _run_rows(1, 1))
    sink.check_unique(pa.table({"id": ["web-000-0005", "code-000-0003"], "chunk": pa.array([0, 1], pa.int32())}))
    excluded = pa.table({"id": ["web-000-0005", "code-000-0003"], "chunk": pa.array([0, 0], pa.int32())})
    with pytest.raises(TokenizedInputError, match=r"document code-000-0003 chunk 0 appears 2 times .*\(1 repeated"):
        sink.check_unique(excluded)  # packed in set 0 and excluded
    sink.close()


def test_check_unique_confirms_colliding_hashes_on_the_keys(tmp_path, monkeypatch):
    """Every key hashing alike (a forced collision) is no repeat as long as the keys differ."""
    monkeypatch.setattr(provenance_sink, "chunk_key_hashes", lambda ids, chunks: np.zeros(len(ids), np.uint64))
    sink = ProvenanceSink(tmp_path, len(SETS))
    sink.add(2, _run_rows(2, 0))
    sink.check_unique(pa.table({"id": ["elsewhere"], "chunk": pa.array([0], pa.int32())}))
    with pytest.raises(TokenizedInputError, match="document web-000-0001 chunk 0 appears 2 times"):
        sink.check_unique(pa.table({"id": ["web-000-0001"], "chunk": pa.array([0], pa.int32())}))
    sink.close()


def test_chunk_key_hashes():
    ids = pa.array(["a", "a", "b", "", "", "a-long-document-identifier-of-many-bytes", "a"] * 2, pa.string())
    chunks = np.array([0, 1, 0, 0, 1, 0, 0] * 2)
    h = chunk_key_hashes(ids, chunks)
    assert h.dtype == np.uint64
    assert h[0] == h[6] == h[7] and len(set(h[:6].tolist())) == 6
    assert np.array_equal(chunk_key_hashes(ids.slice(7), chunks[7:]), h[7:])  # an offset array
    assert np.array_equal(chunk_key_hashes(pa.chunked_array([ids.slice(0, 3), ids.slice(3)]), chunks), h)
    assert chunk_key_hashes(pa.array([], pa.string()), np.zeros(0)).size == 0
