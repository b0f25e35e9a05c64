"""DuckDB over the platform's outputs, local or S3, without DuckDB's own S3 extension.

Each output directory is opened as a pyarrow dataset through the storage layer and registered as a
DuckDB view, so the same SQL works on a laptop directory and an S3 prefix (duckdb 2.0 cannot load
httpfs offline; Arrow's S3 client needs no extension). DuckDB pushes projections and filters into
the Arrow scan, so `SELECT count(*)` reads no text.
"""

from __future__ import annotations

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


def output_dataset(storage: Storage, rel_dir: str, data_files: str = "part-*.parquet") -> pads.Dataset | None:
    """The dataset of an output directory's data files (None when it has none)."""
    files = [e.path for e in storage.list_files(rel_dir, data_files)]
    if not files:
        return None
    return pads.dataset(files, filesystem=storage.fs, format="parquet")


def connect(storage: Storage, views: dict[str, tuple[str, str]]) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection with one view per entry: name -> (output dir, file glob)."""
    con = duckdb.connect()
    for name, (rel_dir, pattern) in views.items():
        ds = output_dataset(storage, rel_dir, pattern)
        if ds is not None:
            con.register(name, ds)
    return con


def registered_views(con: duckdb.DuckDBPyConnection) -> set[str]:
    """The views `connect` registered: the outputs that exist under the root."""
    return {row[0] for row in con.execute("SELECT view_name FROM duckdb_views()").fetchall()}
