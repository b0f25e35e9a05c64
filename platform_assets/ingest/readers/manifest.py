"""The unified multimodal manifest: one row per example (JSONL or Parquet), naming a media file.

Row fields (the format of ../shared/data/build_multimodal.sh's `multimodal.jsonl`):
`modality` (image | pdf | audio), `file` (relative to the manifest, or an s3:// URI), `page` (PDFs:
0-based; absent = every page), text fields `caption` / `transcription` (or `transcript`) /
`instruction` + `response` / `messages`, `license`, `id`, and anything else (kept in meta).

The document's text is what describes the media (caption, transcript; for a PDF page, the page's own
text); an instruction + response or a `messages` list is kept as a conversation in meta["messages"]
(the chat contract), rendered as the text when nothing else describes the media. Files are read only
inside the source's roots (ingest/roots.py): a row pointing elsewhere is quarantined, never opened.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from platform_assets.contracts import MESSAGES_KEY
from platform_assets.ingest.chat import ChatFields, chat_messages, render_chat_text
from platform_assets.ingest.file_io import compression_of, iter_lines
from platform_assets.ingest.media_records import MediaReader
from platform_assets.ingest.readers.parquet import row_group_batches
from platform_assets.ingest.records import ReadContext, Record, Rejected
from platform_assets.ingest.roots import RootGuard
from platform_assets.ingest.salvaging_stream import open_record_stream, quarantine_broken_tail
from platform_assets.schema import QuarantineReason as Q
from platform_assets.storage import FileEntry, S3Settings, resolve_filesystem

MODALITIES = ("image", "pdf", "audio")
DESCRIPTION_FIELDS = ("caption", "transcription", "transcript")
_PAIR = ChatFields(prompt_field="instruction", response_field="response")
_MESSAGES = ChatFields(messages_field="messages")
_ROW_FIELDS = {"modality", "file", "page", "caption", "transcription", "transcript", "instruction", "response",
               "messages", "license"}


def is_parquet(path: str) -> bool:
    return path.endswith((".parquet", ".pq"))


def manifest_chunks(fs: pafs.FileSystem, file: FileEntry, rows_per_chunk: int) -> list[tuple[int, int, int]]:
    """(first byte, end byte, first line number) of consecutive runs of `rows_per_chunk` lines of an
    uncompressed JSONL manifest: each run is an input unit, so a manifest of a million images is read
    by parallel groups into bounded parts. One pass over the manifest's bytes (~200 bytes a row, no
    parsing); Parquet or compressed manifests are one chunk."""
    if is_parquet(file.path) or compression_of(file.path) is not None:
        return [(0, file.size, 1)]
    chunks: list[tuple[int, int, int]] = []
    start, line, lines_in_chunk, offset = 0, 1, 0, 0
    with fs.open_input_stream(file.path) as f:
        while block := f.read(8 * 2**20):
            at = 0
            while (nl := block.find(b"\n", at)) != -1:
                lines_in_chunk += 1
                at = nl + 1
                if lines_in_chunk == rows_per_chunk:
                    chunks.append((start, offset + at, line))
                    start, line, lines_in_chunk = offset + at, line + rows_per_chunk, 0
            offset += len(block)
    if start < offset or not chunks:
        chunks.append((start, offset, line))
    return chunks


def manifest_rows(ctx: ReadContext, file: FileEntry, stream, first_line: int = 1) -> Iterator[tuple[str, Any]]:
    """(row uri, parsed row) for each row; undecodable JSONL lines are quarantined here."""
    base = ctx.uri(file.path)
    if is_parquet(file.path):
        yield from _parquet_rows(ctx, base, pq.ParquetFile(stream))
        return
    for lineno, line, length in iter_lines(stream, ctx.max_document_bytes):
        lineno += first_line - 1
        uri = f"{base}#line={lineno}"
        if line is None:
            ctx.quarantine.add(uri, Q.DOCUMENT_TOO_LARGE, f"line of {length} bytes > {ctx.max_document_bytes}")
            continue
        if not line.strip():
            continue
        try:
            yield uri, orjson.loads(line)
        except orjson.JSONDecodeError as err:
            ctx.quarantine.add(uri, Q.MALFORMED_JSON, str(err), line)


def _parquet_rows(ctx: ReadContext, base: str, pf: pq.ParquetFile) -> Iterator[tuple[str, Any]]:
    """Rows decided one by one like JSONL lines: a damaged row group costs its unread rows, a row with
    invalid UTF-8 in a string column costs itself (both raised out of the whole manifest before)."""
    for first_row, batch in row_group_batches(ctx, base, pf, 1024):
        try:
            records: list[Any] = batch.to_pylist()
        except UnicodeDecodeError:  # find the bad rows: one by one
            records = [_row_or_reason(batch, i) for i in range(batch.num_rows)]
        for i, record in enumerate(records):
            if isinstance(record, UnicodeDecodeError):
                ctx.quarantine.add(f"{base}#row={first_row + i}", Q.INVALID_UTF8, f"a string column: {record.reason}")
            else:
                yield f"{base}#row={first_row + i}", record


def _row_or_reason(batch: pa.RecordBatch, i: int) -> dict[str, Any] | UnicodeDecodeError:
    try:
        return batch.slice(i, 1).to_pylist()[0]
    except UnicodeDecodeError as err:
        return err


def row_text(row: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """(text, meta) of a row: its description, or its conversation rendered; the rest goes to meta."""
    meta = {k: v for k, v in row.items() if k not in _ROW_FIELDS and v is not None}
    description = next((row[f] for f in DESCRIPTION_FIELDS if isinstance(row.get(f), str) and row[f].strip()), "")
    messages = None
    if row.get("messages") is not None:
        messages = chat_messages(row, _MESSAGES)
    elif isinstance(row.get("response"), str) and row["response"].strip():
        messages = chat_messages(row, _PAIR)
    elif isinstance(row.get("instruction"), str) and row["instruction"].strip():
        meta["instruction"] = row["instruction"]  # a prompt without an answer: kept, not a conversation
    if messages is not None:
        meta[MESSAGES_KEY] = messages
    text = description or (render_chat_text(messages) if messages and row.get("modality") != "pdf" else "")
    return text, meta


def read_manifest(ctx: ReadContext, file: FileEntry, chunk: tuple[int, int, int], media: MediaReader,
                  guard: RootGuard, s3: S3Settings | None) -> Iterator[Record]:
    """The documents of one chunk of a manifest's rows (see `manifest_chunks`)."""
    start, end, first_line = chunk
    if is_parquet(file.path):
        with ctx.fs.open_input_file(file.path) as f:  # Parquet needs random access to its footer
            rows = list(manifest_rows(ctx, file, f))  # rows are small; media are read one at a time
    elif compression_of(file.path) is not None:
        with open_record_stream(ctx.fs, file.path) as stream:  # a damaged tail costs its rows only
            rows = list(manifest_rows(ctx, file, stream))
            quarantine_broken_tail(ctx, file.path, stream)
    else:
        with ctx.fs.open_input_file(file.path) as f:
            f.seek(start)
            rows = list(manifest_rows(ctx, file, pa.BufferReader(f.read(end - start)), first_line))
    for uri, row in rows:
        try:
            yield from _row_documents(ctx, uri, row, media, guard, s3)
        except Rejected as rej:
            ctx.quarantine.add(uri, rej.reason, rej.detail)


def _row_documents(ctx: ReadContext, uri: str, row: Any, media: MediaReader, guard: RootGuard,
                   s3: S3Settings | None) -> Iterator[Record]:
    if not isinstance(row, dict):
        raise Rejected(Q.NOT_A_JSON_OBJECT, f"row is a {type(row).__name__}")
    modality = row.get("modality")
    if modality not in MODALITIES:
        raise Rejected(Q.UNSUPPORTED_MEDIA, f"modality {modality!r}: expected one of {', '.join(MODALITIES)}")
    page = row.get("page")
    if page is not None and (modality != "pdf" or isinstance(page, bool) or not isinstance(page, int) or page < 0):
        raise Rejected(Q.PAGE_NOT_FOUND, f"page {page!r}: a 0-based page number of a pdf row")
    location = guard.resolve(row.get("file"))  # Rejected(path_outside_root / missing_file) before any open
    text, meta = row_text(row)
    meta["file"] = row["file"]
    data, mtime = _read_file(location, s3, _room_settings(media, modality).max_file_bytes, row["file"])
    yield from media.documents(data, location, text=text, meta=meta, mtime_s=mtime, doc_uri=uri, expected=modality,
                               page=page)


def _room_settings(media: MediaReader, modality: str):
    return {"image": media.settings.images, "pdf": media.settings.pdf, "audio": media.settings.audio}[modality]


def _read_file(location: str, s3: S3Settings | None, limit: int, name: str) -> tuple[bytes, int | None]:
    fs, path = resolve_filesystem(location, s3)
    info = fs.get_file_info(path)
    if info.type != pafs.FileType.File:
        raise Rejected(Q.MISSING_FILE, f"{name!r}: no such file ({location})")
    if info.size > limit:
        raise Rejected(Q.MEDIA_TOO_LARGE, f"{name!r}: {info.size} bytes > {limit} (media.*.max_file_bytes)")
    try:
        with fs.open_input_stream(path) as f:
            data = f.read()
    except OSError as err:  # permissions, a file that vanished: this row, not the rest of the manifest chunk
        raise Rejected(Q.UNREADABLE_FILE, f"{name!r}: {err}") from None
    mtime = int(info.mtime.timestamp()) if info.mtime is not None else None
    return data, mtime
