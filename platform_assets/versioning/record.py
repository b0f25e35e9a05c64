"""The record a dataset version leaves for its consumers (training runs, audits): one JSON file."""

from __future__ import annotations

import json
from pathlib import Path

from platform_assets.contracts import SHARD_INDEX_FILE
from platform_assets.versioning.dvc_repo import DatasetVersion

VERSION_FILE = "version.json"


def shard_totals(shards_dir: Path) -> dict[str, int | float]:
    """Samples, tokens and documents of the version, from the first format's index (by name): every
    format holds the same samples (the `formats_agree` check), so any index has the same totals."""
    for index in sorted(shards_dir.glob(f"*/{SHARD_INDEX_FILE}")):
        totals = json.loads(index.read_text()).get("totals", {})
        return {k: totals[k] for k in ("samples", "tokens", "documents", "efficiency") if k in totals}
    return {}


def version_record(version: DatasetVersion, shards_uri: str, remote_url: str | None) -> dict[str, object]:
    shards_dir = Path(shards_uri)
    return {
        **version.as_dict(),
        "remote_url": remote_url,
        "shards_uri": shards_uri,
        "formats": sorted(p.parent.name for p in shards_dir.glob(f"*/{SHARD_INDEX_FILE}")),
        "totals": shard_totals(shards_dir),
    }
