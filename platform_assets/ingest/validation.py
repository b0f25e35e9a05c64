"""Checks on a committed document output: schema, id uniqueness. Plain functions, any storage."""

from __future__ import annotations

from dataclasses import dataclass

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from platform_assets.query import output_dataset
from platform_assets.schema import schema_tag
from platform_assets.storage import Storage


def schema_problems(storage: Storage, rel_dir: str, expected: pa.Schema, pattern: str = "part-*.parquet") -> list[str]:
    """Every way a data file's schema differs from `expected` (empty when all match)."""
    problems = []
    want_tag = schema_tag(expected)
    for entry in storage.list_files(rel_dir, pattern):
        with storage.fs.open_input_file(entry.path) as f:
            got = pq.read_schema(f)
        name = entry.path.rsplit("/", 1)[-1]
        if schema_tag(got) != want_tag:
            problems.append(f"{name}: schema tag {schema_tag(got)!r}, expected {want_tag!r}")
        for field in expected:
            if field.name not in got.names:
                problems.append(f"{name}: column {field.name!r} missing")
            elif not got.field(field.name).type.equals(field.type):
                problems.append(f"{name}: column {field.name!r} is {got.field(field.name).type}, expected {field.type}")
    return problems


@dataclass(frozen=True)
class DuplicateIds:
    rows: int
    distinct: int
    examples: list[tuple[str, int]]

    @property
    def duplicates(self) -> int:
        return self.rows - self.distinct


def duplicate_ids(storage: Storage, rel_dir: str, pattern: str = "part-*.parquet") -> DuplicateIds:
    """Counts ids and distinct ids with DuckDB (a hash aggregate, not a Python set)."""
    dataset = output_dataset(storage, rel_dir, pattern)
    if dataset is None:
        return DuplicateIds(0, 0, [])
    con = duckdb.connect()
    con.register("docs", dataset)
    rows, distinct = con.execute("SELECT count(*), count(DISTINCT id) FROM docs").fetchone()
    examples = con.execute(
        "SELECT id, count(*) AS n FROM docs GROUP BY id HAVING n > 1 ORDER BY n DESC, id LIMIT 5"
    ).fetchall()
    return DuplicateIds(rows, distinct, [(i, n) for i, n in examples])
