"""A source's file fingerprint, and the one its latest raw_documents materialization read.

The fingerprint hashes the file list of a source's partition (the whole source, or one file partition
of a split one: ingest/file_partitions.py) with sizes and mtimes. The asset records it in its
materialization metadata (`source_fingerprint`), so the sensor and the schedule decide from the data
on the instance, whoever materialized it (the CLI's main job, the UI, a backfill), not from their own
cursors alone: a fresh UI after the main job launches nothing.
"""

from __future__ import annotations

import hashlib

import dagster as dg

from platform_assets.config import ConfigError, HuggingFaceSource, PipelineConfig
from platform_assets.defs.resources import PipelineResource
from platform_assets.ingest.file_partitions import PartitionKeyError
from platform_assets.ingest.readers import source_files

FINGERPRINT_KEY = "source_fingerprint"
RAW_DOCUMENTS = dg.AssetKey("raw_documents")


def source_fingerprint(cfg: PipelineConfig, key: str, pipeline: PipelineResource | None = None) -> str | None:
    """A hash of the file list of partition `key` (a source, or one file partition of a split source)
    with sizes and mtimes; None for partitions that can't be listed (hub datasets; a path that does not
    exist yet; a key the config no longer has)."""
    try:
        part = cfg.source_partition(key)
    except PartitionKeyError:
        return None
    if isinstance(cfg.source(part.source), HuggingFaceSource):
        return None
    try:
        cfg.check_source_paths([part.source])
        _, _, files = source_files(cfg, part.source, pipeline.s3_settings(cfg) if pipeline else None, part)
    except (ConfigError, OSError):
        return None
    h = hashlib.sha256()
    for f in files:
        h.update(f"{f.path}\x00{f.size}\x00{f.mtime_s}\n".encode())
    return h.hexdigest()[:16]


def latest_materialization(instance: dg.DagsterInstance, name: str) -> tuple[str | None, int | None]:
    """(fingerprint, event storage id) of the latest raw_documents materialization of partition
    `name`: (None, None) if never materialized; fingerprint None if by a version that did not record one."""
    result = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=RAW_DOCUMENTS, asset_partitions=[name]), limit=1)
    if not result.records:
        return None, None
    record = result.records[0]
    materialization = record.asset_materialization
    value = materialization.metadata.get(FINGERPRINT_KEY) if materialization is not None else None
    return (value.value if value is not None else None), record.storage_id


def materialized_fingerprint(instance: dg.DagsterInstance, name: str) -> str | None:
    """The fingerprint the latest raw_documents materialization of partition `name` recorded (None:
    never materialized, or by a version that did not record one)."""
    return latest_materialization(instance, name)[0]
