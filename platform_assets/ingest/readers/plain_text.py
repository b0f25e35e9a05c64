"""Plain text (one document per file or per line) and folders of documents (one per file)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import PurePosixPath

import orjson

from platform_assets.ingest.file_io import SNIFF_BYTES, iter_lines, looks_binary
from platform_assets.ingest.records import ReadContext, Record
from platform_assets.schema import QuarantineReason as Q
from platform_assets.storage import FileEntry

HTML_SUFFIXES = {".html", ".htm", ".xhtml"}


def _modality(path: str, head: bytes) -> str:
    name = path.removesuffix(".gz").removesuffix(".zst").removesuffix(".bz2")
    if PurePosixPath(name).suffix.lower() in HTML_SUFFIXES:
        return "html"
    sniff = head[:512].lstrip().lower()
    return "html" if sniff.startswith((b"<!doctype html", b"<html")) else "text"


def read_whole_file(ctx: ReadContext, file: FileEntry, stream, source_root: str) -> Iterator[Record]:
    """The file is one document; meta records its path relative to the source's root."""
    uri = ctx.uri(file.path)
    # +1 so that "exactly at the limit" and "over the limit" can be told apart without reading more
    data = stream.read(ctx.max_document_bytes + 1)
    if len(data) > ctx.max_document_bytes:
        ctx.quarantine.add(uri, Q.DOCUMENT_TOO_LARGE, f"file larger than {ctx.max_document_bytes} bytes", data)
        return
    if not data.strip():
        ctx.quarantine.add(uri, Q.EMPTY_FILE, f"{len(data)} bytes, no text")
        return
    if looks_binary(data):
        ctx.quarantine.add(uri, Q.BINARY_FILE, "NUL bytes in the first 8 KiB", data[:64])
        return
    try:
        text = data.decode(ctx.encoding)
    except UnicodeDecodeError as err:
        ctx.quarantine.add(
            uri,
            Q.INVALID_UTF8,
            f"not valid {ctx.encoding} at byte {err.start}: {err.reason}",
            data[max(0, err.start - 40) : err.start + 40],
        )
        return
    rel = (
        file.path[len(source_root) + 1 :] if file.path.startswith(source_root + "/") else PurePosixPath(file.path).name
    )
    meta = orjson.dumps({"path": rel, "bytes": len(data)}).decode()
    yield Record(text, uri, meta, ctx.mtime(file.mtime_s), _modality(file.path, data[:SNIFF_BYTES]))


def read_lines(ctx: ReadContext, file: FileEntry, stream) -> Iterator[Record]:
    """Every non-blank line is a document."""
    base = ctx.uri(file.path)
    mtime = ctx.mtime(file.mtime_s)
    for lineno, line, length in iter_lines(stream, ctx.max_document_bytes):
        uri = f"{base}#line={lineno}"
        if line is None:
            ctx.quarantine.add(uri, Q.DOCUMENT_TOO_LARGE, f"line of {length} bytes > {ctx.max_document_bytes}")
            continue
        if not line or line.isspace():
            continue
        try:
            text = line.decode(ctx.encoding)
        except UnicodeDecodeError as err:
            ctx.quarantine.add(uri, Q.INVALID_UTF8, f"not valid {ctx.encoding}: {err.reason}", line)
            continue
        yield Record(text, uri, None, mtime)
