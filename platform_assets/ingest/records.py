"""What readers emit: accepted records and quarantined inputs, and the context they read with."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import NamedTuple

import pyarrow as pa
import pyarrow.fs as pafs

from platform_assets.schema import QUARANTINE_SCHEMA, text_sample


class Rejected(Exception):
    """A record that cannot become a document; carries the quarantine reason."""

    def __init__(self, reason: str, detail: str):
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


class Record(NamedTuple):
    """One accepted document before it gets its id: readers yield these, the writer batches them."""

    text: str
    uri: str
    meta: str | None  # JSON object text, or None
    mtime_s: int | None  # seconds since the epoch (UTC) of the content's last change at the source
    modality: str = "text"
    media: tuple[dict, ...] | None = None
    """Media items (schema.MEDIA_ITEM_TYPE: kind, mime, uri, sha256, bytes) of an image, page or clip."""

    def payload_bytes(self) -> int:
        """What the record weighs in a batch: its text plus its media bytes."""
        return len(self.text) + sum(len(m["bytes"] or b"") for m in self.media or ())


@dataclass(frozen=True)
class RecordBlock:
    """Many accepted documents at once, text already in Arrow (the fast path: no per-row str)."""

    texts: pa.Array  # large_string, valid UTF-8, no nulls, no blank values
    uris: list[str]
    metas: pa.Array | list[str | None]  # JSON object text per row, or null
    mtime_s: int | None
    modality: str = "text"

    def __len__(self) -> int:
        return len(self.texts)


@dataclass
class QuarantineSink:
    """Collects rejected inputs with their reason; they never silently disappear.

    Rows are kept in memory: a quarantined row holds at most a 200-character sample, so even a
    million bad lines cost ~300 MB at worst, and a typical source has a handful.
    """

    source: str
    rows: list[tuple[str, str, str, str | None, str | None]] = field(default_factory=list)
    counts: Counter[str] = field(default_factory=Counter)

    def add(self, uri: str, reason: str, detail: str | None = None, sample: bytes | str | None = None) -> None:
        self.counts[reason] += 1
        self.rows.append(
            (self.source, uri, reason, text_sample(detail or "", 500) or None,
             None if sample is None else text_sample(sample))
        )

    @classmethod
    def merged(cls, source: str, sinks: list[QuarantineSink]) -> QuarantineSink:
        """One sink holding the others' rows in the given order (units are merged in input order)."""
        out = cls(source)
        for sink in sinks:
            out.rows.extend(sink.rows)
            out.counts.update(sink.counts)
        return out

    def table(self) -> pa.Table:
        cols = list(zip(*self.rows, strict=True)) if self.rows else [[] for _ in QUARANTINE_SCHEMA]
        return pa.Table.from_arrays([pa.array(c, type=f.type) for c, f in zip(cols, QUARANTINE_SCHEMA, strict=True)],
                                    schema=QUARANTINE_SCHEMA)


@dataclass
class ReadContext:
    """Everything a reader needs besides the file: where to read and where to send rejects."""

    source: str
    fs: pafs.FileSystem
    quarantine: QuarantineSink
    max_document_bytes: int
    encoding: str = "utf-8"
    snapshot_s: int | None = None  # overrides file mtimes when the config sets snapshot_time
    display_prefix: str = ""  # "s3://" for S3 paths, so uris in the data are usable as they are
    # May a reader parse one file on several threads? Not when other files are read beside it:
    # the cores are busy already, and threaded parsing costs ~40% more CPU per byte.
    parse_threads: bool = True

    def uri(self, path: str) -> str:
        return f"{self.display_prefix}{path}"

    def mtime(self, file_mtime_s: int | None) -> int | None:
        return self.snapshot_s if self.snapshot_s is not None else file_mtime_s
