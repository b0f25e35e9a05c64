"""Where each asset's output lives under the storage root: `<asset>/<partition or _all>/`."""

from __future__ import annotations

UNPARTITIONED = "_all"


def asset_dir(asset: str, partition: str | None = None) -> str:
    return f"{asset}/{partition or UNPARTITIONED}"
