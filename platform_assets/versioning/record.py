"""The record a dataset version leaves for its consumers (training runs, audits): one JSON file."""

from __future__ import annotations

import json
from pathlib import Path

from platform_assets.contracts import SHARD_INDEX_FILE
from platform_assets.versioning.dvc_repo import DatasetVersion

VERSION_FILE = "version.json"


TOKEN_TOTALS = ("samples", "tokens", "documents", "efficiency")
MEDIA_TOTALS = ("samples", "modalities")  # a media index's totals (media_shards/MEDIA_SHARD_FORMAT.md)


def shard_totals(shards_dir: Path, keys: tuple[str, ...] = TOKEN_TOTALS) -> dict[str, object]:
    """Samples, tokens and documents of the version, from the first format's index (by name): every
    format holds the same samples (the `formats_agree` check), so any index has the same totals."""
    for index in sorted(shards_dir.glob(f"*/{SHARD_INDEX_FILE}")):
        totals = json.loads(index.read_text()).get("totals", {})
        return {k: totals[k] for k in keys if k in totals}
    return {}


def media_record(version: DatasetVersion, shards_uri: str) -> dict[str, object]:
    """The media shard set's part of the record: its own DVC version, formats and sample counts."""
    shards_dir = Path(shards_uri)
    return {
        **version.as_dict(),
        "shards_uri": shards_uri,
        "formats": sorted(p.parent.name for p in shards_dir.glob(f"*/{SHARD_INDEX_FILE}")),
        "totals": shard_totals(shards_dir, MEDIA_TOTALS),
    }


def version_record(version: DatasetVersion, shards_uri: str, remote_url: str | None,
                   media: dict[str, object] | None = None) -> dict[str, object]:
    """`md5` is the token shard set's version (training runs and checkpoints name it); `media` the media
    shard set's record (`media_record`), or None when no media_shards output was versioned."""
    shards_dir = Path(shards_uri)
    return {
        **version.as_dict(),
        "remote_url": remote_url,
        "shards_uri": shards_uri,
        "formats": sorted(p.parent.name for p in shards_dir.glob(f"*/{SHARD_INDEX_FILE}")),
        "totals": shard_totals(shards_dir),
        "media": media,
    }
