"""The documents schema (v3: any modality, with what ingest measured of each media item), the quarantine
schema, and the stable document id.

The schema is versioned: its `name/version` travels in the Parquet schema metadata so a reader can
refuse a file written by an incompatible version instead of silently misreading it (v1 outputs are
and v2 outputs are upgraded on read, see :func:`upgrade_documents`). Stages add columns (lang, quality signals, split,
...) and never rename or retype these.

A document is `text` (possibly empty) plus `media`: a list of binary items (an image, a rendered PDF
page, an audio clip), each with its kind, MIME type, where it came from, its sha256 and its bytes. A
caption, page text or transcript lives in `text`, so every text step applies to it unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum

import numpy as np
import pyarrow as pa
import xxhash

from platform_assets.contracts import schema_tag, versioned_schema

DOCUMENTS_SCHEMA_NAME = "platform.documents"
DOCUMENTS_SCHEMA_VERSION = 3
QUARANTINE_SCHEMA_NAME = "platform.quarantine"
QUARANTINE_SCHEMA_VERSION = 1

__all__ = ["schema_tag"]  # re-exported: readers check tags through this module


class Modality(StrEnum):
    """What a document is. Stored as a string (dictionary-encoded in Parquet); steps declare the ones
    they apply to, so an image never meets a text-only rule."""

    TEXT = "text"
    HTML = "html"  # text whose main content cleaning extracts first
    IMAGE = "image"
    PDF = "pdf"  # one page of a PDF: its text plus the rendered page
    AUDIO = "audio"


TEXT_MODALITIES = frozenset({Modality.TEXT, Modality.HTML})
MEDIA_MODALITIES = frozenset({Modality.IMAGE, Modality.PDF, Modality.AUDIO})

# One media item. `bytes` is large_binary (64-bit offsets): a batch of high-resolution images or
# minutes of audio passes 2 GiB quickly. `uri` says where the bytes came from: the original file
# (with `#page=N` for a page) stays referenced there, and `bytes` holds what ingest prepared from it
# (the normalised image, the rendered page, the 16 kHz mono clip; see platform_assets/media/).
# The measured fields (v3) are null where they do not apply; cleaning filters on them without decoding
# anything again, and users query them with DuckDB (`media[1].width`).
MEDIA_ITEM_TYPE = pa.struct([
    pa.field("kind", pa.string(), nullable=False),  # image | page (a rendered PDF page) | audio
    pa.field("mime", pa.string(), nullable=False),  # of `bytes`, sniffed or written by ingest, never from a name
    pa.field("uri", pa.string(), nullable=False),
    pa.field("sha256", pa.string(), nullable=False),  # of the bytes, hex
    pa.field("bytes", pa.large_binary(), nullable=True),
    pa.field("width", pa.int32()),  # pixels of the stored image / rendered page
    pa.field("height", pa.int32()),
    pa.field("format", pa.string()),  # the source's container: PNG, JPEG, GIF, PDF, WAV, FLAC, OGG, ...
    pa.field("mode", pa.string()),  # the source's pixel mode (RGBA, P, CMYK, I;16, ...) before normalisation
    pa.field("frames", pa.int32()),  # frames of the source image; pages of the PDF a page came from
    pa.field("page", pa.int32()),  # 0-based page number of a PDF page
    pa.field("ocr", pa.bool_()),  # the page text came from Tesseract, not from the PDF's text layer
    pa.field("luma_std", pa.float32()),  # std deviation of luminance (0-255): ~0 for blank images
    pa.field("phash", pa.uint64()),  # 64-bit DCT perceptual hash (imagehash.phash): near-duplicate images
    pa.field("duration_s", pa.float64()),
    pa.field("sample_rate", pa.int32()),  # of the stored clip (resampled)
    pa.field("source_sample_rate", pa.int32()),
    pa.field("channels", pa.int16()),  # of the source (the stored clip is mono)
    pa.field("rms_dbfs", pa.float32()),  # loudness of the stored clip, dB relative to full scale
    pa.field("silent_fraction", pa.float32()),  # share of 20 ms frames below the silence level
    pa.field("clipped_fraction", pa.float32()),  # share of samples at full scale
])
MEDIA_MEASURED_FIELDS = tuple(f.name for f in MEDIA_ITEM_TYPE)[5:]
MEDIA_ITEM_V2_FIELDS = ("kind", "mime", "uri", "sha256", "bytes")
# "element" is the name Parquet gives a list's item field: the schema reads back equal to what was written.
MEDIA_TYPE = pa.list_(pa.field("element", MEDIA_ITEM_TYPE, nullable=False))

# text is large_string: one Arrow string array is capped at 2 GiB of characters, and a record batch of
# 8k documents may hold a few 50 MB documents; large_string (64-bit offsets) has no such cap.
DOCUMENT_FIELDS: list[pa.Field] = [
    pa.field("id", pa.string(), nullable=False),
    pa.field("source", pa.string(), nullable=False),
    pa.field("text", pa.large_string(), nullable=False),
    pa.field("modality", pa.string(), nullable=False),
    pa.field("uri", pa.string(), nullable=False),
    pa.field("license", pa.string(), nullable=True),
    pa.field("meta", pa.string(), nullable=True),  # JSON object of the source's other fields
    # When the content was last changed at the source (file mtime, or the source's snapshot_time),
    # not when this run happened: a wall-clock timestamp would make re-runs differ byte for byte.
    # Milliseconds because Parquet has no second unit: a [s] column reads back as [ms].
    pa.field("ingested_at", pa.timestamp("ms", tz="UTC"), nullable=True),
    pa.field("media", MEDIA_TYPE, nullable=True),  # null for text documents (costs ~nothing in Parquet)
]

DOCUMENTS_SCHEMA = versioned_schema(DOCUMENT_FIELDS, DOCUMENTS_SCHEMA_NAME, DOCUMENTS_SCHEMA_VERSION)
DOCUMENTS_V1_TAG = f"{DOCUMENTS_SCHEMA_NAME}/1"
DOCUMENTS_V2_TAG = f"{DOCUMENTS_SCHEMA_NAME}/2"
UPGRADABLE_TAGS = (DOCUMENTS_V1_TAG, DOCUMENTS_V2_TAG)


class SchemaVersionError(ValueError):
    """A stored output was written with a documents schema this code cannot read."""


def check_documents_version(schema: pa.Schema, where: str = "") -> None:
    """Raise SchemaVersionError for a documents schema newer (or other) than this code reads; other
    schemas (tokens, exclusions, foreign files) pass."""
    tag = schema_tag(schema)
    if tag is None or not tag.startswith(f"{DOCUMENTS_SCHEMA_NAME}/"):
        return
    if tag not in (*UPGRADABLE_TAGS, f"{DOCUMENTS_SCHEMA_NAME}/{DOCUMENTS_SCHEMA_VERSION}"):
        raise SchemaVersionError(
            f"{where or 'output'}: written with schema {tag!r}; this version reads "
            f"{DOCUMENTS_SCHEMA_NAME}/1 to /{DOCUMENTS_SCHEMA_VERSION}. Re-materialize it with this version.")


def upgrade_documents(batch: pa.RecordBatch, where: str = "") -> pa.RecordBatch:
    """A batch of a stored documents output as the current schema, whatever version wrote it.

    v1 (text only) had no `media` column: it is added as nulls, which is exactly what v3 writes for
    text. v2 media items lacked the measured fields: they are added as nulls (nothing was measured).
    So an old output reads as if this version had written it and nothing has to be re-ingested. A
    newer or foreign tag is a clear error naming the output, never a silent misread.
    """
    tag = schema_tag(batch.schema)
    if tag not in UPGRADABLE_TAGS:
        check_documents_version(batch.schema, where)
        return batch
    arrays = list(batch.columns)
    names = list(batch.schema.names)
    schema_fields = list(batch.schema)
    if "media" not in names:
        at = names.index("ingested_at") + 1 if "ingested_at" in names else len(names)
        arrays.insert(at, pa.nulls(batch.num_rows, MEDIA_TYPE))
        schema_fields.insert(at, DOCUMENTS_SCHEMA.field("media"))
    else:
        at = names.index("media")
        arrays[at] = upgrade_media_v2(arrays[at])
        schema_fields[at] = DOCUMENTS_SCHEMA.field("media")
    meta = dict(batch.schema.metadata or {})
    meta.update(DOCUMENTS_SCHEMA.metadata)
    return pa.RecordBatch.from_arrays(arrays, schema=pa.schema(schema_fields, metadata=meta))


def upgrade_media_v2(media: pa.Array) -> pa.Array:
    """A v2 `media` list (items of kind, mime, uri, sha256, bytes) as MEDIA_TYPE, measured fields null."""
    if media.type == MEDIA_TYPE:
        return media
    items = media.values
    n = len(items)
    children = [items.field(name) if name in MEDIA_ITEM_V2_FIELDS else pa.nulls(n, f.type)
                for name, f in ((f.name, f) for f in MEDIA_ITEM_TYPE)]
    upgraded = pa.StructArray.from_arrays(children, fields=list(MEDIA_ITEM_TYPE))
    return pa.ListArray.from_arrays(media.offsets, upgraded, type=MEDIA_TYPE, mask=media.is_null())


QUARANTINE_SCHEMA = versioned_schema(
    [
        pa.field("source", pa.string(), nullable=False),
        pa.field("uri", pa.string(), nullable=False),  # file, and line/row where known
        pa.field("reason", pa.string(), nullable=False),  # one of QuarantineReason
        pa.field("detail", pa.string(), nullable=True),  # the parser's message
        pa.field("sample", pa.string(), nullable=True),  # first bytes, undecodable bytes escaped
    ],
    QUARANTINE_SCHEMA_NAME,
    QUARANTINE_SCHEMA_VERSION,
)


class QuarantineReason:
    """Why an input record was not ingested. Stable strings: users query them with DuckDB."""

    MALFORMED_JSON = "malformed_json"
    NOT_A_JSON_OBJECT = "not_a_json_object"
    INVALID_UTF8 = "invalid_utf8"
    MISSING_TEXT_FIELD = "missing_text_field"
    TEXT_NOT_STRING = "text_not_string"
    EMPTY_TEXT = "empty_text"
    EMPTY_FILE = "empty_file"
    BINARY_FILE = "binary_file"  # a whole-file document (text, HTML) with NUL bytes in its first 8 KiB
    BINARY_RECORD = "binary_record"  # a line or CSV text field with NUL bytes: that record only
    UNREADABLE_FILE = "unreadable_file"
    RAGGED_CSV_ROW = "ragged_csv_row"
    MALFORMED_CSV = "malformed_csv"
    DOCUMENT_TOO_LARGE = "document_too_large"
    INVALID_CHAT = "invalid_chat"
    # media (platform_assets/media/ and the multimodal sources); the detail names the file and what was found
    MISSING_FILE = "missing_file"  # a manifest row names a file that does not exist
    PATH_OUTSIDE_ROOT = "path_outside_root"  # ../, an absolute path or a symlink leaving the source's roots
    UNSUPPORTED_MEDIA = "unsupported_media"  # bytes of no kind this source reads (or no known type)
    MEDIA_TYPE_MISMATCH = "media_type_mismatch"  # the row says image, the bytes are a PDF (or a .png is a GIF)
    MEDIA_TOO_LARGE = "media_too_large"  # file bytes over the room's limit
    CORRUPT_IMAGE = "corrupt_image"  # truncated or undecodable
    DECOMPRESSION_BOMB = "decompression_bomb"  # more pixels than images.max_pixels
    ANIMATED_IMAGE = "animated_image"  # several frames and images.animated = quarantine
    CORRUPT_PDF = "corrupt_pdf"
    ENCRYPTED_PDF = "encrypted_pdf"
    PDF_PAGE_LIMIT = "pdf_page_limit"  # pages past pdf.max_pages (the first max_pages are kept)
    PAGE_NOT_FOUND = "page_not_found"  # a manifest row's page is not in the PDF
    CORRUPT_AUDIO = "corrupt_audio"  # wrong header, undecodable
    EMPTY_AUDIO = "empty_audio"  # zero samples
    AUDIO_TOO_LONG = "audio_too_long"  # longer than audio.max_duration_s (decided from the header)

    @classmethod
    def all(cls) -> list[str]:
        return sorted(v for k, v in vars(cls).items() if k.isupper())


def _id_hasher(source: str, uri: str) -> xxhash.xxh3_128:
    h = xxhash.xxh3_128()
    h.update(source.encode())
    h.update(b"\x00")
    h.update(uri.encode())
    h.update(b"\x00")
    return h


def document_id(source: str, uri: str, text: str, media_sha256: Sequence[str] = ()) -> str:
    """Stable, content-derived id: 128-bit XXH3 of (source, location, UTF-8 text), as 32 hex chars.

    The location is part of the key so that two identical texts at different places get different
    ids (raw data does contain exact duplicates; the dedup stage finds them by text hash and must be
    able to name both). Same file, same line, same text gives the same id on every run and machine.
    128 bits keep the chance of any accidental collision below 1e-18 for 10^10 documents; XXH3 hashes
    at ~10 GB/s where BLAKE2b does ~1 GB/s, which mattered: hashing was 15% of ingest time.
    A document with media also hashes its media's sha256s (a caption-less image is its bytes, so two
    different images at one location never share an id); a text document's id is what v1 gave it.
    """
    h = _id_hasher(source, uri)
    h.update(text.encode("utf-8", "surrogatepass"))
    if media_sha256:
        _update_media(h, media_sha256)
    return h.hexdigest()


def _update_media(h: xxhash.xxh3_128, media_sha256: Sequence[str]) -> None:
    # Domain separation: after the text come "\x01media" and 64-hex digests, so a (text, media) key
    # equals a text-only key only for a text ending in that exact byte string.
    h.update(b"\x01media")
    for digest in media_sha256:
        h.update(digest.encode())
        h.update(b"\x00")


def document_ids(source: str, uris: Sequence[str], texts: pa.Array,
                 media_sha256: Sequence[Sequence[str] | None] | None = None) -> list[str]:
    """`document_id` for a whole large_string array, hashing its UTF-8 buffer in place (no copies);
    `media_sha256[i]` (optional) the digests of row i's media items."""
    if not pa.types.is_large_string(texts.type):
        texts = texts.cast(pa.large_string())
    n = len(texts)
    _, offsets_buf, data_buf = texts.buffers()
    offsets = np.frombuffer(offsets_buf, dtype=np.int64, count=n + 1, offset=texts.offset * 8).tolist()
    data = memoryview(data_buf) if data_buf is not None else memoryview(b"")
    out = []
    for i, uri in enumerate(uris):
        h = _id_hasher(source, uri)
        h.update(data[offsets[i] : offsets[i + 1]])
        if media_sha256 is not None and media_sha256[i]:
            _update_media(h, media_sha256[i])
        out.append(h.hexdigest())
    return out


def single_array(column: pa.Array | pa.ChunkedArray) -> pa.Array:
    """`column` as one Array. A ChunkedArray of one chunk gives that chunk: `combine_chunks()` would
    copy it even then (Arrow's Concatenate always allocates), 16 MiB per ingest block."""
    if not isinstance(column, pa.ChunkedArray):
        return column
    return column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()


def text_sample(raw: bytes | str, limit: int = 200) -> str:
    """A short, always-valid-UTF-8 excerpt for the quarantine table (bad bytes shown as \\xNN)."""
    if isinstance(raw, str):
        # a CSV cell decoded with surrogateescape carries its bad bytes as lone surrogates, which
        # Arrow refuses to store: turn them back into bytes and show them as \xNN like the rest
        try:
            return raw[:limit].encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
        except UnicodeEncodeError:  # other lone surrogates (JSON "\ud800"): escaped as \udNNN
            return raw[:limit].encode("utf-8", "backslashreplace").decode("utf-8")
    return raw[:limit].decode("utf-8", "backslashreplace")
