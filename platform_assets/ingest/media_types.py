"""What a binary file is, from its bytes: the MIME type (magic numbers, via `filetype`) and the media
kind (the media room that reads it). A name says nothing: `cat.png` may be a GIF or a PDF; a name that
disagrees with the bytes is quarantined (media_records.mislabelled)."""

from __future__ import annotations

from typing import Literal

import filetype

from platform_assets.ingest.file_io import SNIFF_BYTES
from platform_assets.schema import Modality

MediaKind = Literal["image", "pdf", "audio"]
_MODALITY: dict[MediaKind, Modality] = {"image": Modality.IMAGE, "pdf": Modality.PDF, "audio": Modality.AUDIO}


# Names that look like media (for pairing sidecars; the type itself always comes from the bytes)
MEDIA_EXTENSIONS = frozenset(t.extension for t in filetype.TYPES
                             if t.mime.startswith(("image/", "audio/")) or t.mime == "application/pdf") | {
    "jpeg", "jpe", "tiff", "oga", "opus", "wave"}


def named_as_media(path: str) -> bool:
    return path.rpartition(".")[2].lower() in MEDIA_EXTENSIONS if "." in path.rpartition("/")[2] else False


def sniff_mime(head: bytes) -> str | None:
    """The MIME type of content starting with `head`, or None when no known signature matches."""
    # the same 8 KiB head the binary check reads (filetype needs 261 bytes for most signatures)
    return filetype.guess_mime(head[:SNIFF_BYTES])


def media_kind(mime: str | None) -> MediaKind | None:
    if mime is None:
        return None
    if mime.startswith("image/"):
        return "image"
    if mime == "application/pdf":
        return "pdf"
    if mime.startswith("audio/"):
        return "audio"
    return None


def modality_of(kind: MediaKind) -> Modality:
    return _MODALITY[kind]
