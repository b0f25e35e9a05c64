"""Reading and writing an output directory of Parquet parts, shared by every stage.

Writing: batches go to `part-NNNNN.parquet` files, a new part every `part_max_bytes` of Arrow data
or `part_max_rows` rows;
each batch is one row group. Encoding and compression run in a writer thread (pyarrow releases the
GIL there) while the caller prepares the next batch; at most one batch is in flight, so memory is
about two batches. Reading: the parts of a directory in name order, as record batches of the
requested columns, so a stage's memory is bounded by its batch size, not by the corpus.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial

import pyarrow as pa
import pyarrow.parquet as pq

from platform_assets.contracts import DEFAULT_IO, PART_GLOB, PART_PREFIX, IOSettings, schema_tag
from platform_assets.output_lock import BasedOn
from platform_assets.progress import tracked_batches
from platform_assets.schema import UPGRADABLE_TAGS, check_documents_version, upgrade_documents
from platform_assets.storage import StagedDir, Storage

DICTIONARY_COLUMNS = ("source", "modality", "license", "split", "lang", "rule")  # few distinct values
# Min/max statistics of whole documents are useless for pruning and cost as much as the compression
# itself (zstd write of 198 MB of text: 1.28 s with them, 0.65 s without).
NO_STATISTICS_COLUMNS = ("text",)
# Values the Parquet writer encodes between its checks of the page size (`data_page_size`, 1 MiB): a
# page closes at the first check past it, so with Arrow's default of 1,024 a text page held 1,024
# documents, ~38 MB of code files, and writing a 58 MB text column took +121 MiB of RSS (its page
# buffers doubling; reading it back +178 MiB under Arrow's jemalloc). With 64: +10 MiB (+98 to read
# back), the same write CPU (0.48-0.51 s for 160 MB of documents, 0.31 s for 25 M tokens);
# dataset_splits' write pass on the whole corpus at 2x fell 563 -> 456 MiB in-process (1.25x -> 1.06x
# of 1x), where two such row groups met. Columns under 1 MiB per row group (the sample's) keep their
# bytes: their one page closes at the end of the row group either way.
PAGE_WRITE_BATCH = 64


def part_name(index: int, prefix: str = PART_PREFIX) -> str:
    return f"{prefix}-{index:05d}.parquet"


def parquet_writer(sink, schema: pa.Schema, compression: str) -> pq.ParquetWriter:
    return pq.ParquetWriter(
        sink,
        schema,
        compression=None if compression == "none" else compression,
        use_dictionary=[c for c in DICTIONARY_COLUMNS if c in schema.names],
        write_statistics=[c for c in schema.names if c not in NO_STATISTICS_COLUMNS],
        write_batch_size=PAGE_WRITE_BATCH,
    )


# Rows per row group of a side table: the writer holds a row group's encoded pages until it ends, so a
# whole table in one row group cost its own size again (the accepted-signature artifact, written this
# way before: 530 B a document, ~170 MB at 16x of the pipeline_scaling corpus; exclusions and duplicates
# tables grow with the corpus too). Tables up to this keep one row group.
SIDE_ROW_GROUP_ROWS = 65_536


def write_table(staged: StagedDir, name: str, table: pa.Table, compression: str = "zstd",
                row_group_rows: int = SIDE_ROW_GROUP_ROWS) -> None:
    """A single-file table (quarantine, exclusions, duplicates, signatures) inside a staged output,
    in row groups of at most `row_group_rows` rows."""
    with staged.open_output(name) as sink:
        writer = parquet_writer(sink, table.schema, compression)
        writer.write_table(table, row_group_size=row_group_rows)
        writer.close()


def write_row_groups(staged: StagedDir, name: str, schema: pa.Schema, tables: Iterable[pa.Table],
                     compression: str = "zstd") -> None:
    """A single-file table written as it is produced: each of `tables` is a row group, encoded before
    the next is asked for."""
    with staged.open_output(name) as sink:
        writer = parquet_writer(sink, schema, compression)
        for table in tables:
            writer.write_table(table, row_group_size=max(table.num_rows, 1))
        writer.close()


class PartWriter:
    def __init__(self, staged: StagedDir, schema: pa.Schema, compression: str = "zstd",
                 part_max_bytes: int = 512 * 2**20, prefix: str = "part", part_max_rows: int | None = None,
                 write_behind: bool = True):
        self.schema = schema
        self._prefix = prefix
        self.parts: list[str] = []
        self.rows = 0
        self._staged = staged
        self._compression = compression
        self._part_max_bytes = part_max_bytes
        self._part_bytes = 0
        self._part_max_rows = part_max_rows
        self._part_rows = 0
        self._writer: pq.ParquetWriter | None = None
        self._sink = None
        # write_behind: a batch is encoded in this writer's thread while the caller prepares the next
        # (two batches in memory); without, `write` encodes it before returning (one batch)
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="parquet-writer") if write_behind else None
        self._pending: Future[None] | None = None

    @classmethod
    def with_io(cls, staged: StagedDir, schema: pa.Schema, io: IOSettings, prefix: str = PART_PREFIX,
                write_behind: bool = True) -> PartWriter:
        """A writer with the `io:` section's compression and part bounds."""
        return cls(staged, schema, io.compression, io.part_max_bytes, prefix, io.part_max_rows, write_behind)

    def write(self, batch: pa.RecordBatch | pa.Table, as_chunks: bool = False) -> None:
        """One row group of `batch`. as_chunks: a table's chunks are written as they are (pages end
        where chunks do), not first combined into one copy of the table (dedup's kept rows: slices of
        the batch its caller still holds)."""
        if batch.num_rows == 0:
            return
        if isinstance(batch, pa.Table) and not (as_chunks and any(c.num_chunks > 1 for c in batch.columns)):
            batch = batch.combine_chunks().to_batches()[0]
        if not batch.schema.equals(self.schema):
            batch = batch.select(self.schema.names).cast(self.schema)
        self.rows += batch.num_rows
        self._wait()
        rows_full = self._part_max_rows is not None and self._part_rows >= self._part_max_rows
        if self._writer is None or self._part_bytes >= self._part_max_bytes or rows_full:
            self._close_part()
            name = part_name(len(self.parts), self._prefix)
            self.parts.append(name)
            self._sink = self._staged.open_output(name)
            self._writer = parquet_writer(self._sink, self.schema, self._compression)
            self._part_bytes = self._part_rows = 0
        self._part_bytes += batch.nbytes
        self._part_rows += batch.num_rows
        write = self._writer.write_batch if isinstance(batch, pa.RecordBatch) else \
            partial(self._writer.write_table, row_group_size=batch.num_rows)  # one row group per write
        if self._pool is None:
            write(batch)
        else:
            self._pending = self._pool.submit(write, batch)

    def wait(self) -> None:
        """Until the write in flight (write-behind) is done; its error is raised here."""
        self._wait()

    def _wait(self) -> None:
        if self._pending is not None:
            self._pending.result()  # re-raises a write error in the caller's thread
            self._pending = None

    def _close_part(self) -> None:
        self._wait()
        if self._writer is not None:
            self._writer.close()
            self._sink.close()
            self._writer = self._sink = None
            self._staged.hash_file(self.parts[-1])

    def close(self) -> list[str]:
        try:
            self._close_part()
        finally:
            if self._pool is not None:
                self._pool.shutdown(wait=True)
        return self.parts

    def abort(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)

    def __enter__(self) -> PartWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        """Close (finish the last part) on success; on an error drop the pending write and let the
        enclosing staged directory discard the files."""
        if exc_type is None:
            self.close()
        else:
            self.abort()


def part_files(storage: Storage, rel_dir: str) -> list[str]:
    return [e.path for e in storage.list_files(rel_dir, PART_GLOB)]


def _top_level(columns: Sequence[str]) -> list[str]:
    """Column names as a batch holds them: `media.sha256` and `media.phash` are both `media`."""
    out: list[str] = []
    for c in columns:
        name = c.split(".", 1)[0]
        if name not in out:
            out.append(name)
    return out


def _parquet_paths(columns: Sequence[str]) -> list[str]:
    """Parquet column paths: `media.sha256` (one field of the media items) -> `media.list.element.sha256`,
    so a stage that needs the items' hashes never reads their bytes (8k images of 100 KB are 800 MB)."""
    return [f"{c.split('.', 1)[0]}.list.element.{c.split('.', 1)[1]}" if "." in c else c for c in columns]


# Local reads without pre-buffering go through a buffered stream of this size instead of reading a
# column chunk whole: a 61 MB row group of text (17-24 MB compressed) peaked +100-132 MB over the
# process while read, +80-117 MB with the 1 MiB stream (pipeline_scaling's 1x and 16x dedup outputs)
READ_BUFFER_BYTES = 2**20


def _part_files_read(storage: Storage, rel_dir: str, columns: Sequence[str] | None, pre_buffer: bool
                     ) -> Iterator[tuple[pq.ParquetFile, list[str] | None, list[str] | None, str]]:
    """(file, Parquet columns to read, top-level columns to select after the upgrade or None, path) of
    each part; `top` is None where the part needs no upgrade (then its batches are read as they are)."""
    for path in part_files(storage, rel_dir):
        with storage.fs.open_input_file(path) as f:
            pf = pq.ParquetFile(f, pre_buffer=pre_buffer, buffer_size=0 if pre_buffer else READ_BUFFER_BYTES)
            if schema_tag(pf.schema_arrow) not in UPGRADABLE_TAGS:
                check_documents_version(pf.schema_arrow, path)
                yield pf, (_parquet_paths(columns) if columns else None), None, path
                continue
            top = _top_level(columns) if columns else None
            # v1 files have no `media` column to read (the upgrade adds it); v2 files upgrade theirs
            has_media = "media" in pf.schema_arrow.names
            wanted = [c for c in top if has_media or c != "media"] if top else None
            yield pf, wanted, top or [], path


def _as_read(batch: pa.RecordBatch, top: list[str] | None, path: str) -> pa.RecordBatch:
    if top is None:
        return batch
    batch = upgrade_documents(batch, path)
    return batch.select(top) if top else batch


def read_batches(
    storage: Storage, rel_dir: str, columns: Sequence[str] | None = None, batch_rows: int = DEFAULT_IO.batch_rows,
    pre_buffer: bool = True, batch_bytes: int | None = None,
) -> Iterator[pa.RecordBatch]:
    """Record batches of an output directory's parts, in part order. Documents written with schema v1
    and v2 read as v3 (`schema.upgrade_documents`); a newer documents schema is refused with its path.
    A column may name fields of the media items (`media.sha256`, `media.phash`): the batch then has a
    `media` column whose items hold only those fields (older schemas: every field, upgraded).
    `pre_buffer=False` reads one row group at a time instead of fetching the selected column chunks of
    the whole part first: on a 237 MB part of images, 79 MiB of Arrow memory instead of 280 MiB.
    `batch_bytes`: batches are whole row groups, consecutive ones joined up to `batch_rows` rows and
    `batch_bytes` of the selected columns (`row_group_batches`); without it, `batch_rows` rows each."""
    for pf, wanted, top, path in _part_files_read(storage, rel_dir, columns, pre_buffer):
        for batch in _part_batches(pf, wanted, batch_rows, batch_bytes):
            yield _as_read(batch, top, path)
            del batch  # not held while the next is read (tracked_batches)


def read_tables(
    storage: Storage, rel_dir: str, columns: Sequence[str] | None, batch_rows: int, batch_bytes: int,
    pieces: int, pre_buffer: bool = True,
) -> Iterator[pa.Table]:
    """The batches of `read_batches(..., batch_bytes=batch_bytes)`, the same rows each, every one read as
    `pieces` record batches (one more where a piece is cut at a batch's end) and yielded as a table of
    them (its chunks). Read whole, a 61 MB row group of text peaked +80-117 MB above the process with
    the 1 MiB stream, up to twice its own size; in four pieces +68-74 MB (pipeline_scaling's 1x and 16x
    dedup outputs). For a stage that writes each batch back as one row group of the same rows (its
    pages end where the chunks do: PartWriter.write(as_chunks=True))."""
    for pf, wanted, top, path in _part_files_read(storage, rel_dir, columns, pre_buffer):
        for row_groups, rows in row_group_batches(pf.metadata, wanted, batch_rows, batch_bytes):
            # a row group over the bounds alone is read as several batches of `rows`: a piece may then
            # straddle two of them, and is cut there (slices, no copy)
            run: list[pa.RecordBatch] = []
            run_rows = 0
            for piece in pf.iter_batches(batch_size=max(1, -(-rows // pieces)), row_groups=row_groups,
                                         columns=wanted):
                piece = _as_read(piece, top, path)
                while run_rows + piece.num_rows >= rows:
                    run.append(piece.slice(0, rows - run_rows))
                    piece = piece.slice(rows - run_rows)
                    yield pa.Table.from_batches(run)
                    run, run_rows = [], 0
                if piece.num_rows:
                    run.append(piece)
                    run_rows += piece.num_rows
                del piece
            if run:
                yield pa.Table.from_batches(run)
            del run


def _part_batches(pf: pq.ParquetFile, wanted: list[str] | None, batch_rows: int,
                  batch_bytes: int | None) -> Iterator[pa.RecordBatch]:
    if batch_bytes is None:
        yield from pf.iter_batches(batch_size=batch_rows, columns=wanted)
        return
    for row_groups, rows in row_group_batches(pf.metadata, wanted, batch_rows, batch_bytes):
        yield from pf.iter_batches(batch_size=rows, row_groups=row_groups, columns=wanted)


def row_group_batches(meta: pq.FileMetaData, columns: Sequence[str] | None, batch_rows: int,
                      batch_bytes: int) -> list[tuple[list[int], int]]:
    """How to read a part in batches bounded by bytes: runs of consecutive row groups, each read as
    one batch of its rows, joined while the run stays within `batch_rows` rows and `batch_bytes` of
    the selected columns (uncompressed, from the footer). A row group over either bound alone is read
    in batches of `batch_bytes` at its own average row size. Every stage writes a row group per batch
    and ingest cuts its batches at `io.batch_bytes`, so the bound holds down the graph, whatever the
    document sizes: before, a part's rows per batch came from its average row, and a run of long
    documents in a part of short ones made a batch of many times `batch_bytes` (the largest batch, so
    the peak, grew with the input). Returns (row group indices, rows per batch) for each run."""
    tops = {c.split(".")[0] for c in columns} if columns is not None else None
    runs: list[tuple[list[int], int]] = []
    run: list[int] = []
    run_rows = run_bytes = 0

    def close() -> None:
        if run:
            rows = run_rows if run_bytes <= batch_bytes else int(batch_bytes * run_rows // run_bytes)
            runs.append((list(run), max(1, min(batch_rows, rows))))

    for i in range(meta.num_row_groups):
        group = meta.row_group(i)
        if group.num_rows == 0:
            continue
        size = sum(chunk.total_uncompressed_size for chunk in (group.column(j) for j in range(group.num_columns))
                   if tops is None or chunk.path_in_schema.split(".")[0] in tops)
        if run and (run_rows + group.num_rows > batch_rows or run_bytes + size > batch_bytes):
            close()
            run, run_rows, run_bytes = [], 0, 0
        run.append(i)
        run_rows += group.num_rows
        run_bytes += size
    close()
    return runs


def output_rows(storage: Storage, rel_dir: str) -> int:
    """Rows of an output's parts, from their footers."""
    rows = 0
    for path in part_files(storage, rel_dir):
        with storage.fs.open_input_file(path) as f:
            rows += pq.ParquetFile(f).metadata.num_rows
    return rows


def output_schema(storage: Storage, rel_dir: str) -> pa.Schema | None:
    """The schema of an output's parts (an older documents schema as its upgrade)."""
    files = part_files(storage, rel_dir)
    if not files:
        return None
    with storage.fs.open_input_file(files[0]) as f:
        schema = pq.read_schema(f)
    if schema_tag(schema) in UPGRADABLE_TAGS:
        return upgrade_documents(pa.RecordBatch.from_pylist([], schema=schema), files[0]).schema
    return schema


class TableSource:
    """A committed document-level output read by a later stage: its schema, its parts as record
    batches bounded by `io.batch_rows` and `io.batch_bytes` (v1 documents upgraded on read), and its
    side tables by name."""

    def __init__(self, storage: Storage, rel: str, io: IOSettings | None = None):
        self.storage, self.rel = storage, rel
        self.io = io or IOSettings()
        self._schema: pa.Schema | None = None

    @property
    def schema(self) -> pa.Schema | None:
        """None when the output has no parts (a source with no documents, or nothing committed)."""
        if self._schema is None:
            self._schema = output_schema(self.storage, self.rel)
        return self._schema

    def batches(self, columns: Sequence[str] | None = None) -> Iterator[pa.RecordBatch]:
        """Batches of at most `io.batch_rows` rows and ~`io.batch_bytes` of the selected columns (whole
        row groups; `row_group_batches`)."""
        # Locally a row group at a time: pre-buffering fetches the selected column chunks of the whole
        # part first (dataset_splits on the real corpus: peak RSS 958 -> 736 MB without it). On S3 the
        # coalesced reads save a round trip per column chunk, worth the part-sized buffer.
        return read_batches(self.storage, self.rel, columns, self.io.batch_rows, pre_buffer=not self.storage.is_local,
                            batch_bytes=self.io.batch_bytes)

    @property
    def num_rows(self) -> int:
        """Rows of every part, from the Parquet footers (no column data is read): a progress total."""
        return output_rows(self.storage, self.rel)

    def tracked_batches(self, phase: str, columns: Sequence[str] | None = None) -> Iterator[pa.RecordBatch]:
        """`batches`, reported as progress of `phase` (rows of the whole output as the total)."""
        return tracked_batches(self.batches(columns), phase, self.num_rows)

    def tables(self, columns: Sequence[str] | None = None, pieces: int = 4) -> Iterator[pa.Table]:
        """The batches of `batches`, each read in `pieces` record batches: a table of them (read_tables)."""
        return read_tables(self.storage, self.rel, columns, self.io.batch_rows, self.io.batch_bytes, pieces,
                           pre_buffer=not self.storage.is_local)

    def table(self, columns: Sequence[str]) -> pa.Table | None:
        """A few columns of every row at once (ids, split keys): for columns small per row only."""
        batches = list(self.batches(columns))
        return pa.Table.from_batches(batches) if batches else None

    def side_table(self, name: str) -> pa.Table | None:
        """A side file of the output (`_exclusions.parquet`, ...), or None when it is not there."""
        rel = f"{self.rel}/{name}"
        if not self.storage.exists(rel):
            return None
        with self.storage.fs.open_input_file(self.storage.path(rel)) as f:
            return pq.read_table(f)


class TableSink:
    """A document-level output being written: data parts with the `io:` section's bounds, side tables
    by name, committed atomically (with its manifest) when the `with` block exits cleanly; on an error
    nothing is committed and the previous output stays as it was.

        with TableSink(storage, rel, schema, io) as sink:
            for batch in ...:
                sink.write(batch)
            sink.write_side(EXCLUSIONS_FILE, exclusions)
        sink.files, sink.rows   # the committed manifest and the rows written
    """

    def __init__(self, storage: Storage, rel: str, schema: pa.Schema, io: IOSettings | None = None,
                 based_on: BasedOn | None = None, write_behind: bool = True):
        """based_on: the output's version the caller read (Storage.staged_dir refuses to commit over another);
        write_behind: the main parts' writer's (PartWriter)."""
        self.storage, self.rel, self.schema = storage, rel, schema
        self.based_on = based_on
        self._write_behind = write_behind
        self.io = io or IOSettings()
        self.files: dict[str, dict[str, object]] = {}
        self._writers: list[PartWriter] = []

    def __enter__(self) -> TableSink:
        self._staging = self.storage.staged_dir(self.rel, self.based_on)
        self.staged = self._staging.__enter__()
        self._main = self.part_writer(self.schema, write_behind=self._write_behind)
        return self

    def part_writer(self, schema: pa.Schema, prefix: str = PART_PREFIX, write_behind: bool = True) -> PartWriter:
        """Another stream of parts in the same output (e.g. one per (split, source)), closed with it;
        `write_behind`: see PartWriter."""
        writer = PartWriter.with_io(self.staged, schema, self.io, prefix, write_behind)
        self._writers.append(writer)
        return writer

    def write(self, batch: pa.RecordBatch | pa.Table, as_chunks: bool = False) -> None:
        self._main.write(batch, as_chunks)

    def write_side(self, name: str, table: pa.Table, row_group_rows: int = SIDE_ROW_GROUP_ROWS) -> None:
        write_table(self.staged, name, table, self.io.compression, row_group_rows)

    def write_side_row_groups(self, name: str, schema: pa.Schema, tables: Iterable[pa.Table]) -> None:
        """A side table produced a row group at a time (write_row_groups)."""
        write_row_groups(self.staged, name, schema, tables, self.io.compression)

    @property
    def rows(self) -> int:
        return sum(w.rows for w in self._writers)

    def __exit__(self, exc_type, exc, tb) -> bool | None:
        try:
            for writer in self._writers:
                if exc_type is None:
                    writer.close()
                else:
                    writer.abort()
        except BaseException as err:  # a failed close fails the commit too
            self._staging.__exit__(type(err), err, err.__traceback__)
            raise
        result = self._staging.__exit__(exc_type, exc, tb)
        if exc_type is None:
            self.files = self.staged.manifest
        return result
