"""What a media shard format is: name, version, a writer per shard file, readers independent of the
writer, and the columns and encodings its index.json declares (MEDIA_SHARD_FORMAT.md).

Every format writes one file per shard and receives the same samples in the same order: where shards
are cut is decided by the stage (on sample count and payload bytes), never by a format. The file
entry helpers (`HashedOutput`, `declared_layout`, `column`) are the token shards' (packing/formats/).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import pyarrow.fs as pafs

from platform_assets.media_shards.samples import WHISPER_SHAPE, MediaSample
from platform_assets.packing.formats.base import FileEntries, column, declared_layout
from platform_assets.storage import StagedDir

__all__ = ["FileEntries", "MediaFormat", "MediaRecord", "MediaSetHeader", "MediaShardWriter", "column",
           "declared_layout", "sample_columns"]


@dataclass(frozen=True)
class MediaSetHeader:
    """What a format needs to know of the shard set it writes."""

    audio_features: bool  # audio samples carry Whisper's input_features


@dataclass(frozen=True)
class MediaRecord:
    """One sample read back from a shard, whatever the format (readers never use the writers' code)."""

    id: str
    split: str
    source: str
    modality: str
    text: str
    ext: str
    data: bytes
    record: dict[str, Any]
    features: np.ndarray | None
    shard: str  # the shard's name, `<split>/<source>/shard-NNNNN`


class MediaShardWriter(Protocol):
    """The file of one shard: samples in order, then `close` with the index's file entries."""

    buffered_bytes: int
    """Payload held in memory, not yet written (a Parquet row group being gathered; 0 for a tar)."""

    def add(self, sample: MediaSample) -> None: ...

    def flush(self) -> None:
        """Write what is buffered now (the stage bounds the memory of all open shards together)."""

    def close(self) -> FileEntries: ...


ShardOpener = Callable[[StagedDir, str, str, MediaSetHeader], MediaShardWriter]
"""(staged dir, the file's name in it, its path relative to the format directory, header) -> writer."""
Reader = Callable[[pafs.FileSystem, str, str], Iterator[MediaRecord]]
"""(filesystem, path of the shard file, shard name) -> its samples in order."""
IdReader = Callable[[pafs.FileSystem, str], list[str]]
"""(filesystem, path of the shard file) -> its sample ids in order, without reading the media bytes."""


@dataclass(frozen=True)
class MediaFormat:
    name: str
    version: int
    """index.json's `format_version` (major): changes only when an old reader would misread new files."""
    suffix: str  # of the shard file: ".tar", ".parquet"
    open_shard: ShardOpener
    read: Reader
    read_ids: IdReader
    layout: Callable[[MediaSetHeader], dict[str, Any]]
    minor: int = 0
    """index.json's `format_minor`: additions a new reader may rely on, files unchanged."""


def sample_columns(header: MediaSetHeader, encodings: dict[str, str]) -> list[dict[str, str]]:
    """The columns every media format stores, with the format's encodings."""
    cols = [
        column("id", "string", "[]", "document id (32 hex digits); the WebDataset key", encodings["id"]),
        column("media", "binary", "[bytes]", "the prepared image / rendered page (PNG, JPEG, WebP) or audio "
               "clip (FLAC, WAV) exactly as ingest stored it", encodings["media"]),
        column("text", "string", "[]", "caption, page text or transcript (UTF-8, may be empty)", encodings["text"]),
        column("json", "string", "[]", "id, source, split, modality, uri, license, ingested_at, kind, mime, "
               "media_uri, sha256, the measured fields that apply (phash as 16 hex digits), meta, messages "
               "(chat documents)", encodings["json"]),
    ]
    if header.audio_features:
        cols.append(column("input_features", "float32", str(list(WHISPER_SHAPE)),
                           "Whisper log-Mel input features (80 mel bins x 3000 frames = 30 s); audio only",
                           encodings["input_features"]))
    return cols
