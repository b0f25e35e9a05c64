"""Where each asset's output lives under the storage root (see DESIGN.md, 'Data on disk')."""

from __future__ import annotations

UNPARTITIONED = "_all"


def asset_dir(asset: str, partition: str | None = None) -> str:
    return f"{asset}/{partition or UNPARTITIONED}"
