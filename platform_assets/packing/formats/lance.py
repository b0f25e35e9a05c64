"""`lance`: one Lance dataset per (split, source) set, `<split>/<source>.lance/`; shard k is the
dataset's fragment k, committed as version k + 1 (so version v holds shards 0..v-1).

Rows are samples in sample order with the parquet format's columns, the token ids in their own dtype
as a fixed-size list (`take` of row i reads seq_len contiguous values, no offsets), and the sample's
position (`shard`, `sample`) so a query can join `provenance.parquet` without this code.

Not byte-identical across rebuilds (why `default=False`): Lance names data files and transactions with
random UUIDs and stamps manifests with the commit time. The rows are identical (checked by reading
them back, `formats_agree`), and every file written is listed in index.json with its sha256, so a
changed byte is still caught by `verify_shards` and the loader's `verify`.

Memory: the stage pushes runs (`add`), Lance pulls record batches from a reader, so each shard is
written by a thread that drains a queue of at most QUEUE_RUNS runs (one run <= 1024 samples: 4 MiB of
uint16 tokens at seq_len 2048); the stage never holds more than that for this format, not a shard.
"""

from __future__ import annotations

import hashlib
import os
import queue
import shutil
import tempfile
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs

from platform_assets.packing.formats.base import (
    FileEntries,
    SetHeader,
    ShardFormat,
    column,
    declared_layout,
    sample_columns,
)
from platform_assets.packing.samples import ROWS_PER_ROW_GROUP, ShardSamples, ShardSetError
from platform_assets.storage import StagedDir

NAME = "lance"
DATASET_SUFFIX = ".lance"
# Pinned rather than pylance's "stable" default, which moves between releases: 2.1 is read by every
# pylance since 0.2x, and the same version means the same data-file bytes (checked in the tests: only the
# names, manifests and transactions differ between two writes).
DATA_STORAGE_VERSION = "2.1"
QUEUE_RUNS = 2  # runs waiting for the writer thread: one being encoded, one queued (~8 MiB at 2048 x uint16)
MAX_ROWS_PER_FILE = 2**31 - 1  # a shard is one data file: never cut by row count (pylance's default is 1 Mi)
HINT = "_versions/latest_version_hint.json"  # rewritten by every commit: listed once, under the last shard
_END = object()
_ABORT = object()
_HASH_CHUNK = 8 * 2**20


def arrow_schema(header: SetHeader) -> pa.Schema:
    token_type = pa.from_numpy_dtype(header.token_dtype)
    fields = [pa.field("input_ids", pa.list_(token_type, header.seq_len), nullable=False),
              pa.field("seqlens", pa.list_(pa.int32()), nullable=False)]
    if header.has_loss_mask:
        fields.append(pa.field("loss_mask", pa.list_(pa.uint8(), header.seq_len), nullable=False))
    fields += [pa.field("shard", pa.int32(), nullable=False), pa.field("sample", pa.int32(), nullable=False)]
    return pa.schema(fields)


def record_batch(run: ShardSamples, schema: pa.Schema, shard: int, first_sample: int) -> pa.RecordBatch:
    n, seq_len = run.tokens.shape
    token_type = schema.field("input_ids").type.value_type
    columns = [
        pa.FixedSizeListArray.from_arrays(pa.array(np.ascontiguousarray(run.tokens).reshape(-1), token_type), seq_len),
        pa.ListArray.from_arrays(pa.array(run.seqptr.astype(np.int32)), pa.array(run.seqlens.astype(np.int32))),
    ]
    if run.loss_mask is not None:
        columns.append(pa.FixedSizeListArray.from_arrays(
            pa.array(np.ascontiguousarray(run.loss_mask, np.uint8).reshape(-1)), seq_len))
    columns += [pa.array(np.full(n, shard, np.int32)),
                pa.array(np.arange(first_sample, first_sample + n, dtype=np.int32))]
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def _sha256(path: str) -> tuple[str, int]:
    h, size = hashlib.sha256(), 0
    with open(path, "rb") as f:
        while chunk := f.read(_HASH_CHUNK):
            h.update(chunk)
            size += len(chunk)
    return h.hexdigest(), size


def _files_under(root: str) -> set[str]:
    return {os.path.relpath(os.path.join(d, f), root).replace(os.sep, "/")
            for d, _, names in os.walk(root) for f in names}


class WriteAborted(RuntimeError):
    """Raised inside the batch reader Lance pulls from when the producer gave up: Lance commits nothing."""


class StreamingLanceWrite:
    """One `lance.write_dataset` (a shard here; a whole document set in tokenize/lance_documents.py) in a
    thread, fed batch by batch through a bounded queue. A producer that fails calls `abort()`: the thread
    ends without a commit and what it wrote is removed (else the thread waits on the queue for ever and
    data files of no version stay in the output)."""

    def __init__(self, uri: str, schema: pa.Schema, first: bool, rows_per_group: int = ROWS_PER_ROW_GROUP):
        import lance  # imported here: `lance` is needed only where this format is configured

        self._uri, self._first = uri, first
        self._before = set() if first else _files_under(uri)  # an append removes only what it added
        self._queue: queue.Queue = queue.Queue(maxsize=QUEUE_RUNS)
        self.batches = 0
        self.error: BaseException | None = None
        reader = pa.RecordBatchReader.from_batches(schema, self._drain())

        def write() -> None:
            try:
                lance.write_dataset(reader, uri, schema=schema, mode="create" if first else "append",
                                    max_rows_per_file=MAX_ROWS_PER_FILE, max_rows_per_group=rows_per_group,
                                    data_storage_version=DATA_STORAGE_VERSION,
                                    # `_versions/<v>.manifest`: version v is named v (the v2 scheme counts down)
                                    enable_v2_manifest_paths=False)
            except BaseException as e:  # noqa: BLE001 -- handed to the stage's thread by put()/finish()
                self.error = e
                while True:  # unblock a producer waiting on a full queue
                    try:
                        self._queue.get_nowait()
                    except queue.Empty:
                        break

        self._thread = threading.Thread(target=write, name=f"lance-write-{uri}", daemon=True)
        self._thread.start()

    def _drain(self) -> Iterator[pa.RecordBatch]:
        while (batch := self._queue.get()) is not _END:
            if batch is _ABORT:
                raise WriteAborted(f"{self._uri}: the producer failed")
            yield batch

    def put(self, batch: Any) -> None:
        while self.error is None:
            try:
                self._queue.put(batch, timeout=0.5)
                if batch is not _END:
                    self.batches += 1
                return
            except queue.Full:
                if not self._thread.is_alive():
                    break
        raise ShardSetError(f"lance write failed: {self.error!r}") from self.error

    def finish(self) -> None:
        self.put(_END)
        self._thread.join()
        if self.error is not None:
            raise ShardSetError(f"lance write failed: {self.error!r}") from self.error

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def abort(self) -> None:
        """Stop the write without committing it and remove the files it wrote; the thread has ended on
        return. Called on the producer's failure: raises nothing of its own."""
        while self._thread.is_alive():
            try:
                self._queue.put(_ABORT, timeout=0.5)  # the writer drains the queue, so room comes
                break
            except queue.Full:
                continue
        self._thread.join()
        if self._first:
            shutil.rmtree(self._uri, ignore_errors=True)
        elif os.path.isdir(self._uri):
            for rel in _files_under(self._uri) - self._before:
                os.remove(os.path.join(self._uri, rel))


class LanceSetWriter:
    """The set's dataset: shard k is written (by a thread draining its runs) and committed as version
    k + 1 when shard k + 1 starts or the set closes; the files each commit added are that shard's."""

    def __init__(self, staged: StagedDir, fmt_dir: str, set_prefix: str, header: SetHeader):
        self._staged = staged
        self._rel = f"{set_prefix}{DATASET_SUFFIX}"  # relative to the format directory
        self._target = f"{fmt_dir}/{self._rel}"
        # Lance writes through its own object store: straight into a local staging directory; for
        # another filesystem (S3) into a local temporary one, copied over when the set closes.
        self._local = isinstance(staged.fs, pafs.LocalFileSystem)
        self._tmp = None if self._local else tempfile.mkdtemp(prefix="lance-set-")
        self._uri = staged.path(self._target) if self._local else f"{self._tmp}/d{DATASET_SUFFIX}"
        self._schema = arrow_schema(header)
        self._current: tuple[int, StreamingLanceWrite] | None = None
        self._in_shard = 0
        self._seen: set[str] = set()
        self._shards: list[FileEntries] = []
        self.batches_written = 0  # record batches handed to Lance (one per run: see the tests)

    def add(self, run: ShardSamples, shard: int) -> None:
        if self._current is None or self._current[0] != shard:
            self._finish_shard()
            if shard != len(self._shards):
                raise ShardSetError(f"{self._rel}: shard {shard} after {len(self._shards)} shards")
            self._current = (shard, StreamingLanceWrite(self._uri, self._schema, first=not self._shards))
            self._in_shard = 0
        self._current[1].put(record_batch(run, self._schema, shard, self._in_shard))
        self._in_shard += run.samples
        self.batches_written += 1

    def _entry(self, rel: str) -> dict[str, Any]:
        sha, size = _sha256(f"{self._uri}/{rel}")
        return {"path": f"{self._rel}/{rel}", "bytes": size, "sha256": sha}

    def _finish_shard(self) -> None:
        if self._current is None:
            return
        self._current[1].finish()
        self._current = None
        new = sorted(_files_under(self._uri) - self._seen - {HINT})
        self._seen.update(new)
        roles = {"data": [r for r in new if r.startswith("data/")],
                 "manifest": [r for r in new if r.startswith("_versions/")],
                 "transaction": [r for r in new if r.startswith("_transactions/")]}
        other = sorted(set(new) - {r for rs in roles.values() for r in rs})
        if other or any(len(rs) != 1 for rs in roles.values()):
            raise ShardSetError(f"{self._rel}: a shard's commit wrote {new}, expected one data file, one "
                                f"manifest and one transaction (pylance {_lance_version()})")
        self._shards.append({role: self._entry(rs[0]) for role, rs in roles.items()})

    def abort(self) -> None:
        """The set will not be closed (the stage failed): stop the shard's write, remove the dataset."""
        current, self._current = self._current, None
        try:
            if current is not None:
                current[1].abort()
        finally:
            shutil.rmtree(self._uri, ignore_errors=True)
            if self._tmp is not None:
                shutil.rmtree(self._tmp, ignore_errors=True)

    def close_set(self) -> list[FileEntries]:
        self._finish_shard()
        if self._shards:
            self._shards[-1]["version_hint"] = self._entry(HINT)
            if not self._local:
                for rel in sorted(_files_under(self._uri)):
                    with open(f"{self._uri}/{rel}", "rb") as src:
                        self._staged.write_bytes(f"{self._target}/{rel}", src.read())  # <= one shard's data file
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
        return self._shards


def _lance_version() -> str:
    import lance

    return lance.__version__


def open_set(staged: StagedDir, fmt_dir: str, set_prefix: str, header: SetHeader) -> LanceSetWriter:
    return LanceSetWriter(staged, fmt_dir, set_prefix, header)


def dataset_dir(shard: dict) -> str:
    """The set's dataset directory (relative to the index) from a shard entry's data file."""
    rel = shard["files"]["data"]["path"]
    head, sep, _ = rel.rpartition(f"{DATASET_SUFFIX}/data/")
    if not sep:
        raise ShardSetError(f"{rel}: not a data file of a <split>/<source>{DATASET_SUFFIX} dataset")
    return head + DATASET_SUFFIX


def read(fs: pafs.FileSystem, base: str, index: dict, shard: dict) -> ShardSamples:
    """The shard's fragment read back through Lance's own reader (not the writer's arrays)."""
    import lance

    if not isinstance(fs, pafs.LocalFileSystem):
        raise ShardSetError("the lance reader reads local datasets only")
    data_name = shard["files"]["data"]["path"].rsplit("/", 1)[-1]
    ds = lance.dataset(f"{base}/{dataset_dir(shard)}")
    frags = [f for f in ds.get_fragments() if any(d.path.rsplit("/", 1)[-1] == data_name for d in f.data_files())]
    if len(frags) != 1:
        raise ShardSetError(f"{base}/{shard['files']['data']['path']}: in {len(frags)} fragments of the dataset")
    table = frags[0].to_table()
    n, seq_len = table.num_rows, index["seq_len"]
    if n != shard["samples"]:
        raise ShardSetError(f"{base}/{shard['files']['data']['path']}: {n} rows, the index says {shard['samples']}")
    tokens = table["input_ids"].combine_chunks().flatten().to_numpy().astype(index["token_dtype"]).reshape(n, seq_len)
    seqlens = table["seqlens"].combine_chunks()
    seqptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(seqlens.value_lengths().to_numpy(zero_copy_only=False), out=seqptr[1:])
    mask = None
    if index["has_loss_mask"]:
        mask = table["loss_mask"].combine_chunks().flatten().to_numpy().reshape(n, seq_len)
    return ShardSamples(tokens, seqlens.flatten().to_numpy().astype(np.int32), seqptr, mask)


def layout(header: SetHeader) -> dict:
    dtype = header.token_dtype.name
    encodings = {"input_ids": f"fixed_size_list<{dtype}>[seq_len]", "seqlens": "list<int32>",
                 "loss_mask": "fixed_size_list<uint8>[seq_len]"}
    cols = sample_columns(header, encodings) + [
        column("shard", "int32", "[]", "the sample's shard within its set (= its fragment)", "int32"),
        column("sample", "int32", "[]", "the sample's index within its shard", "int32"),
    ]
    return declared_layout(
        f"Lance dataset (data storage version {DATA_STORAGE_VERSION}), one per set, one row per sample in "
        f"sample order; shard k is fragment k (one data file, <= {ROWS_PER_ROW_GROUP} rows per group), "
        "committed as version k + 1; read with lance.dataset(dir).take(rows)",
        f"<split>/<source>{DATASET_SUFFIX}/data/<uuid>.lance",
        ["data", "manifest", "transaction", "version_hint (last shard only)"], cols)


# Not a default format: rebuilds are content-identical, not byte-identical (module docstring).
FORMAT = ShardFormat(NAME, 1, open_set, read, layout, minor=1, default=False)
