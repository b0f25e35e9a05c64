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
    assert [b.num_rows for b in source.batches()] == [4, 2, 4, 2]  # io.batch_rows per read, per part
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
