"""Parquet files: read in record batches of the needed columns only."""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
import pyarrow.parquet as pq

from platform_assets.contracts import DEFAULT_IO
from platform_assets.ingest.readers.fields import Rejected, extract_text, meta_json
from platform_assets.ingest.records import ReadContext, Record
from platform_assets.schema import QuarantineReason as Q
from platform_assets.storage import FileEntry

BATCH_ROWS = DEFAULT_IO.batch_rows  # rows per read of a source file; the writer re-batches by io:


def read_parquet(ctx: ReadContext, file: FileEntry, text_field: str, meta_fields: list[str] | None) -> Iterator[Record]:
    base = ctx.uri(file.path)
    mtime = ctx.mtime(file.mtime_s)
    try:
        pf = pq.ParquetFile(ctx.fs.open_input_file(file.path))
    except (pa.ArrowException, OSError) as err:
        ctx.quarantine.add(base, Q.UNREADABLE_FILE, f"not a readable Parquet file: {err}")
        return
    schema = pf.schema_arrow
    n_rows = pf.metadata.num_rows
    if text_field not in schema.names:
        ctx.quarantine.add(
            base, Q.MISSING_TEXT_FIELD, f"no column {text_field!r} ({n_rows} rows); columns: {schema.names[:20]}"
        )
        return
    text_type = schema.field(text_field).type
    is_binary = pa.types.is_binary(text_type) or pa.types.is_large_binary(text_type)
    if not (is_binary or pa.types.is_string(text_type) or pa.types.is_large_string(text_type)):
        ctx.quarantine.add(base, Q.TEXT_NOT_STRING, f"column {text_field!r} is {text_type} ({n_rows} rows)")
        return
    wanted = schema.names if meta_fields is None else [text_field, *[m for m in meta_fields if m in schema.names]]
    for first_row, batch in row_group_batches(ctx, base, pf, BATCH_ROWS, wanted):
        yield from _batch_records(ctx, batch, base, first_row, text_field, meta_fields, is_binary, mtime)


def row_group_batches(ctx: ReadContext, base: str, pf: pq.ParquetFile, batch_rows: int,
                      columns: list[str] | None = None) -> Iterator[tuple[int, pa.RecordBatch]]:
    """(first row, batch) of every readable row group, a group at a time: a damaged row group costs its
    unread rows (one `unreadable_file` row names them) and the groups after it are read. A row-oriented
    format decides per record; the row group is the smallest unit Parquet decodes on its own."""
    row = 0
    for group in range(pf.num_row_groups):
        group_rows = pf.metadata.row_group(group).num_rows
        read = 0
        try:
            for batch in pf.iter_batches(batch_size=batch_rows, columns=columns, row_groups=[group]):
                yield row + read, batch
                read += batch.num_rows
        except (pa.ArrowException, OSError) as err:
            ctx.quarantine.add(f"{base}#row={row + read}", Q.UNREADABLE_FILE,
                               f"row group {group} (rows {row}-{row + group_rows - 1}): rows from {row + read} "
                               f"unreadable: {type(err).__name__}: {err}")
        row += group_rows


def _batch_records(ctx: ReadContext, batch: pa.RecordBatch, base: str, first_row: int, text_field: str,
                   meta_fields: list[str] | None, is_binary: bool, mtime: int | None) -> Iterator[Record]:
    try:
        texts = batch.column(text_field).to_pylist()
        others = batch.drop_columns([text_field]).to_pylist() if batch.num_columns > 1 else None
    except UnicodeDecodeError:
        # a string column holding invalid UTF-8 (Arrow checks on conversion, not on read): row by row
        yield from _rows_one_by_one(ctx, batch, base, first_row, text_field, meta_fields, is_binary, mtime)
        return
    for i, text in enumerate(texts):
        uri = f"{base}#row={first_row + i}"
        if is_binary and text is not None:
            try:
                text = text.decode(ctx.encoding)
            except UnicodeDecodeError as err:
                ctx.quarantine.add(uri, Q.INVALID_UTF8, f"not valid {ctx.encoding}: {err.reason}", text)
                continue
        record = {text_field: text}
        if others is not None:
            record.update(others[i])
        try:
            yield Record(extract_text(record, text_field), uri, meta_json(record, text_field, meta_fields), mtime)
        except Rejected as rej:
            ctx.quarantine.add(uri, rej.reason, rej.detail)


def _rows_one_by_one(ctx: ReadContext, batch: pa.RecordBatch, base: str, first_row: int, text_field: str,
                     meta_fields: list[str] | None, is_binary: bool, mtime: int | None) -> Iterator[Record]:
    for i in range(batch.num_rows):
        row = batch.slice(i, 1)
        try:
            row.to_pylist()
        except UnicodeDecodeError as err:
            ctx.quarantine.add(f"{base}#row={first_row + i}", Q.INVALID_UTF8, f"a string column: {err.reason}")
            continue
        yield from _batch_records(ctx, row, base, first_row + i, text_field, meta_fields, is_binary, mtime)
