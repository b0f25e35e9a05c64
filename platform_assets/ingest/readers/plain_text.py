"""Plain text (one document per file or per line) and folders of documents (one per file)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import PurePosixPath

import orjson

from platform_assets.ingest.file_io import SNIFF_BYTES, iter_lines, looks_binary
from platform_assets.ingest.media_types import media_item, media_kind, modality_of, sniff_mime
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


def read_whole_file(ctx: ReadContext, file: FileEntry, stream, source_root: str,
                    media_kinds: frozenset[str] = frozenset()) -> Iterator[Record]:
    """The file is one document; meta records its path relative to the source's root.

    Its type comes from its bytes: an image, PDF or audio file whose kind is in `media_kinds` becomes
    a media document (empty text, the bytes in `media`); any other binary file is quarantined as
    `binary_file` with the type that was recognised, so the user sees what to enable.
    """
    uri = ctx.uri(file.path)
    # +1 so that "exactly at the limit" and "over the limit" can be told apart without reading more
    data = stream.read(ctx.max_document_bytes + 1)
    if len(data) > ctx.max_document_bytes:
        ctx.quarantine.add(uri, Q.DOCUMENT_TOO_LARGE, f"file larger than {ctx.max_document_bytes} bytes", data)
        return
    if not data.strip():
        ctx.quarantine.add(uri, Q.EMPTY_FILE, f"{len(data)} bytes, no text")
        return
    rel = _relative(file.path, source_root)
    mime = sniff_mime(data)
    kind = media_kind(mime)
    if kind is not None and kind in media_kinds:
        meta = orjson.dumps({"path": rel, "bytes": len(data), "mime": mime}).decode()
        yield Record("", uri, meta, ctx.mtime(file.mtime_s), modality_of(kind).value,
                     (media_item(kind, mime, uri, data),))
        return
    if looks_binary(data) or kind is not None:
        what = f"{mime} ({kind}): not among this source's media kinds" if kind else \
            f"{mime or 'unrecognised type'}: NUL bytes in the first 8 KiB"
        ctx.quarantine.add(uri, Q.BINARY_FILE, what, data[:64])
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
    meta = orjson.dumps({"path": rel, "bytes": len(data)}).decode()
    yield Record(text, uri, meta, ctx.mtime(file.mtime_s), _modality(file.path, data[:SNIFF_BYTES]))


def _relative(path: str, source_root: str) -> str:
    return path[len(source_root) + 1 :] if path.startswith(source_root + "/") else PurePosixPath(path).name


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
