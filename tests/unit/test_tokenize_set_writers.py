"""tokenized_documents' set writers (tokenize/set_writers.py): rows wait for their row group on disk,
not in memory, and the row groups are exactly those of the rule as it was when they waited in memory
(flush a set at flush_rows rows or row_group_bytes, the largest set above PENDING_BATCHES x
row_group_bytes pending); the spill directory goes with the writers."""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from platform_assets.contracts import IOSettings
from platform_assets.parquet_parts import TableSink, parquet_writer
from platform_assets.storage import Storage
from platform_assets.tokenize.encode import tokenized_schema
from platform_assets.tokenize.set_writers import PENDING_BATCHES, SetWriters


def _batch(rng: np.random.Generator, split: str, source: str, rows: int, start: int) -> pa.RecordBatch:
    lengths = rng.integers(1, 4 if source == "tiny" else 200, rows)
    offsets = np.concatenate(([0], np.cumsum(lengths))).astype(np.int32)
    values = rng.integers(0, 50257, int(offsets[-1])).astype(np.int32)
    schema = tokenized_schema("0" * 64)
    return pa.RecordBatch.from_arrays([
        pa.array([f"{source}-{start + i}" for i in range(rows)]), pa.array([source] * rows), pa.array([split] * rows),
        pa.array(np.zeros(rows, np.int32)), pa.ListArray.from_arrays(pa.array(offsets), pa.array(values)),
        pa.nulls(rows, pa.list_(pa.uint8())), pa.array(lengths.astype(np.int32)), pa.array(lengths.astype(np.int32)),
    ], schema=schema)


def _in_memory_rule(batches, flush_rows: int, row_group_bytes: int) -> tuple[dict[tuple[str, str], list[int]],
                                                                            set[str]]:
    """Rows per row group of each set under the rule the writers had when rows waited in memory, and
    which parts of the rule flushed something."""
    pending: dict[tuple[str, str], list[pa.RecordBatch]] = defaultdict(list)
    pending_bytes: dict[tuple[str, str], int] = defaultdict(int)
    groups: dict[tuple[str, str], list[int]] = defaultdict(list)
    reasons: set[str] = set()

    def flush(key, reason):
        waiting = pending.pop(key, [])
        pending_bytes.pop(key, None)
        if waiting:
            groups[key].append(sum(b.num_rows for b in waiting))
            reasons.add(reason)

    for key, batch in batches:
        pending[key].append(batch)
        pending_bytes[key] += batch.nbytes
        if sum(b.num_rows for b in pending[key]) >= flush_rows:
            flush(key, "rows")
        elif pending_bytes[key] >= row_group_bytes:
            flush(key, "bytes")
        while sum(pending_bytes.values()) > PENDING_BATCHES * row_group_bytes:
            flush(max(pending_bytes, key=lambda k: (pending_bytes[k], k)), "cap")
    for key in sorted(pending):
        flush(key, "end")
    return dict(groups), reasons


def test_row_groups_follow_the_in_memory_rule_and_the_spill_goes(tmp_path):
    rng = np.random.default_rng(4)
    # ten sets, two of short rows (their row count binds): more than PENDING_BATCHES sets can wait
    keys = [(split, source) for split in ("train", "validation") for source in ("web", "code", "tiny", "books", "news")]
    batches, start = [], 0
    for i in range(200):
        key = keys[int(rng.integers(0, len(keys)))] if i % 4 else keys[0]
        batches.append((key, _batch(rng, *key, int(rng.integers(1, 40)), start)))
        start += batches[-1][1].num_rows
    flush_rows, row_group_bytes = 90, 12_000  # both bounds and the pending cap bind on this input
    expected, reasons = _in_memory_rule(batches, flush_rows, row_group_bytes)
    assert reasons == {"rows", "bytes", "cap", "end"}
    spill = tmp_path / "spill"
    spill.mkdir()
    storage = Storage(str(tmp_path / "out"))
    with TableSink(storage, "tok", tokenized_schema("0" * 64), IOSettings()) as sink:
        writers = SetWriters(sink, flush_rows, row_group_bytes, spill_dir=str(spill))
        for key, batch in batches:
            writers.add(key, batch)
            # what waits is on disk: one stream file per set with rows pending
            assert sorted(p.name.rsplit(".", 2)[0] for p in next(spill.iterdir()).iterdir()) == \
                sorted(f"{k[0]}.{k[1]}" for k in writers.pending)
        writers.flush()
        writers.close()
    assert not list(spill.iterdir())
    got = {}
    for key in keys:
        meta = pq.ParquetFile(storage.path(f"tok/{key[0]}/{key[1]}/part-00000.parquet")).metadata
        got[key] = [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]
    assert got == expected
    # the rows are those given, in order, per set
    for key in keys:
        want = pa.Table.from_batches([b for k, b in batches if k == key]).column("id").to_pylist()
        path = storage.path(f"tok/{key[0]}/{key[1]}/part-00000.parquet")
        assert pq.read_table(path).column("id").to_pylist() == want


def test_closing_after_an_error_drops_what_waits(tmp_path):
    rng = np.random.default_rng(1)
    storage = Storage(str(tmp_path / "out"))
    spill = tmp_path / "spill"
    spill.mkdir()
    with TableSink(storage, "tok", tokenized_schema("0" * 64), IOSettings()) as sink:
        writers = SetWriters(sink, 10_000, 2**30, spill_dir=str(spill))
        writers.add(("train", "web"), _batch(rng, "train", "web", 5, 0))
        assert writers.pending and list(next(spill.iterdir()).iterdir())
        writers.close()  # as tokenize_outputs does when the stage fails
        assert not writers.pending and not list(spill.iterdir())


def test_a_row_group_of_many_read_back_batches_is_the_combined_write_byte_for_byte(tmp_path):
    """The writers hand Parquet the spilled batches as chunks, not one combined copy (the copy and a
    whole row group's levels cost 3.5x the row group in memory); the part must still be the bytes of
    writing the row group whole. Several MiB of tokens, so the row group spans many 1 MiB pages."""
    rng = np.random.default_rng(9)
    batches = [_batch(rng, "train", "web", int(rng.integers(1, 60)), i * 100) for i in range(600)]
    table = pa.Table.from_batches(batches)
    assert table.column("input_ids").num_chunks == 600 and table.nbytes > 6 * 2**20
    storage = Storage(str(tmp_path / "out"))
    io_settings = IOSettings()
    with TableSink(storage, "tok", table.schema, io_settings) as sink:
        writers = SetWriters(sink, flush_rows=10**9, row_group_bytes=2**40, spill_dir=str(tmp_path))
        for batch in batches:
            writers.add(("train", "web"), batch)
        writers.flush()
        writers.close()
    got = pq.ParquetFile(storage.path("tok/train/web/part-00000.parquet"))
    assert got.metadata.num_row_groups == 1 and got.metadata.row_group(0).column(4).total_compressed_size > 2**20
    whole = pa.BufferOutputStream()
    writer = parquet_writer(whole, table.schema, io_settings.compression)
    writer.write_batch(table.combine_chunks().to_batches()[0])
    writer.close()
    with open(storage.path("tok/train/web/part-00000.parquet"), "rb") as f:
        assert f.read() == whole.getvalue().to_pybytes()
