"""Batched writing of documents: memory is bounded by one batch, not by the source.

Rows accumulate until `io.batch_rows` rows or `io.batch_bytes` of payload (text + media bytes), then
become one Arrow record batch (= one Parquet row group) with ids computed from the Arrow text buffer;
`PartWriter` compresses it in a background thread (a group read alone) or in the caller's (groups read
at once, one encode at a time: ingest/run.py), so peak memory is about two batches (2 x 64 MiB of
payload by default) plus the reader's buffers.
"""

from __future__ import annotations

import threading
from collections import Counter
from contextlib import nullcontext
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from platform_assets.contracts import Counts, IOSettings
from platform_assets.ingest.records import Record, RecordBlock
from platform_assets.parquet_parts import PartWriter
from platform_assets.schema import DOCUMENTS_SCHEMA, MEDIA_TYPE, document_ids

INGESTED_AT_TYPE = DOCUMENTS_SCHEMA.field("ingested_at").type


@dataclass
class WriteStats(Counts):
    rows: int = 0
    text_bytes: int = 0
    parts: list[str] = field(default_factory=list)
    modalities: Counter[str] = field(default_factory=Counter)  # documents per modality
    media_bytes: int = 0  # prepared media bytes stored inline
    ocr_pages: int = 0  # PDF pages whose text came from Tesseract
    pdf_text_pages: int = 0  # PDF pages with text (from the text layer or OCR)


class DocumentWriter:
    def __init__(self, parts: PartWriter, source: str, license: str | None, io: IOSettings, id_root: str = "",
                 write_lock: threading.Lock | None = None):
        """`write_lock`: held while a batch is handed to `parts` (ingest/run.py: groups read at once
        encode one at a time)."""
        self._source = source
        self._write_lock = write_lock if write_lock is not None else nullcontext()
        # Ids hash the location relative to the source's root (`docs/a.jsonl#line=3`, not
        # `/home/me/corpus/docs/a.jsonl#line=3`): the same corpus gives the same ids, hence the same
        # splits and the same dataset version, wherever it is checked out. `uri` keeps the full path.
        self._id_root = id_root
        self._license = license
        self._io = io
        self._buf: list[Record] = []
        self._buf_bytes = 0
        self._parts = parts  # DOCUMENTS_SCHEMA parts, from the stage's TableSink
        self.stats = WriteStats()

    def add(self, rec: Record | RecordBlock) -> None:
        if isinstance(rec, RecordBlock):
            self._flush()  # keep input order: buffered single records go first
            step = self._io.batch_rows
            for lo in range(0, len(rec), step):
                texts = rec.texts.slice(lo, step)
                n = len(texts)
                self._write(
                    self._batch(texts, rec.uris[lo : lo + n], rec.metas[lo : lo + n], [rec.mtime_s] * n,
                                [rec.modality] * n),
                    int(pc.sum(pc.binary_length(texts)).as_py() or 0),
                )
            return
        self._buf.append(rec)
        self._buf_bytes += rec.payload_bytes() if rec.media else len(rec.text)
        if rec.media:
            self.stats.media_bytes += sum(len(m["bytes"] or b"") for m in rec.media)
            self.stats.ocr_pages += sum(bool(m.get("ocr")) for m in rec.media)
            self.stats.pdf_text_pages += rec.modality == "pdf" and bool(rec.text.strip())
        if len(self._buf) >= self._io.batch_rows or self._buf_bytes >= self._io.batch_bytes:
            self._flush()

    def _id_location(self, uri: str) -> str:
        if not self._id_root or not uri.startswith(self._id_root):
            return uri
        return uri[len(self._id_root):].lstrip("/")

    def _batch(self, texts: pa.Array, uris, metas, mtimes, modalities, media=None) -> pa.RecordBatch:
        n = len(texts)
        has_media = media is not None and any(media)
        digests = [[m["sha256"] for m in items] if items else None for items in media] if has_media else None
        locations = [self._id_location(u) for u in uris]
        return pa.RecordBatch.from_arrays(
            [
                pa.array(document_ids(self._source, locations, texts, digests), pa.string()),
                pa.array([self._source] * n, pa.string()),
                texts,
                pa.array(modalities, pa.string()),
                pa.array(uris, pa.string()),
                pa.array([self._license] * n, pa.string()),
                metas if isinstance(metas, pa.Array) else pa.array(metas, pa.string()),
                pa.array(mtimes, pa.timestamp("s", tz="UTC")).cast(INGESTED_AT_TYPE),
                pa.array([list(m) if m else None for m in media], MEDIA_TYPE) if has_media else pa.nulls(n, MEDIA_TYPE),
            ],
            schema=DOCUMENTS_SCHEMA,
        )

    def _flush(self) -> None:
        if not self._buf:
            return
        texts, uris, metas, mtimes, modalities, media = zip(*self._buf, strict=True)
        batch = self._batch(pa.array(texts, pa.large_string()), uris, metas, mtimes, modalities, media)
        text_bytes = self._buf_bytes
        self._buf, self._buf_bytes = [], 0
        self._write(batch, text_bytes)

    def _write(self, batch: pa.RecordBatch, text_bytes: int) -> None:
        self.stats.rows += batch.num_rows
        for entry in pc.value_counts(batch.column("modality")).to_pylist():
            self.stats.modalities[entry["values"]] += entry["counts"]
        self.stats.text_bytes += text_bytes  # payload: text, plus media bytes for media records
        with self._write_lock:
            self._parts.write(batch)

    def close(self) -> WriteStats:
        self._flush()
        self.stats.parts = self._parts.close()
        return self.stats

    def abort(self) -> None:
        self._parts.abort()

    def __enter__(self) -> DocumentWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()
