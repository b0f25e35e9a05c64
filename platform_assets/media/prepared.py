"""What a media room returns for one image, page or clip: the bytes a document stores and what was
measured of them (the fields of schema.MEDIA_ITEM_TYPE after kind/mime/uri/sha256/bytes)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from platform_assets.schema import MEDIA_MEASURED_FIELDS


@dataclass(frozen=True)
class PreparedMedia:
    kind: str  # image | page | audio
    mime: str  # of `data`: what the room wrote (image/png, image/jpeg, audio/flac) or kept
    data: bytes
    measured: dict[str, Any] = field(default_factory=dict)
    """Keys among schema.MEDIA_MEASURED_FIELDS (width, height, format, ..., clipped_fraction)."""

    def __post_init__(self) -> None:
        unknown = set(self.measured) - set(MEDIA_MEASURED_FIELDS)
        if unknown:
            raise ValueError(f"not media item fields: {sorted(unknown)}")

    def item(self, uri: str) -> dict[str, Any]:
        """One `media` list element (schema.MEDIA_ITEM_TYPE), bytes inline."""
        out: dict[str, Any] = {"kind": self.kind, "mime": self.mime, "uri": uri,
                               "sha256": hashlib.sha256(self.data).hexdigest(), "bytes": self.data}
        out.update({name: self.measured.get(name) for name in MEDIA_MEASURED_FIELDS})
        return out
