"""JSON Lines: one object per line; every bad line is quarantined, the rest of the file survives.

Two paths, same output. Blocks of ~16 MiB of whole lines go to pyarrow's C++ JSON parser (the text
never becomes a Python str; ~4x faster than orjson per line here). Any irregularity in a block
(a malformed line, invalid UTF-8, a missing/non-string/blank text, blank lines) sends that block to
the per-line path, which finds the bad lines and quarantines each with its reason.
"""

from __future__ import annotations

import mmap
from collections.abc import Iterator
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pajson

from platform_assets.ingest.chat import ChatFields, chat_record
from platform_assets.ingest.file_io import MappedLineBlocks, block_lines, iter_line_blocks
from platform_assets.ingest.readers.fields import Rejected, extract_text, meta_json
from platform_assets.ingest.readers.meta_columns import meta_json_column
from platform_assets.ingest.records import ReadContext, Record, RecordBlock
from platform_assets.schema import QuarantineReason as Q
from platform_assets.schema import single_array
from platform_assets.storage import FileEntry


def _has_temporal(t: pa.DataType) -> bool:
    if pa.types.is_timestamp(t) or pa.types.is_date(t) or pa.types.is_time(t):
        return True
    return any(_has_temporal(t.field(i).type) for i in range(t.num_fields)) if t.num_fields else False


PARSE_BLOCK_BYTES = 2 * 2**20


class ArrowJsonBlockParser:
    """Parses a block with Arrow, or says it can't (None) so the caller takes the per-line path."""

    def __init__(self, text_field: str, meta_fields: list[str] | None, threads: bool = True):
        self.text_field = text_field
        self.meta_fields = meta_fields
        self.threads = threads
        # Arrow infers timestamp[s] from ISO-date-looking strings ("2020-01-01"), which would turn
        # them into datetimes in `meta`; such fields are pinned to string once seen.
        self.pinned: dict[str, pa.DataType] = {text_field: pa.large_string()}

    def parse(self, block: bytes, n_lines: int) -> pa.Table | None:
        for _attempt in range(2):
            table = self._read(block)
            if table is None:
                return None
            try:
                table.column_names  # noqa: B018 - Arrow lets invalid UTF-8 through in keys too; decoding them here
            except UnicodeDecodeError:  # the per-line path quarantines such a line as invalid_utf8
                return None
            temporal = [f.name for f in table.schema if f.name != self.text_field and _has_temporal(f.type)]
            if not temporal:
                break
            if any(pa.types.is_struct(table.schema.field(n).type) or pa.types.is_list(table.schema.field(n).type)
                   for n in temporal):
                return None  # a date nested in an object: keep exact text via the per-line path
            self.pinned.update({n: pa.string() for n in temporal})
        else:
            return None
        if table.num_rows != n_lines:  # blank lines are skipped by Arrow: line numbers would shift
            return None
        text = table.column(self.text_field)
        if text.null_count or not pa.types.is_large_string(text.type):
            return None
        try:
            table.validate(full=True)  # Arrow's JSON parser lets invalid UTF-8 through
        except pa.ArrowInvalid:
            return None
        text = single_array(text)  # one chunk already when parsed without threads
        if _any_blank(text):
            return None
        return table.set_column(table.schema.get_field_index(self.text_field), self.text_field, text)

    def _read(self, block: bytes) -> pa.Table | None:
        # With threads, Arrow parses 2 MiB pieces of the block in parallel: one file alone keeps
        # the cores busy (0.22 s wall per 100 MB here instead of 0.30), but it costs 0.42 CPU-s
        # instead of 0.30 and the text comes back in pieces to concatenate (another copy).
        # Without, the block is parsed whole into one chunk: the choice when other files are read
        # at the same time.
        # A line longer than a piece straddles pieces; then parse it as one.
        sizes = (PARSE_BLOCK_BYTES, len(block) + 1) if self.threads else (len(block) + 1,)
        for chunk_size in sizes:
            try:
                return pajson.read_json(
                    pa.BufferReader(block),
                    read_options=pajson.ReadOptions(use_threads=self.threads, block_size=chunk_size),
                    parse_options=pajson.ParseOptions(
                        explicit_schema=pa.schema(list(self.pinned.items())), unexpected_field_behavior="infer"
                    ),
                )
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as err:
                if "straddl" not in str(err) or chunk_size > len(block):
                    return None
        return None

    def metas(self, table: pa.Table) -> pa.Array | list[str | None]:
        others = table.drop_columns([self.text_field])
        if self.meta_fields is not None:
            others = others.select([m for m in self.meta_fields if m in others.column_names])
        if others.num_columns == 0:
            return [None] * table.num_rows
        columnar = meta_json_column(others)
        if columnar is not None:
            return columnar
        return [meta_json(row, None, None) for row in others.to_pylist()]


def _any_blank(text: pa.Array) -> bool:
    """Is any value empty or whitespace-only? Only values starting with whitespace are scanned in
    full, so this costs O(rows), not O(bytes)."""
    if pc.any(pc.equal(pc.binary_length(text), 0)).as_py():
        return True
    suspects = text.filter(pc.utf8_is_space(pc.utf8_slice_codeunits(text, 0, 1)))
    return len(suspects) > 0 and bool(pc.any(pc.utf8_is_space(suspects)).as_py())


def read_jsonl(
    ctx: ReadContext, file: FileEntry, stream, text_field: str, meta_fields: list[str] | None, fast: bool = True,
    chat: ChatFields | None = None,
) -> Iterator[Record | RecordBlock]:
    """`stream`: a pyarrow input stream, or an mmap of a local uncompressed file (zero-copy blocks).
    With `chat`, every line is a conversation (per-line path: instruction data is small)."""
    base = ctx.uri(file.path)
    mtime = ctx.mtime(file.mtime_s)
    fast = fast and chat is None and _is_utf8(ctx.encoding)
    parser = ArrowJsonBlockParser(text_field, meta_fields, ctx.parse_threads) if fast else None
    mapped = MappedLineBlocks(stream, ctx.max_document_bytes) if isinstance(stream, mmap.mmap) else None
    blocks = mapped if mapped is not None else iter_line_blocks(stream, ctx.max_document_bytes)
    for first, block, n_lines in blocks:
        if block is None:
            length = n_lines
            ctx.quarantine.add(f"{base}#line={first}", Q.DOCUMENT_TOO_LARGE,
                               f"line of {length} bytes > {ctx.max_document_bytes}")
            continue
        table = parser.parse(block, n_lines) if parser is not None else None
        lines = block_lines(bytes(block)) if table is None else None
        if mapped is not None:  # the block's bytes are copied out: its pages go before its documents are written
            mapped.release_read()
        if table is not None:
            yield RecordBlock(
                texts=table.column(text_field).chunk(0),
                uris=[f"{base}#line={first + i}" for i in range(table.num_rows)],
                metas=parser.metas(table),
                mtime_s=mtime,
            )
            continue
        for i, line in enumerate(lines):
            rec = _parse_line(ctx, line, f"{base}#line={first + i}", text_field, meta_fields, mtime, chat)
            if rec is not None:
                yield rec


def _is_utf8(encoding: str) -> bool:
    return encoding.lower().replace("-", "").replace("_", "") == "utf8"


def parse_json_object(ctx: ReadContext, line: bytes, uri: str) -> dict[str, Any] | None:
    """The line's JSON object, or None after quarantining the line with its reason (invalid UTF-8 or
    encoding, malformed JSON, not an object); shared with streaming subsets (ingest/subset.py)."""
    utf8 = _is_utf8(ctx.encoding)
    try:
        # orjson validates UTF-8 itself; a legacy encoding is decoded to str first
        obj = orjson.loads(line) if utf8 else orjson.loads(line.decode(ctx.encoding))
    except UnicodeDecodeError as err:
        ctx.quarantine.add(uri, Q.INVALID_UTF8, f"not valid {ctx.encoding}: {err.reason}", line)
        return None
    except orjson.JSONDecodeError as err:
        reason = Q.MALFORMED_JSON
        if utf8:
            try:
                line.decode("utf-8")
            except UnicodeDecodeError:
                reason = Q.INVALID_UTF8
        ctx.quarantine.add(uri, reason, str(err), line)
        return None
    if not isinstance(obj, dict):
        ctx.quarantine.add(uri, Q.NOT_A_JSON_OBJECT, f"a JSON {type(obj).__name__}, not an object", line)
        return None
    return obj


def _parse_line(
    ctx: ReadContext, line: bytes, uri: str, text_field: str, meta_fields: list[str] | None, mtime: int | None,
    chat: ChatFields | None = None,
) -> Record | None:
    if not line or line.isspace():
        return None
    obj = parse_json_object(ctx, line, uri)
    if obj is None:
        return None
    try:
        if chat is not None:
            text, meta = chat_record(obj, chat, meta_fields)
            return Record(text, uri, meta_json(meta, None, None), mtime)
        return Record(extract_text(obj, text_field), uri, meta_json(obj, text_field, meta_fields), mtime)
    except Rejected as rej:
        ctx.quarantine.add(uri, rej.reason, rej.detail, line)
        return None
