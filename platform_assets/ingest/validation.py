"""Checks on a committed document output: schema, id uniqueness. Plain functions, any storage."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from platform_assets.dedup.hash64 import id_hashes
from platform_assets.parquet_parts import output_rows, read_batches
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


def duplicate_ids(storage: Storage, rel_dir: str) -> DuplicateIds:
    """Counts ids and distinct ids: a 64-bit hash of each id, sorted; only the ids whose hash repeats
    are read again and counted by DuckDB. DuckDB's count(DISTINCT id) over every id held them all in
    its hash table: +47 MB at pipeline_scaling's 1x, +89 MB at 16x (336k ids); the hashes are 8 B an
    id. They fill one array, sorted in place, from the id column read a batch at a time: from
    Arrow's dataset scanner into a list of arrays the check took +29 MB on the 16x output alone
    (+10 like this), and in the dedup stage after the exact check 375 MB against 354."""
    ordered = np.empty(output_rows(storage, rel_dir), np.uint64)  # the row count is in the footers
    at = 0
    for batch in _id_batches(storage, rel_dir):
        ordered[at : at + batch.num_rows] = id_hashes(batch.column("id"))
        at += batch.num_rows
    if at != len(ordered):
        raise RuntimeError(f"{rel_dir} changed while its ids were read: {at} read, {len(ordered)} in the footers")
    ordered.sort()
    rows = len(ordered)
    repeated = np.unique(ordered[1:][ordered[1:] == ordered[:-1]])
    del ordered
    if len(repeated) == 0:
        return DuplicateIds(rows, rows, [])
    # the rows whose hash repeats: the same id read twice, or (chance) two ids with one hash
    suspects = pa.table({"id": pa.chunked_array(
        [b.column("id").filter(pa.array(np.isin(id_hashes(b.column("id")), repeated))).cast(pa.string())
         for b in _id_batches(storage, rel_dir)], pa.string())})
    con = duckdb.connect()
    con.register("suspects", suspects)
    groups, examples = con.execute("SELECT count(DISTINCT id) FROM suspects").fetchone()[0], con.execute(
        "SELECT id, count(*) AS n FROM suspects GROUP BY id HAVING n > 1 ORDER BY n DESC, id LIMIT 5"
    ).fetchall()
    return DuplicateIds(rows, rows - suspects.num_rows + groups, [(i, n) for i, n in examples])


def _id_batches(storage: Storage, rel_dir: str) -> Iterator[pa.RecordBatch]:
    """The `id` column a batch at a time, local parts through a 1 MiB stream (Arrow's dataset scanner
    read 16 batches and 4 files ahead)."""
    return read_batches(storage, rel_dir, ["id"], pre_buffer=not storage.is_local)
