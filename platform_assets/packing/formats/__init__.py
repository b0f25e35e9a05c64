"""The registry of shard formats: one module per format, one line here.

Adding a format (say `lance`) is a module `packing/formats/lance.py` that defines `FORMAT =
ShardFormat("lance", 1, open_set, read, layout)` and one line below; nothing else names a format
(settings validate against this registry, the stage writes and verifies every registered format it is
configured with, index.json gets the format's declared layout). See SHARD_FORMAT.md.
"""

from __future__ import annotations

from platform_assets.packing.formats import flat, flat_varlen, lance, parquet, webdataset
from platform_assets.packing.formats.base import SetHeader, ShardFormat
from platform_assets.packing.samples import ShardSetError

REGISTRY: dict[str, ShardFormat] = {f.name: f for f in (
    flat.FORMAT,
    parquet.FORMAT,
    webdataset.FORMAT,
    flat_varlen.FORMAT,
    lance.FORMAT,
)}
FORMATS: tuple[str, ...] = tuple(n for n, f in REGISTRY.items() if f.default)
"""The formats written by default, in registry order (every registered one but `lance`, whose rebuilds
are not byte-identical: SHARD_FORMAT.md, and `flat_varlen`, opt-in so the default output stays as pinned)."""


def format_names() -> tuple[str, ...]:
    """Every registered format, in registry order (the order formats are written and validated);
    read at call time, so a format registered by a plugin or a test counts."""
    return tuple(REGISTRY)


def get_format(name: str) -> ShardFormat:
    try:
        return REGISTRY[name]
    except KeyError:
        raise ShardSetError(f"unknown shard format {name!r}; registered: {', '.join(format_names())}") from None


__all__ = ["FORMATS", "REGISTRY", "SetHeader", "ShardFormat", "format_names", "get_format"]
