"""The checks behind the quality gates fail when they should."""

import pyarrow as pa
import pyarrow.parquet as pq

from platform_assets.ingest.validation import duplicate_ids, schema_problems
from platform_assets.schema import DOCUMENTS_SCHEMA
from platform_assets.storage import Storage


def _docs(ids: list[str]) -> pa.Table:
    n = len(ids)
    return pa.table({
        "id": ids, "source": ["s"] * n, "text": pa.array(["t"] * n, pa.large_string()), "modality": ["text"] * n,
        "uri": [f"u{i}" for i in range(n)], "license": pa.nulls(n, pa.string()), "meta": pa.nulls(n, pa.string()),
        "ingested_at": pa.nulls(n, pa.timestamp("ms", tz="UTC")),
        "media": pa.nulls(n, DOCUMENTS_SCHEMA.field("media").type),
    }, schema=DOCUMENTS_SCHEMA)


def test_duplicate_ids_are_counted_across_parts(tmp_path):
    (tmp_path / "d").mkdir()
    pq.write_table(_docs(["a", "b", "c"]), tmp_path / "d" / "part-00000.parquet")
    pq.write_table(_docs(["c", "d", "a", "a"]), tmp_path / "d" / "part-00001.parquet")
    dups = duplicate_ids(Storage(str(tmp_path)), "d")
    assert (dups.rows, dups.distinct, dups.duplicates) == (7, 4, 3)
    assert dups.examples == [("a", 3), ("c", 2)]


def test_no_files_means_no_duplicates(tmp_path):
    assert duplicate_ids(Storage(str(tmp_path)), "absent").duplicates == 0


def test_schema_drift_is_reported_per_file(tmp_path):
    (tmp_path / "d").mkdir()
    pq.write_table(_docs(["a"]), tmp_path / "d" / "part-00000.parquet")
    foreign = _docs(["b"]).drop_columns(["meta"]).set_column(0, "id", pa.array([1], pa.int64()))
    pq.write_table(foreign.replace_schema_metadata(None), tmp_path / "d" / "part-00001.parquet")
    problems = schema_problems(Storage(str(tmp_path)), "d", DOCUMENTS_SCHEMA)
    assert problems == [
        "part-00001.parquet: schema tag None, expected 'platform.documents/3'",
        "part-00001.parquet: column 'id' is int64, expected string",
        "part-00001.parquet: column 'meta' missing",
    ]
