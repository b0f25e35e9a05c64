"""Batches of tokenized_documents' token lists bounded by tokens, not by an average row.

Arrow decodes a list<int32> column a batch at a time, at ~8-12 bytes a token while it does (the
values, their repetition and definition levels), so the tokens of the largest batch set the packing
passes' peak. Rows per batch used to come from the whole input's average row (1 Mi tokens' worth):
a batch of 250 rows then held whatever documents sat there, and the more batches an input has, the
longer the longest run of long documents among them. On pipeline_scaling (base 32 MB, 8 MiB
batches) the largest batch of the train/text set made reading it peak at 24 / 44 / 58 MiB of Arrow
memory at 1x / 4x / 16x. Here each row group is read in batches of the most rows that no run of
that many consecutive rows of it exceeds `max_tokens` (from the row group's `num_tokens` column):
12.8 / 18.2 / 18.7 MiB there, and 11.5 / 14.6 / 14.6 with the column chunk read in 1 MiB pieces
(`READ_BUFFER_BYTES`) instead of whole (the rest is the row group's size, which tokenize bounds).
A single row over `max_tokens` is a batch alone. Which rows a batch holds changes nothing packed.
The packed_shards stage process on those inputs: 334 / 352 / 368 MB peak RSS -> 325 / 329 / 331, the
same work CPU, the same bytes. Batches no longer span row groups (tokenize writes ~1k-row ones).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from platform_assets.parquet_parts import part_files
from platform_assets.storage import Storage

READ_BATCH_TOKENS = 2**20  # 4 MiB of int32 ids per batch read
READ_BUFFER_BYTES = 2**20  # a column chunk is read through a buffer of this size, not whole (local files)
LENGTH_COLUMN = "num_tokens"


def batch_rows_within(lengths: np.ndarray, max_tokens: int, max_rows: int) -> int:
    """The most rows r (1 <= r <= max_rows) such that any r consecutive rows of `lengths` hold at
    most `max_tokens` tokens; 1 when a row alone holds more."""
    n = len(lengths)
    if n == 0:
        return max(1, max_rows)
    ends = np.concatenate(([0], np.cumsum(lengths, dtype=np.int64)))
    lo, hi = 1, max(1, min(max_rows, n))  # r = lo always qualifies (or is 1)
    while lo < hi:  # the largest window sum grows with r: binary search the last r within the bound
        mid = (lo + hi + 1) // 2
        if int((ends[mid:] - ends[:-mid]).max()) <= max_tokens:
            lo = mid
        else:
            hi = mid - 1
    return lo


def part_token_batches(storage: Storage, path: str, columns: Sequence[str], max_rows: int,
                       max_tokens: int = READ_BATCH_TOKENS) -> Iterator[pa.RecordBatch]:
    """Record batches of `columns` of one part (`path` in the storage's filesystem), in row order,
    each within `max_tokens` tokens (a longer row alone) and `max_rows` rows."""
    local = storage.is_local
    with storage.fs.open_input_file(path) as f:
        # off local storage, a row group's selected column chunks are fetched at once (few requests)
        pf = pq.ParquetFile(f, pre_buffer=not local, buffer_size=READ_BUFFER_BYTES if local else 0)
        for i in range(pf.metadata.num_row_groups):
            lengths = pf.read_row_group(i, columns=[LENGTH_COLUMN]).column(0).to_numpy()
            rows = batch_rows_within(lengths, max_tokens, max_rows)
            yield from pf.iter_batches(batch_size=rows, row_groups=[i], columns=list(columns))


def token_batches(storage: Storage, rel_dir: str, columns: Sequence[str], max_rows: int,
                  max_tokens: int = READ_BATCH_TOKENS) -> Iterator[pa.RecordBatch]:
    """`part_token_batches` over every part of an output directory, in part order (read_batches')."""
    for path in part_files(storage, rel_dir):
        yield from part_token_batches(storage, path, columns, max_rows, max_tokens)
