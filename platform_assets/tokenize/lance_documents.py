"""Tokenized documents as Lance datasets: a document's tokens by row number (`take`), without scanning.

With `tokenize.lance: true` the tokenized_documents stage writes, beside the Parquet parts of each
(split, source) set, the same rows in the same order as one Lance dataset `lance/<split>/<source>.lance`
(the Parquet parts stay: every downstream stage reads them). Each set's `lance.write_dataset` runs in a
thread fed slices of ROWS_PER_GROUP documents through a queue of at most QUEUE_RUNS slices, so the
stage holds at most one input batch per set in the writes, never a set; one data file per set.

Not byte-identical across rebuilds (Lance names data files and transactions with UUIDs and stamps
manifests with the commit time: packing/formats/lance.py). The rows are identical, and every file of
the dataset is listed in the output's `_manifest.json` with its sha256 like the Parquet parts, so the
dataset version and `verify` see a changed byte.
"""

from __future__ import annotations

import os
import shutil
import tempfile

import pyarrow as pa
import pyarrow.fs as pafs

from platform_assets.packing.formats.lance import DATASET_SUFFIX, StreamingLanceWrite
from platform_assets.storage import StagedDir

LANCE_DIR = "lance"
ROWS_PER_GROUP = 1024
"""Documents per Lance row group (pylance's default): a `take` reads within the groups it touches."""
COPY_CHUNK = 8 * 2**20  # bytes per read when copying a finished dataset into a non-local output


def set_dir(split: str, source: str) -> str:
    """The dataset of a (split, source) set, relative to the output."""
    return f"{LANCE_DIR}/{split}/{source}{DATASET_SUFFIX}"


class LanceDocumentSets:
    """One streaming Lance write per (split, source); `close()` finishes them all. As a context manager,
    leaving it by an exception (or without close()) aborts them: no writer thread outlives the stage and
    no partial dataset stays in the staged output."""

    def __init__(self, staged: StagedDir, schema: pa.Schema) -> None:
        self._staged, self._schema = staged, schema
        # Lance writes through its own object store: straight into the local staging directory; for S3
        # into a local temporary directory, copied into the staged output at close
        self._local = isinstance(staged.fs, pafs.LocalFileSystem)
        self._tmp = None if self._local else tempfile.mkdtemp(prefix="lance-docs-")
        self._writes: dict[tuple[str, str], StreamingLanceWrite] = {}
        self.rows: dict[tuple[str, str], int] = {}
        self._closed = False

    def __enter__(self) -> LanceDocumentSets:
        return self

    def __exit__(self, *exc: object) -> None:
        if not self._closed:
            self.abort()

    def _uri(self, key: tuple[str, str]) -> str:
        rel = set_dir(*key)
        return self._staged.path(rel) if self._local else os.path.join(self._tmp, rel)

    def add(self, key: tuple[str, str], batch: pa.RecordBatch) -> None:
        if key not in self._writes:
            uri = self._uri(key)
            os.makedirs(os.path.dirname(uri), exist_ok=True)
            self._writes[key] = StreamingLanceWrite(uri, self._schema, first=True, rows_per_group=ROWS_PER_GROUP)
            self.rows[key] = 0
        # in slices of ROWS_PER_GROUP rows: the write's queue holds QUEUE_RUNS record batches, and whole
        # input batches there (up to 8,192 documents, tens of MB of token lists each) could keep three
        # input batches alive behind the stage; slices keep at most this one's. Measured (subset_lance,
        # 12,221 documents in 2 batches): the peak is unchanged (1,498 -> 1,495 MB): it is one batch's
        # encode, Lance drains the queue faster than batches come; the bound holds when it does not
        for start in range(0, batch.num_rows, ROWS_PER_GROUP):
            self._writes[key].put(batch.slice(start, ROWS_PER_GROUP))
        self.rows[key] += batch.num_rows

    def abort(self) -> None:
        """Stop every set's write without a commit and remove the datasets (each set's thread has ended)."""
        self._closed = True
        try:
            for key in sorted(self._writes):
                self._writes[key].abort()
        finally:
            for key in self._writes:
                shutil.rmtree(self._uri(key), ignore_errors=True)
            if self._tmp is not None:
                shutil.rmtree(self._tmp, ignore_errors=True)

    def close(self) -> list[str]:
        """Finish every set's write (and copy the datasets into the staged output when it is not local);
        returns the datasets' directories, sorted. A failure aborts the writes not yet finished."""
        self._closed = True
        try:
            for key in sorted(self._writes):
                self._writes[key].finish()
            if self._tmp is not None:
                for d, _, names in os.walk(self._tmp):
                    for name in sorted(names):
                        full = os.path.join(d, name)
                        rel = os.path.relpath(full, self._tmp).replace(os.sep, "/")
                        with open(full, "rb") as src, self._staged.open_output(rel) as dst:
                            shutil.copyfileobj(src, dst, COPY_CHUNK)
        except BaseException:
            for key in sorted(self._writes):
                if self._writes[key].running:  # a write close() did not finish
                    self._writes[key].abort()
            raise
        finally:
            if self._tmp is not None:
                shutil.rmtree(self._tmp, ignore_errors=True)
        return [set_dir(*key) for key in sorted(self._writes)]
