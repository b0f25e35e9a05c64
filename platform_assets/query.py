"""DuckDB over the platform's outputs, local or S3, without DuckDB's own S3 extension.

Each output directory is opened as a pyarrow dataset through the storage layer and registered as a
DuckDB view, so the same SQL works on a laptop directory and an S3 prefix (duckdb 2.0 cannot load
httpfs offline; Arrow's S3 client needs no extension). DuckDB pushes projections and filters into
the Arrow scan, so `SELECT count(*)` reads no text.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import duckdb
import pyarrow.dataset as pads

from platform_assets.contracts import DUPLICATES_FILE, EXCLUSIONS_FILE, PART_GLOB, QUARANTINE_FILE
from platform_assets.storage import Storage

# The views `query` and `spot-check` see: name -> (asset output directory under the root, file glob).
OUTPUT_VIEWS: dict[str, tuple[str, str]] = {
    "raw_documents": ("raw_documents", f"*/{PART_GLOB}"),
    "quarantine": ("raw_documents", f"*/{QUARANTINE_FILE}"),
    "cleaned_documents": ("cleaned_documents", f"*/{PART_GLOB}"),
    "cleaning_exclusions": ("cleaned_documents", f"*/{EXCLUSIONS_FILE}"),
    "deduplicated_documents": ("deduplicated_documents", f"_all/{PART_GLOB}"),
    "duplicates": ("deduplicated_documents", f"_all/{DUPLICATES_FILE}"),
    "dedup_exclusions": ("deduplicated_documents", f"_all/{EXCLUSIONS_FILE}"),
    "dataset_splits": ("dataset_splits", f"_all/{PART_GLOB}"),
    # one folder per (split, source): fnmatch's `*` crosses `/`
    "tokenized_documents": ("tokenized_documents", f"_all/*{PART_GLOB}"),
    "tokenize_exclusions": ("tokenized_documents", f"_all/{EXCLUSIONS_FILE}"),
    "provenance": ("packed_shards", "_all/provenance.parquet"),
    "packing_exclusions": ("packed_shards", f"_all/{EXCLUSIONS_FILE}"),
    # one row per image / page / clip with its measured columns (width, duration_s, ...)
    "media_samples": ("media_shards", "_all/parquet/*shard-*.parquet"),
    "media_exclusions": ("media_shards", f"_all/{EXCLUSIONS_FILE}"),
}


# Outputs with one folder per source partition key (`<key>/...`): `output_views` narrows them to a config's keys.
PER_SOURCE_VIEWS = frozenset({"raw_documents", "quarantine", "cleaned_documents", "cleaning_exclusions"})


def key_globs(partition_keys: Sequence[str], file_glob: str) -> tuple[str, ...]:
    """`file_glob` in the folder of each partition key (`web.00/part-*.parquet`, ...)."""
    return tuple(f"{key}/{file_glob}" for key in partition_keys)


def output_views(partition_keys: Sequence[str] | None) -> dict[str, tuple[str, str | tuple[str, ...]]]:
    """OUTPUT_VIEWS with the per-source views reading only the folders of `partition_keys` (a config's
    `partition_keys()`): a source since split into file partitions left its unsplit folder behind, and
    a removed source its own; every folder would count their rows twice. None: every folder."""
    if partition_keys is None:
        return dict(OUTPUT_VIEWS)
    views: dict[str, tuple[str, str | tuple[str, ...]]] = {}
    for name, (rel_dir, pattern) in OUTPUT_VIEWS.items():
        if name in PER_SOURCE_VIEWS:
            views[name] = (rel_dir, key_globs(partition_keys, pattern.removeprefix("*/")))
        else:
            views[name] = (rel_dir, pattern)
    return views


def output_dataset(storage: Storage, rel_dir: str,
                   data_files: str | Sequence[str] = "part-*.parquet") -> pads.Dataset | None:
    """The dataset of an output directory's data files, one glob or several (None when it has none)."""
    patterns = [data_files] if isinstance(data_files, str) else list(data_files)
    files = [e.path for pattern in patterns for e in storage.list_files(rel_dir, pattern)]
    if not files:
        return None
    return pads.dataset(files, filesystem=storage.fs, format="parquet")


def connect(storage: Storage, views: Mapping[str, tuple[str, str | Sequence[str]]]) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection with one view per entry: name -> (output dir, file glob or globs)."""
    con = duckdb.connect()
    for name, (rel_dir, pattern) in views.items():
        ds = output_dataset(storage, rel_dir, pattern)
        if ds is not None:
            con.register(name, ds)
    return con


def registered_views(con: duckdb.DuckDBPyConnection) -> set[str]:
    """The views `connect` registered: the outputs that exist under the root."""
    return {row[0] for row in con.execute("SELECT view_name FROM duckdb_views()").fetchall()}
