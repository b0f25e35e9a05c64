"""CSV/TSV with a header row. Ragged rows and unparsable records are quarantined one by one."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator

from platform_assets.ingest.file_io import READ_CHUNK, RawStreamIO
from platform_assets.ingest.readers.fields import Rejected, extract_text, meta_json
from platform_assets.ingest.records import ReadContext, Record
from platform_assets.schema import QuarantineReason as Q
from platform_assets.storage import FileEntry


def _has_undecodable(value: str) -> bool:
    # errors="surrogateescape" maps each undecodable byte to a lone surrogate U+DC80..U+DCFF
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def read_csv(
    ctx: ReadContext,
    file: FileEntry,
    stream,
    text_field: str,
    meta_fields: list[str] | None,
    delimiter: str,
) -> Iterator[Record]:
    base = ctx.uri(file.path)
    mtime = ctx.mtime(file.mtime_s)
    # csv's per-field cap is process-global; raise it to our own per-document bound (default 128 KiB
    # would reject ordinary long documents)
    csv.field_size_limit(max(csv.field_size_limit(), ctx.max_document_bytes))
    text_io = io.TextIOWrapper(
        io.BufferedReader(RawStreamIO(stream), READ_CHUNK), encoding=ctx.encoding, errors="surrogateescape", newline=""
    )
    reader = csv.reader(text_io, delimiter=delimiter, strict=True)
    try:
        header = next(reader)
    except StopIteration:
        if getattr(stream, "broken", None) is None:  # else a damaged compressed start: one row says so
            ctx.quarantine.add(base, Q.EMPTY_FILE, "no header row")
        return
    except csv.Error as err:
        ctx.quarantine.add(base, Q.MALFORMED_CSV, f"header: {err}")
        return
    if text_field not in header:
        ctx.quarantine.add(base, Q.MISSING_TEXT_FIELD, f"no column {text_field!r} in header {header[:20]}")
        return
    width = len(header)
    while True:
        start = reader.line_num + 1
        uri = f"{base}#line={start}"
        try:
            row = next(reader)
        except StopIteration:
            break
        except csv.Error as err:
            ctx.quarantine.add(uri, Q.MALFORMED_CSV, str(err))
            continue
        if not row:
            continue  # a blank line
        if len(row) != width:
            sample = delimiter.join(row)
            ctx.quarantine.add(uri, Q.RAGGED_CSV_ROW, f"{len(row)} fields, header has {width}", sample)
            continue
        record = dict(zip(header, row, strict=True))
        text_chars = len(record[text_field])
        # the same bound as a JSONL line (csv's own field limit is process-wide and only ever raised);
        # a character is 1-4 UTF-8 bytes, so most rows are decided without encoding them
        if text_chars * 4 > ctx.max_document_bytes and (
                text_chars > ctx.max_document_bytes
                or len(record[text_field].encode("utf-8", "surrogateescape")) > ctx.max_document_bytes):
            ctx.quarantine.add(uri, Q.DOCUMENT_TOO_LARGE, f"text of {text_chars} characters > "
                               f"{ctx.max_document_bytes} bytes", record[text_field][:200])
            continue
        if _has_undecodable(record[text_field]):
            sample = record[text_field].encode("utf-8", "surrogateescape")
            ctx.quarantine.add(uri, Q.INVALID_UTF8, f"text is not valid {ctx.encoding}", sample)
            continue
        if "\x00" in record[text_field]:  # binary bytes in this row's text: this row only
            ctx.quarantine.add(uri, Q.BINARY_RECORD, "NUL characters in the text field", delimiter.join(row))
            continue
        try:
            yield Record(extract_text(record, text_field), uri, meta_json(record, text_field, meta_fields), mtime)
        except Rejected as rej:
            ctx.quarantine.add(uri, rej.reason, rej.detail, delimiter.join(row))
