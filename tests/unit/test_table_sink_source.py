"""The one table sink/source of document-level outputs: atomic commit, io bounds, side tables."""

import pyarrow as pa
import pytest

from platform_assets.contracts import EXCLUSIONS_FILE, IOSettings
from platform_assets.parquet_parts import TableSink, TableSource
from platform_assets.storage import Storage

SCHEMA = pa.schema([pa.field("id", pa.string()), pa.field("n", pa.int64())])


def _batch(lo: int, hi: int) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict({"id": [f"d{i}" for i in range(lo, hi)], "n": list(range(lo, hi))},
                                      schema=SCHEMA)


TEXT_SCHEMA = pa.schema([pa.field("id", pa.string()), pa.field("text", pa.string())])


def _text_rows(lo: int, n: int, width: int) -> pa.RecordBatch:
    """Rows d{lo}.. with texts of `width` characters, each starting with its number."""
    return pa.RecordBatch.from_pydict({"id": [f"d{i}" for i in range(lo, lo + n)],
                                       "text": [f"{i:08d}" + "x" * (width - 8) for i in range(lo, lo + n)]},
                                      schema=TEXT_SCHEMA)


def test_sink_commits_parts_and_side_tables_and_source_reads_them_back(tmp_path):
    storage = Storage(str(tmp_path))
    io = IOSettings(batch_rows=4, part_max_rows=5)
    with TableSink(storage, "stage/_all", SCHEMA, io) as sink:
        for lo in range(0, 12, 3):
            sink.write(_batch(lo, lo + 3))
        sink.write_side(EXCLUSIONS_FILE, pa.table({"id": ["x"]}))
    assert sink.rows == 12
    # a part closes once it holds >= 5 rows: 3+3, 3+3 -> two parts
    assert sorted(n for n in sink.files if n.startswith("part-")) == ["part-00000.parquet", "part-00001.parquet"]
    source = TableSource(storage, "stage/_all", io)
    assert source.schema.names == ["id", "n"]
    # whole row groups (one per write: 3 rows), joined only within io.batch_rows (4): one each
    assert [b.num_rows for b in source.batches()] == [3, 3, 3, 3]
    assert source.table(["n"])["n"].to_pylist() == list(range(12))
    assert source.side_table(EXCLUSIONS_FILE)["id"].to_pylist() == ["x"]
    assert source.side_table("_absent.parquet") is None
    assert TableSource(storage, "nothing/_all").schema is None


def test_a_failing_stage_commits_nothing_and_keeps_the_previous_output(tmp_path):
    storage = Storage(str(tmp_path))
    with TableSink(storage, "stage/_all", SCHEMA) as sink:
        sink.write(_batch(0, 3))
    before = sink.files
    with pytest.raises(RuntimeError, match="boom"), TableSink(storage, "stage/_all", SCHEMA) as failing:
        failing.write(_batch(10, 20))
        raise RuntimeError("boom")
    assert TableSource(storage, "stage/_all").table(["n"])["n"].to_pylist() == [0, 1, 2]
    assert sorted(p.name for p in (tmp_path / "stage").iterdir()) == ["_all"]  # no staging left behind
    assert failing.files == {} and before


def test_batches_stay_within_batch_bytes_when_long_documents_follow_short_ones(tmp_path):
    """A run of long documents in a part of short ones: rows per batch from the part's average made a
    batch of several times io.batch_bytes; whole row groups, joined up to the bound, do not."""
    storage = Storage(str(tmp_path))
    schema = TEXT_SCHEMA
    io = IOSettings(batch_rows=8192, batch_bytes=150_000)

    with TableSink(storage, "skewed", schema, io) as sink:
        for k in range(30):  # 30 row groups of 500 short rows (~57 kB each)
            sink.write(_text_rows(k * 500, 500, 100))
        for k in range(3):  # then 3 row groups of 10 rows of 9 kB (~90 kB each)
            sink.write(_text_rows(15_000 + k * 10, 10, 9_000))
        sink.write(_text_rows(15_030, 40, 9_000))  # and one row group of 360 kB alone
    source = TableSource(storage, "skewed", io)
    batches = list(source.batches(["id", "text"]))
    # by the part's average row (~155 B) a batch was 969 rows: the 70 long rows and 899 short ones made
    # one of 684 kB (4.6x the bound)
    assert max(b.nbytes for b in batches) <= 1.1 * io.batch_bytes
    assert [b.num_rows for b in batches][:15] == [1000] * 15  # two short row groups per batch
    assert pa.Table.from_batches(batches)["id"].to_pylist() == [f"d{i}" for i in range(15_070)]
    # a narrow read joins row groups up to io.batch_rows instead
    assert max(b.num_rows for b in source.batches(["id"])) > 1000


def test_tables_are_the_batches_read_in_pieces_and_written_back_as_one_row_group_each(tmp_path):
    """`TableSource.tables`: the rows of each `batches` batch (long documents after short ones, a row
    group over the bound alone), as a table of at most `pieces` chunks; a table written back with
    as_chunks is one row group of the same rows (what the dedup and split write passes do)."""
    storage = Storage(str(tmp_path))
    schema = TEXT_SCHEMA
    io = IOSettings(batch_rows=8192, batch_bytes=150_000)

    with TableSink(storage, "skewed", schema, io) as sink:
        for k in range(6):
            sink.write(_text_rows(k * 500, 500, 100))
        for k in range(3):
            sink.write(_text_rows(3_000 + k * 10, 10, 9_000))
        sink.write(_text_rows(3_030, 40, 9_000))  # 360 kB: over the bound alone, read as three batches
    source = TableSource(storage, "skewed", io)
    batches = list(source.batches())
    assert [b.num_rows for b in batches][-3:] == [16, 16, 8]  # the 40 long rows: 16 a batch by bytes
    for pieces in (3, 4):  # 16 rows in pieces of 6 (cut at each batch's end) and of 4
        got = list(source.tables(pieces=pieces))
        assert [t.num_rows for t in got] == [b.num_rows for b in batches] and len(batches) > 5
        assert all(t.equals(pa.Table.from_batches([b])) for t, b in zip(got, batches, strict=True))
        # a piece cut at a batch's end leaves one more chunk in the next
        assert pieces <= max(t.column("text").num_chunks for t in got) <= pieces + 1
    tables = list(source.tables(pieces=4))
    assert all(t.column("text").num_chunks <= 4 for t in tables)
    with TableSink(storage, "back", schema, io) as sink:
        for t in tables:
            sink.write(t, as_chunks=True)
    back = TableSource(storage, "back", io)
    assert [b.num_rows for b in back.batches()] == [b.num_rows for b in batches]
    assert back.table(["id", "text"]).equals(pa.Table.from_batches(batches))
