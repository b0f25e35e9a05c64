"""The registry of media shard formats: one module per format, one line here; nothing else names a
format (settings list these names, the stage writes and verifies every configured one, readers
dispatch on index.json's `format`)."""

from __future__ import annotations

from platform_assets.media_shards.formats import parquet, webdataset
from platform_assets.media_shards.formats.base import MediaFormat, MediaRecord, MediaSetHeader

REGISTRY: dict[str, MediaFormat] = {f.name: f for f in (
    webdataset.FORMAT,
    parquet.FORMAT,
)}


def get_format(name: str) -> MediaFormat:
    try:
        return REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown media shard format {name!r}; registered: {', '.join(REGISTRY)}") from None


__all__ = ["REGISTRY", "MediaFormat", "MediaRecord", "MediaSetHeader", "get_format"]
