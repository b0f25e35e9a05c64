"""One media sample as every format stores it, built from a `dataset_splits` record batch.

A sample is one image, PDF-page or audio document: the bytes ingest prepared (its first media item
of the document's kind), the text (caption, page text, transcript), and one JSON record with the
document's fields, what ingest measured of the item, its meta and, for chat data, the messages.
Building the JSON here, once, is what makes `<key>.json` in a tar and the `json` column of a Parquet
shard the same bytes.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from platform_assets.contracts import MESSAGES_KEY
from platform_assets.schema import MEDIA_MEASURED_FIELDS, MEDIA_MODALITIES

# The media item a document of each modality is sharded with (schema.MEDIA_ITEM_TYPE `kind`).
ITEM_KIND = {"image": "image", "pdf": "page", "audio": "audio"}
# Stored MIME type -> file extension: the WebDataset member suffix (and the Parquet struct's `path`).
# Ingest writes PNG/JPEG (images, rendered pages; WebP kept as it was) and FLAC/WAV (audio).
EXTENSIONS = {"image/png": "png", "image/jpeg": "jpg", "image/webp": "webp",
              "audio/flac": "flac", "audio/x-flac": "flac",
              "audio/wav": "wav", "audio/x-wav": "wav", "audio/wave": "wav", "audio/vnd.wave": "wav"}
# Whisper's log-Mel input: 80 bins x 3000 frames of 10 ms (30 s, shorter clips padded), float32.
WHISPER_SHAPE = (80, 3000)
# Why a media document is not in the shards (exclusions `rule`, prefixed with the stage name).
NO_MEDIA_ITEM = "media_shards.no_media_item"  # no item of the document's kind (an image row without an image)
NO_MEDIA_BYTES = "media_shards.no_media_bytes"  # the item holds a uri only; shards carry bytes
UNSUPPORTED_MIME = "media_shards.unsupported_mime"  # bytes of a type with no member extension
REQUIRED_COLUMNS = ("id", "source", "split", "text", "modality", "uri", "license", "meta", "ingested_at", "media")


@dataclass(frozen=True)
class MediaSample:
    """What a shard holds of one media document; `record` is the `<key>.json` object."""

    id: str
    split: str
    source: str
    modality: str  # image | pdf | audio
    kind: str  # image | page | audio (the item's kind)
    text: str
    ext: str  # png | jpg | webp | flac | wav
    data: bytes
    measured: dict[str, Any]  # every schema.MEDIA_MEASURED_FIELDS key, None where it does not apply
    record: dict[str, Any]
    features: np.ndarray | None = None  # WHISPER_SHAPE float32 for audio when audio_features == whisper

    # cached: the shard cut, every format's writer and the counts each read them (encoding the JSON four
    # times was ~3% of an emoji's cost); a frozen dataclass still has a __dict__ for cached_property
    @cached_property
    def json_bytes(self) -> bytes:
        return record_json(self.record)

    @cached_property
    def text_bytes(self) -> bytes:
        return self.text.encode("utf-8", "surrogatepass")

    @cached_property
    def payload_bytes(self) -> int:
        """What the sample puts in a shard before any container overhead: media + text + JSON + features.
        Shards are cut on this sum, so every format cuts at the same samples."""
        features = 0 if self.features is None else self.features.nbytes
        return len(self.data) + len(self.text_bytes) + len(self.json_bytes) + features


def record_json(record: dict[str, Any]) -> bytes:
    """The one serialisation of a sample's JSON (sorted keys, no spaces, UTF-8): byte-identical rebuilds."""
    return json.dumps(record, sort_keys=True, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()


def _plain(value: Any) -> Any:
    # float32 NaN (a measurement that failed) is not JSON: null says "not measured" the same way
    return None if isinstance(value, float) and not math.isfinite(value) else value


def relative_uri(uri: str, base: str | None) -> str:
    """`uri` relative to its source's directory (`images/cat.png`, `manifest.jsonl#line=3`): a shard set
    must not depend on where the corpus was checked out, or its DVC version changes with the directory
    (the ids already hash locations relative to the source). A uri elsewhere (s3://, another root) stays whole."""
    prefix = base.rstrip("/") + "/" if base else None
    return uri[len(prefix):] if prefix and uri.startswith(prefix) else uri


def sample_record(row: dict[str, Any], item: dict[str, Any], uri_base: str | None = None) -> dict[str, Any]:
    """`<key>.json`: the document's fields, the item's identity and measured fields (those that apply),
    its meta parsed, and the conversation as `messages` (taken out of meta, not stored twice). Uris are
    relative to `uri_base`, the source's directory (see `relative_uri`)."""
    meta = json.loads(row["meta"]) if row["meta"] else {}
    if not isinstance(meta, dict):
        meta = {"value": meta}
    record: dict[str, Any] = {
        "id": row["id"], "source": row["source"], "split": row["split"], "modality": row["modality"],
        "uri": relative_uri(row["uri"], uri_base), "license": row["license"],
        "ingested_at": row["ingested_at"].isoformat() if row["ingested_at"] is not None else None,
        "kind": item["kind"], "mime": item["mime"], "media_uri": relative_uri(item["uri"], uri_base),
        "sha256": item["sha256"],
    }
    for name in MEDIA_MEASURED_FIELDS:
        value = _plain(item.get(name))
        if value is not None:
            # a 64-bit perceptual hash as 16 hex digits: JSON numbers above 2^53 lose bits in most readers
            record[name] = f"{value:016x}" if name == "phash" else value
    messages = meta.pop(MESSAGES_KEY, None)
    record["meta"] = meta
    if isinstance(messages, list):
        record[MESSAGES_KEY] = messages
    elif messages is not None:
        meta[MESSAGES_KEY] = messages  # not a conversation: kept where it was
    return record


def whisper_input_features(data: bytes) -> np.ndarray:
    """Whisper's log-Mel `input_features` of a stored clip, from the audio room (imported here: only
    `audio_features: whisper` needs it). 80 x 3000 float32 = 937.5 KiB per clip whatever its length,
    against ~0.5 MiB for 30 s of 16 kHz 16-bit mono FLAC (and ~17 KiB for 1 s): ~2x the audio at 30 s,
    ~50x for a 1 s clip. The tar stores them raw; Parquet's zstd packs the padded frames."""
    try:
        from platform_assets.media.audio import decode_clip, whisper_features
    except ImportError as e:
        raise ValueError("media_shards.audio_features is `whisper` but platform_assets.media.audio (decode_clip, "
                         f"whisper_features) cannot be imported: {e}") from e
    samples, rate = decode_clip(data)
    features = np.ascontiguousarray(whisper_features(samples, rate), dtype=np.float32)
    if features.shape != WHISPER_SHAPE:
        raise ValueError(f"whisper_features returned shape {features.shape}, the shard contract says {WHISPER_SHAPE}")
    return features


@dataclass
class BatchSamples:
    """What one input batch gives: the samples in input order, and what was not sharded."""

    samples: list[MediaSample]
    exclusions: list[dict[str, Any]]  # id, rule, value, bytes (contracts.EXCLUSION_FIELDS)
    text_rows: int  # text/html documents: the token path's, not skipped by error
    extra_items: int  # media items beyond the first of a document's kind (not sharded)


def media_samples(batch: pa.RecordBatch, with_features: bool,
                  uri_bases: Mapping[str, str] | None = None) -> BatchSamples:
    """The media samples of a batch of dataset_splits rows (text rows are counted and left out);
    `uri_bases`: each source's directory, which the samples' uris are made relative to."""
    is_media = pc.is_in(batch.column("modality"), value_set=pa.array(sorted(MEDIA_MODALITIES), pa.string()))
    is_media = is_media.fill_null(False)
    media_rows = batch.filter(is_media)
    out = BatchSamples([], [], batch.num_rows - media_rows.num_rows, 0)
    for row in media_rows.to_pylist():  # only media rows reach Python objects
        kind = ITEM_KIND[row["modality"]]
        items = [it for it in row["media"] or () if it["kind"] == kind]
        out.extra_items += max(0, len(items) - 1)
        excluded = _exclusion(row, items)
        if excluded is not None:
            out.exclusions.append(excluded)
            continue
        item = items[0]
        ext = EXTENSIONS[item["mime"]]
        features = whisper_input_features(item["bytes"]) if with_features and kind == "audio" else None
        out.samples.append(MediaSample(
            id=row["id"], split=row["split"], source=row["source"], modality=row["modality"], kind=kind,
            text=row["text"], ext=ext, data=item["bytes"],
            measured={name: item.get(name) for name in MEDIA_MEASURED_FIELDS},
            record=sample_record(row, item, (uri_bases or {}).get(row["source"])), features=features))
    return out


def _exclusion(row: dict[str, Any], items: list[dict[str, Any]]) -> dict[str, Any] | None:
    if not items:
        kinds = sorted({it["kind"] for it in row["media"] or ()})
        return {"id": row["id"], "rule": NO_MEDIA_ITEM, "bytes": None,
                "value": f"{row['modality']} document with no {ITEM_KIND[row['modality']]} item (items: {kinds})"}
    item = items[0]
    if item["bytes"] is None:
        return {"id": row["id"], "rule": NO_MEDIA_BYTES, "value": item["uri"], "bytes": None}
    if item["mime"] not in EXTENSIONS:
        return {"id": row["id"], "rule": UNSUPPORTED_MIME, "value": item["mime"], "bytes": len(item["bytes"])}
    return None


def check_columns(schema: pa.Schema, where: str) -> None:
    missing = [c for c in REQUIRED_COLUMNS if c not in schema.names]
    if missing:
        raise ValueError(f"{where} lacks columns {missing} (has {schema.names}): not a dataset_splits output")
