"""Streaming subsets: a predicate, a projection, a seeded shuffle and a budget over a streamed source.

A source with `subset:` is read as one stream of raw row batches (JSONL lines, Parquet row-group
batches, a Hugging Face `IterableDataset`), 1,024 rows at a time:

    read (projected to `columns`) -> `where` (DuckDB on the Arrow batch) -> document (bad rows are
    quarantined as in a full ingest) -> shuffle buffer -> budget (rows / bytes / tokens)

Rows the predicate rejects are counted, never stored. Reading stops with the batch that reaches the
budget: at most 1,023 rows are read past it. The document that crosses a byte or token budget is kept
(then the run stops), so `max_bytes: 100` keeps at least 100 bytes and never splits a document.

Resume: every `subset.checkpoint_rows` kept documents the current parts are closed and a checkpoint
(stream position after the last whole batch, shuffle RNG state, counts, quarantine rows; the buffer's
documents as a Parquet file) is written atomically into a resumable directory beside the output,
`.<name>.subset-<key>`, where <key> hashes the source config, the file listing and the `io:` bounds.
Parts are cut at checkpoints only, which fall after whole batches, and batches restart where the
previous ones ended, so a run resumed after a SIGKILL writes the same bytes as one that never stopped.
Storage's crash repair clears `.staging-` and `.trash-` leftovers only, so it leaves this directory;
a run with another key removes it. The finished parts are linked (local) or copied (S3) into the
staged output, committed as usual, and the resumable directory is deleted after the commit.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from platform_assets.contracts import PART_PREFIX, QUARANTINE_FILE
from platform_assets.ingest.chat import chat_record
from platform_assets.ingest.file_io import iter_lines
from platform_assets.ingest.readers import source_files, source_root
from platform_assets.ingest.readers.fields import Rejected, extract_text, meta_json
from platform_assets.ingest.readers.jsonl import parse_json_object
from platform_assets.ingest.records import QuarantineSink, ReadContext, Record
from platform_assets.ingest.salvaging_stream import open_record_stream, quarantine_broken_tail
from platform_assets.ingest.settings import HuggingFaceSource, JsonlSource, ParquetSource, SourcePlan, SubsetSettings
from platform_assets.ingest.writer import DocumentWriter
from platform_assets.parquet_parts import PartWriter, TableSink
from platform_assets.progress import track
from platform_assets.schema import DOCUMENTS_SCHEMA
from platform_assets.schema import QuarantineReason as Q
from platform_assets.storage import S3Settings, StagedDir, Storage, fault_point

BATCH_ROWS = 1024  # rows per raw batch: the predicate's unit, the resume grain, the read-ahead past a budget
BATCH_BYTES = 8 * 2**20  # ... or fewer JSONL lines once they hold this many bytes
CHECKPOINT_FILE = "checkpoint.json"
CHECKPOINT_VERSION = 1
BUFFER_SCHEMA = pa.schema([("text", pa.large_string()), ("uri", pa.string()), ("meta", pa.string()),
                           ("mtime_s", pa.int64())])
FAULT_POINT = "subset-checkpoint"
"""`PLATFORM_FAULT_KILL_AT=subset-checkpoint-<n>:<output>` SIGKILLs the run right after its n-th
checkpoint (storage.fault_point), for the resume tests."""


class SubsetError(ValueError):
    """A subset setting that does not fit the data (names the config key)."""


def supports_subset(src: Any) -> bool:
    return isinstance(src, JsonlSource | ParquetSource | HuggingFaceSource) and src.subset is not None


def _key_of(cfg: SourcePlan, name: str) -> str:
    index = next((i for i, s in enumerate(getattr(cfg, "sources", [])) if s.name == name), None)
    return f"sources[{index}] (name={name!r})" if index is not None else f"source {name!r}"


# -- the raw stream ----------------------------------------------------------------------------------
@dataclass
class RawBatch:
    """Rows read from the stream: a uri, the raw fields and a quarantine sample per row; `table` holds
    the same rows as Arrow (for the predicate) where the reader has them so."""

    uris: list[str]
    rows: list[dict[str, Any]]
    samples: list[bytes | None]
    position: dict[str, Any]  # where the stream continues after this batch
    table: pa.Table | None = None
    seen: int = 0  # rows read, including those quarantined before the predicate (malformed lines)
    mtime: int | None = None  # the file's (or the source's snapshot_time)


def _project(obj: dict[str, Any], columns: list[str] | None) -> dict[str, Any]:
    return obj if columns is None else {k: obj[k] for k in columns if k in obj}


def _jsonl_batches(ctx: ReadContext, files, columns: list[str] | None, start: dict[str, Any]) -> Iterator[RawBatch]:
    """Lines of every file from `start` ({file, line}: lines already consumed of that file)."""
    for index in range(start.get("file", 0), len(files)):
        file = files[index]
        skip = start.get("line", 0) if index == start.get("file", 0) else 0
        base = ctx.uri(file.path)
        mtime = ctx.mtime(file.mtime_s)
        batch = RawBatch([], [], [], {}, mtime=mtime)
        size = 0
        line_no = 0
        with open_record_stream(ctx.fs, file.path) as stream:
            for line_no, line, length in iter_lines(stream, ctx.max_document_bytes):
                if line_no <= skip:
                    continue  # consumed before the checkpoint: scanned for newlines, not parsed
                uri = f"{base}#line={line_no}"
                batch.seen += 1
                if line is None:
                    ctx.quarantine.add(uri, Q.DOCUMENT_TOO_LARGE, f"line of {length} bytes > {ctx.max_document_bytes}")
                elif line and not line.isspace():
                    obj = parse_json_object(ctx, line, uri)
                    if obj is not None:
                        batch.uris.append(uri)
                        batch.rows.append(_project(obj, columns))
                        batch.samples.append(line)
                    size += length
                else:
                    batch.seen -= 1  # blank lines are no rows, as in a full ingest
                if batch.seen >= BATCH_ROWS or size >= BATCH_BYTES:
                    batch.position = {"file": index, "line": line_no}
                    yield batch
                    batch, size = RawBatch([], [], [], {}, mtime=mtime), 0
            quarantine_broken_tail(ctx, file.path, stream)
        batch.position = {"file": index + 1, "line": 0}
        if batch.seen or batch.rows:
            yield batch
        else:  # an empty tail still moves the position past the file
            yield RawBatch([], [], [], {"file": index + 1, "line": 0})


def _parquet_batches(ctx: ReadContext, files, columns: list[str] | None, start: dict[str, Any]) -> Iterator[RawBatch]:
    """Batches of every file's row groups from `start` ({file, row}); whole row groups before the
    position are skipped from the footer, without reading them."""
    for index in range(start.get("file", 0), len(files)):
        file = files[index]
        skip = start.get("row", 0) if index == start.get("file", 0) else 0
        base = ctx.uri(file.path)
        try:
            pf = pq.ParquetFile(ctx.fs.open_input_file(file.path))
        except (pa.ArrowException, OSError) as err:
            ctx.quarantine.add(base, Q.UNREADABLE_FILE, f"not a readable Parquet file: {err}")
            yield RawBatch([], [], [], {"file": index + 1, "row": 0})
            continue
        names = pf.schema_arrow.names
        wanted = names if columns is None else [c for c in columns if c in names]
        row = 0
        for group in range(pf.num_row_groups):
            group_rows = pf.metadata.row_group(group).num_rows
            if row + group_rows <= skip:
                row += group_rows
                continue
            read = 0
            try:
                for batch in pf.iter_batches(batch_size=BATCH_ROWS, columns=wanted, row_groups=[group]):
                    first = row + read
                    read += batch.num_rows
                    if first + batch.num_rows <= skip:
                        continue
                    if first < skip:
                        batch = batch.slice(skip - first)
                        first = skip
                    yield _arrow_batch(ctx, pa.Table.from_batches([batch]), base, first,
                                       {"file": index, "row": first + batch.num_rows}, ctx.mtime(file.mtime_s))
            except (pa.ArrowException, OSError) as err:
                ctx.quarantine.add(f"{base}#row={row + read}", Q.UNREADABLE_FILE,
                                   f"row group {group}: rows from {row + read} unreadable: {type(err).__name__}: {err}")
            row += group_rows
        yield RawBatch([], [], [], {"file": index + 1, "row": 0})


def _arrow_batch(ctx: ReadContext, table: pa.Table, base: str, first: int, position: dict[str, Any],
                 mtime: int | None) -> RawBatch:
    seen = table.num_rows
    uris = [f"{base}#row={first + i}" for i in range(seen)]
    try:
        rows = table.to_pylist()
    except UnicodeDecodeError:  # a string column holding invalid UTF-8: find the rows, quarantine them
        keep, rows = [], []
        for i in range(table.num_rows):
            try:
                rows.append(table.slice(i, 1).to_pylist()[0])
                keep.append(i)
            except UnicodeDecodeError as err:
                ctx.quarantine.add(uris[i], Q.INVALID_UTF8, f"a string column: {err.reason}")
        table, uris = table.take(keep), [uris[i] for i in keep]
    return RawBatch(uris, rows, [None] * len(rows), position, table, seen=seen,
                    mtime=mtime)


def _hf_batches(src: HuggingFaceSource, location: str, ctx: ReadContext, start: dict[str, Any]) -> Iterator[RawBatch]:
    """The dataset streamed as Arrow tables; the position is `IterableDataset.state_dict()` (datasets
    resumes from the shard and example it names) plus the row count for the uris."""
    import datasets

    from platform_assets.ingest.readers.huggingface import load_hf_dataset

    ds = load_hf_dataset(src, location, streaming=True)
    if isinstance(ds, datasets.Dataset):  # a `save_to_disk` directory: streamed from its Arrow files
        ds = ds.to_iterable_dataset()
    if src.subset.columns is not None:
        ds = ds.select_columns([c for c in src.subset.columns if c in (ds.column_names or src.subset.columns)])
    ds = ds.with_format("arrow")
    if start.get("state") is not None:
        ds.load_state_dict(start["state"])
    row = start.get("row", 0)
    base = f"{location}[{src.split}]"
    for table in ds.iter(batch_size=BATCH_ROWS):
        position = {"row": row + table.num_rows, "state": ds.state_dict()}
        yield _arrow_batch(ctx, table, base, row, position, ctx.snapshot_s)
        row += table.num_rows


# -- predicate, documents, shuffle -------------------------------------------------------------------
class Predicate:
    """`where` on each batch through DuckDB (one thread: batches are 1,024 rows, and the row order of
    the answer must be the batch's)."""

    def __init__(self, where: str, key: str):
        import duckdb

        self._duckdb = duckdb
        self.where, self.key = where, key
        self.con = duckdb.connect(config={"threads": 1})
        self.checked = False

    def mask(self, batch: RawBatch) -> list[bool]:
        if not batch.rows:
            return []
        table = batch.table
        if table is None:
            try:
                table = pa.Table.from_pylist(batch.rows)
            except (pa.ArrowException, TypeError, ValueError, OverflowError):
                # a field with different types in different rows (1 and "1"): one row at a time
                return [self._evaluate(pa.Table.from_pylist([r]), allow_missing=True)[0] for r in batch.rows]
        return self._evaluate(table, allow_missing=self.checked)

    def _evaluate(self, table: pa.Table, allow_missing: bool) -> list[bool]:
        for _ in range(64):
            try:
                self.con.register("subset_rows", table)
                result = self.con.execute(
                    f"SELECT coalesce(CAST(({self.where}) AS BOOLEAN), false) FROM subset_rows").fetchall()
                self.checked = True
                return [bool(r[0]) for r in result]
            except self._duckdb.BinderException as err:
                missing = re.search(r'Referenced column "([^"]+)" not found', str(err))
                if not (allow_missing and missing) or missing.group(1) in table.column_names:
                    raise SubsetError(f"{self.key}.subset.where: {err} (columns of the first batch read: "
                                      f"{table.column_names})") from None
                # a field absent from every row of this batch is NULL here, as in SQL
                table = table.append_column(missing.group(1), pa.nulls(table.num_rows))
            except self._duckdb.Error as err:
                raise SubsetError(f"{self.key}.subset.where: {err}") from None
            finally:
                self.con.unregister("subset_rows")
        raise SubsetError(f"{self.key}.subset.where: too many fields missing from a batch")


def _document(src: Any, ctx: ReadContext, uri: str, row: dict[str, Any], sample: bytes | None,
              mtime: int | None) -> Record | None:
    """A kept row as a full ingest turns it into a document, or None after quarantining it."""
    try:
        if getattr(src, "chat", None) is not None:
            text, meta = chat_record(row, src.chat, src.meta_fields)
            return Record(text, uri, meta_json(meta, None, None), mtime)
        value = row.get(src.text_field)
        if isinstance(value, bytes):  # a Parquet binary text column, in the source's encoding
            try:
                row = {**row, src.text_field: value.decode(ctx.encoding)}
            except UnicodeDecodeError as err:
                ctx.quarantine.add(uri, Q.INVALID_UTF8, f"not valid {ctx.encoding}: {err.reason}", value)
                return None
        return Record(extract_text(row, src.text_field), uri, meta_json(row, src.text_field, src.meta_fields), mtime)
    except Rejected as rej:
        ctx.quarantine.add(uri, rej.reason, rej.detail, sample)
        return None


class ShuffleBuffer:
    """`datasets`' buffer shuffle: fill to `size`, then each new document takes the place of a random
    one, which is emitted; at the end the rest is shuffled. Python's Mersenne Twister state is 625
    integers of JSON in the checkpoint."""

    def __init__(self, size: int, seed: int):
        self.size = size
        self.rng = random.Random(seed)
        self.items: list[Record] = []

    def push(self, rec: Record) -> Record | None:
        if len(self.items) < self.size:
            self.items.append(rec)
            return None
        i = self.rng.randrange(self.size)
        out, self.items[i] = self.items[i], rec
        return out

    def drain(self) -> list[Record]:
        self.rng.shuffle(self.items)
        out, self.items = self.items, []
        return out

    def state(self) -> list:
        version, internal, gauss = self.rng.getstate()
        return [version, list(internal), gauss]

    def restore(self, state: list, items: list[Record]) -> None:
        self.rng.setstate((state[0], tuple(state[1]), state[2]))
        self.items = items


def _records_table(records: list[Record]) -> pa.Table:
    return pa.table([pa.array([r.text for r in records], pa.large_string()), pa.array([r.uri for r in records]),
                     pa.array([r.meta for r in records], pa.string()),
                     pa.array([r.mtime_s for r in records], pa.int64())], schema=BUFFER_SCHEMA)


def _table_records(table: pa.Table) -> list[Record]:
    return [Record(r["text"], r["uri"], r["meta"], r["mtime_s"]) for r in table.to_pylist()]


# -- the run -----------------------------------------------------------------------------------------
@dataclass
class SubsetCounts:
    rows_seen: int = 0
    rows_rejected_by_predicate: int = 0
    rows_kept: int = 0  # documents written
    bytes_kept: int = 0  # UTF-8 bytes of their text
    tokens_kept: int = 0  # with `max_tokens`
    stop: str = "end_of_source"  # or max_rows / max_bytes / max_tokens


@dataclass
class SubsetRun:
    """What a subset run reports besides the documents (IngestResult.subset)."""

    counts: SubsetCounts
    resumed_at_rows: int  # documents already written when this run started (0: a fresh run)
    quarantine: QuarantineSink
    input_files: int
    extra: dict[str, Any] = field(default_factory=dict)

    def metadata(self) -> dict[str, Any]:
        c = self.counts
        out = {"rows_seen": c.rows_seen, "rows_rejected_by_predicate": c.rows_rejected_by_predicate,
               "subset_rows_kept": c.rows_kept, "subset_bytes_kept": c.bytes_kept, "subset_stop": c.stop,
               "subset_resumed_at_rows": self.resumed_at_rows}
        if c.tokens_kept:
            out["subset_tokens_kept"] = c.tokens_kept
        return out


def _resume_key(cfg: SourcePlan, name: str, files: list) -> str:
    """What must not change for a checkpoint to still describe the same run."""
    doc = {"v": CHECKPOINT_VERSION, "source": cfg.source(name).model_dump(mode="json"),
           "io": cfg.io.model_dump(mode="json"), "max_document_bytes": cfg.ingest.max_document_bytes,
           "files": [(f.path, f.size, f.mtime_s) for f in files]}
    return hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()[:16]


class _ResumeDir:
    """`.<name>.subset-<key>` beside the output: parts so far and the checkpoint."""

    def __init__(self, storage: Storage, rel: str, key: str):
        self.storage, self.fs = storage, storage.fs
        final = storage.path(rel)
        self.parent, _, self.name = final.rpartition("/")
        self.path = f"{self.parent}/.{self.name}.subset-{key}"
        self.staged = StagedDir(self.fs, self.path)

    def clear_others(self) -> None:
        """Resumable directories of an earlier config of this output can never be resumed."""
        prefix = f"{self.parent}/.{self.name}.subset-"
        try:
            entries = self.fs.get_file_info(pafs.FileSelector(self.parent, allow_not_found=True))
        except OSError:
            return
        for e in entries:
            if e.path.startswith(prefix) and e.path != self.path and e.type == pafs.FileType.Directory:
                self.fs.delete_dir(e.path)

    def load(self) -> dict[str, Any] | None:
        try:
            with self.fs.open_input_stream(f"{self.path}/{CHECKPOINT_FILE}") as f:
                state = json.loads(f.read())
        except (FileNotFoundError, OSError):
            return None
        if state.get("version") != CHECKPOINT_VERSION:
            return None
        # parts written after the checkpoint by the run that stopped are written again
        keep = set(state["parts"]) | {CHECKPOINT_FILE, state.get("buffer")}
        for e in self.fs.get_file_info(pafs.FileSelector(self.path, allow_not_found=True)):
            if e.base_name not in keep and e.type == pafs.FileType.File:
                self.fs.delete_file(e.path)
        return state

    def save(self, state: dict[str, Any], buffer: list[Record] | None) -> None:
        old_buffer = state.get("buffer")
        if buffer is not None:
            name = f"buffer-{state['segment']:05d}.parquet"
            pq.write_table(_records_table(buffer), f"{self.path}/{name}", filesystem=self.fs)
            state["buffer"] = name
        data = json.dumps(state, sort_keys=True).encode()
        target = f"{self.path}/{CHECKPOINT_FILE}"
        if self.storage.is_local:  # a rename replaces it whole; a crash leaves the old or the new one
            tmp = f"{target}.tmp"
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, target)
        else:  # an S3 PUT appears whole
            with self.fs.open_output_stream(target) as f:
                f.write(data)
        if old_buffer and old_buffer != state.get("buffer"):
            self.fs.delete_file(f"{self.path}/{old_buffer}")

    def read_buffer(self, name: str) -> list[Record]:
        return _table_records(pq.read_table(f"{self.path}/{name}", filesystem=self.fs))

    def move_into(self, staged: StagedDir, parts: list[str]) -> None:
        for part in parts:
            src, dst = f"{self.path}/{part}", staged.path(part)
            if self.storage.is_local:
                try:
                    os.link(src, dst)  # the resumable copy stays until the commit: a crash here resumes
                    continue
                except OSError:
                    pass
            self.fs.copy_file(src, dst)
            staged.hash_file(part)

    def remove(self) -> None:
        if self.fs.get_file_info(self.path).type != pafs.FileType.NotFound:
            self.fs.delete_dir(self.path)


def ingest_subset(cfg: SourcePlan, name: str, storage: Storage, out_rel: str, s3: S3Settings | None = None):
    """Run the subset of source `name` into `out_rel`; returns (WriteStats-like totals, SubsetRun)."""
    src = cfg.source(name)
    subset: SubsetSettings = src.subset
    key = _key_of(cfg, name)
    location = cfg.source_location(name)
    if isinstance(src, HuggingFaceSource):
        files: list = []
        ctx = ReadContext(source=name, fs=pafs.LocalFileSystem(), quarantine=QuarantineSink(name),
                          max_document_bytes=cfg.ingest.max_document_bytes,
                          snapshot_s=int(src.snapshot_time.timestamp()) if src.snapshot_time else None)
    else:
        ctx, _root, files = source_files(cfg, name, s3)
    tokenizer = None
    if subset.max_tokens is not None:
        from tokenizers import Tokenizer

        path = cfg.resolve(subset.tokenizer)
        try:
            tokenizer = Tokenizer.from_file(path)
        except Exception as err:  # tokenizers raises a bare Exception for a missing or bad file
            raise SubsetError(f"{key}.subset.tokenizer: cannot load {path!r}: {err}") from None
    predicate = Predicate(subset.where, key) if subset.where else None
    resume = _ResumeDir(storage, out_rel, _resume_key(cfg, name, files))

    with TableSink(storage, out_rel, DOCUMENTS_SCHEMA, cfg.io) as out:  # holds the output's lock throughout
        resume.clear_others()
        resume.fs.create_dir(resume.path, recursive=True)
        state = resume.load()
        counts = SubsetCounts()
        shuffle = ShuffleBuffer(subset.shuffle_buffer, subset.seed) if subset.shuffle_buffer else None
        if state is not None:
            counts = SubsetCounts(**state["counts"])
            ctx.quarantine.rows = [tuple(r) for r in state["quarantine"]]
            ctx.quarantine.counts.update(state["quarantine_counts"])
            if shuffle is not None:
                shuffle.restore(state["rng"], resume.read_buffer(state["buffer"]) if state.get("buffer") else [])
        else:
            state = {"version": CHECKPOINT_VERSION, "segment": 0, "position": {}, "parts": []}
        resumed_at = counts.rows_kept
        ctx = replace(ctx, parse_threads=False)
        if isinstance(src, HuggingFaceSource):
            batches = _hf_batches(src, location, ctx, state["position"])
        elif isinstance(src, JsonlSource):
            batches = _jsonl_batches(ctx, files, subset.columns, state["position"])
        else:
            batches = _parquet_batches(ctx, files, subset.columns, state["position"])

        id_root = source_root(cfg, name)
        checkpoints = 0

        def open_writer() -> DocumentWriter:
            parts = PartWriter.with_io(resume.staged, DOCUMENTS_SCHEMA, cfg.io, f"{PART_PREFIX}-{state['segment']:05d}")
            return DocumentWriter(parts, name, src.license, cfg.io, id_root=id_root)

        writer = open_writer()
        since_checkpoint = 0
        budget_bytes = subset.max_bytes
        with track("subset", unit="documents", total=subset.max_rows, total_bytes=budget_bytes) as kept_tracker, \
                track("subset scan", unit="rows") as seen_tracker, \
                track("subset tokens", unit="tokens", total=subset.max_tokens) as token_tracker:
            kept_tracker.advance(counts.rows_kept, counts.bytes_kept)
            seen_tracker.advance(counts.rows_seen)
            token_tracker.advance(counts.tokens_kept)

            def emit(candidates: list[Record]) -> bool:
                """Write documents until the budget is reached; True when it is."""
                nonlocal since_checkpoint
                tokens = ([len(e.ids) for e in tokenizer.encode_batch([r.text for r in candidates],
                                                                     add_special_tokens=False)]
                          if tokenizer is not None and candidates else None)
                for i, rec in enumerate(candidates):
                    writer.add(rec)
                    nbytes = len(rec.text.encode("utf-8"))
                    counts.rows_kept += 1
                    counts.bytes_kept += nbytes
                    since_checkpoint += 1
                    kept_tracker.advance(1, nbytes)
                    if tokens is not None:
                        counts.tokens_kept += tokens[i]
                        token_tracker.advance(tokens[i])
                    for limit, have, why in ((subset.max_rows, counts.rows_kept, "max_rows"),
                                             (subset.max_bytes, counts.bytes_kept, "max_bytes"),
                                             (subset.max_tokens, counts.tokens_kept, "max_tokens")):
                        if limit is not None and have >= limit:
                            counts.stop = why
                            return True
                return False

            done = False
            for batch in batches:
                counts.rows_seen += batch.seen
                seen_tracker.advance(batch.seen)
                keep = predicate.mask(batch) if predicate is not None else [True] * len(batch.rows)
                candidates: list[Record] = []
                for uri, row, sample, kept in zip(batch.uris, batch.rows, batch.samples, keep, strict=True):
                    if not kept:
                        counts.rows_rejected_by_predicate += 1
                        continue
                    rec = _document(src, ctx, uri, row, sample, batch.mtime)
                    if rec is None:
                        continue
                    if shuffle is not None:
                        rec = shuffle.push(rec)
                        if rec is None:
                            continue
                    candidates.append(rec)
                if emit(candidates):
                    done = True
                    break
                state["position"] = batch.position
                if since_checkpoint >= subset.checkpoint_rows:
                    state["parts"] += writer.close().parts
                    state["segment"] += 1
                    state.update(counts=vars(counts), quarantine=ctx.quarantine.rows,
                                 quarantine_counts=dict(ctx.quarantine.counts),
                                 rng=shuffle.state() if shuffle is not None else None)
                    resume.save(state, shuffle.items if shuffle is not None else None)
                    checkpoints += 1
                    fault_point(f"{FAULT_POINT}-{checkpoints}", out_rel)
                    writer, since_checkpoint = open_writer(), 0
            if not done and shuffle is not None:
                emit(shuffle.drain())
            close = getattr(batches, "close", None)
            if close is not None:
                close()  # stop reading: the generator's files close now
        state["parts"] += writer.close().parts
        resume.move_into(out.staged, state["parts"])
        out.write_side(QUARANTINE_FILE, ctx.quarantine.table())
    resume.remove()
    return SubsetRun(counts, resumed_at, ctx.quarantine, len(files) or 1,
                     extra={"parts": state["parts"], "checkpoints": checkpoints})
