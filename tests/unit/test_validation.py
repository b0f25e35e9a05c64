"""The checks behind the quality gates fail when they should."""

import random

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

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


@pytest.mark.parametrize("hash_values", [None, 1, 4])
def test_duplicate_ids_are_counted_exactly_when_ids_share_a_hash(tmp_path, monkeypatch, hash_values):
    """The counts are DuckDB's count(DISTINCT id) and GROUP BY over all the ids, however many distinct
    ids share a 64-bit hash (forced into `hash_values` values: every id a suspect)."""
    from platform_assets.ingest import validation

    if hash_values is not None:
        real = validation.id_hashes
        monkeypatch.setattr(validation, "id_hashes", lambda ids: real(ids) % np.uint64(hash_values))
    rng = random.Random(5)
    ids = [f"doc-{rng.randrange(400)}" for _ in range(900)]
    (tmp_path / "d").mkdir()
    pq.write_table(_docs(ids[:500]), tmp_path / "d" / "part-00000.parquet")
    pq.write_table(_docs(ids[500:]), tmp_path / "d" / "part-00001.parquet")
    con = duckdb.connect()
    con.register("docs", pa.table({"id": ids}))
    distinct = con.execute("SELECT count(DISTINCT id) FROM docs").fetchone()[0]
    examples = con.execute("SELECT id, count(*) AS n FROM docs GROUP BY id HAVING n > 1 ORDER BY n DESC, id LIMIT 5"
                           ).fetchall()
    dups = duplicate_ids(Storage(str(tmp_path)), "d")
    assert (dups.rows, dups.distinct) == (900, distinct) and dups.examples == examples and distinct < 400


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
