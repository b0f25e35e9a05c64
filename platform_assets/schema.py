"""Arrow schemas shared by every text stage, and the stable document id.

The schema is versioned: its version travels in the Parquet schema metadata so a reader can refuse a
file written by an incompatible version instead of silently misreading it. Stages add columns (lang,
quality signals, split, ...) and never rename or retype these.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import xxhash

DOCUMENTS_SCHEMA_NAME = "platform.documents"
DOCUMENTS_SCHEMA_VERSION = 1
QUARANTINE_SCHEMA_NAME = "platform.quarantine"
QUARANTINE_SCHEMA_VERSION = 1

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
]


def _versioned(fields: list[pa.Field], name: str, version: int) -> pa.Schema:
    return pa.schema(fields, metadata={b"platform.schema": f"{name}/{version}".encode()})


DOCUMENTS_SCHEMA = _versioned(DOCUMENT_FIELDS, DOCUMENTS_SCHEMA_NAME, DOCUMENTS_SCHEMA_VERSION)

QUARANTINE_SCHEMA = _versioned(
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
    BINARY_FILE = "binary_file"
    UNREADABLE_FILE = "unreadable_file"
    RAGGED_CSV_ROW = "ragged_csv_row"
    MALFORMED_CSV = "malformed_csv"
    DOCUMENT_TOO_LARGE = "document_too_large"
    INVALID_CHAT = "invalid_chat"

    @classmethod
    def all(cls) -> list[str]:
        return sorted(v for k, v in vars(cls).items() if k.isupper())


def schema_tag(schema: pa.Schema) -> str | None:
    """The `name/version` tag stored in a schema's metadata, or None for a foreign file."""
    raw = (schema.metadata or {}).get(b"platform.schema")
    return raw.decode() if raw else None


def _id_hasher(source: str, uri: str) -> xxhash.xxh3_128:
    h = xxhash.xxh3_128()
    h.update(source.encode())
    h.update(b"\x00")
    h.update(uri.encode())
    h.update(b"\x00")
    return h


def document_id(source: str, uri: str, text: str) -> str:
    """Stable, content-derived id: 128-bit XXH3 of (source, location, UTF-8 text), as 32 hex chars.

    The location is part of the key so that two identical texts at different places get different
    ids (raw data does contain exact duplicates; the dedup stage finds them by text hash and must be
    able to name both). Same file, same line, same text gives the same id on every run and machine.
    128 bits keep the chance of any accidental collision below 1e-18 for 10^10 documents; XXH3 hashes
    at ~10 GB/s where BLAKE2b does ~1 GB/s, which mattered: hashing was 15% of ingest time.
    """
    h = _id_hasher(source, uri)
    h.update(text.encode("utf-8", "surrogatepass"))
    return h.hexdigest()


def document_ids(source: str, uris: Sequence[str], texts: pa.Array) -> list[str]:
    """`document_id` for a whole large_string array, hashing its UTF-8 buffer in place (no copies)."""
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
        return raw[:limit]
    return raw[:limit].decode("utf-8", "backslashreplace")
