"""Cut an input batch into consecutive row slices of bounded text bytes before dedup keys it.

Every per-row step of dedup (exact keys, the large_string copy of the text MinHash shingles, the
signatures) gives the same value for a row whatever rows surround it, so keying a batch slice by
slice gives the same arrays, concatenated, as keying it whole. What changes is the temporaries:
`texts_to_array` casts the batch's text to large_string (a full copy) once for the exact keys and
once for near dedup, so a whole `io.batch_bytes` (64 MiB) batch held ~2-3 copies of its text at
once. Measured on pipeline_scaling's 16x input at --base-mb 8 (5,346 documents, ~40 MB of text in
one batch, in-process, jemalloc pool): the first pass peaked at 458 MB RSS; sliced at 8 MiB, 412
MB, and 361 MB once that pass also reads 8 MiB batches (stage.py). The write pass (~560 MB there,
one `io.batch_bytes` row group per batch) is now the stage's peak.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


def text_row_slices(batch: pa.RecordBatch | pa.Table, slice_bytes: int) -> Iterator[pa.RecordBatch | pa.Table]:
    """Consecutive zero-copy slices of `batch` covering every row in order, each of at most
    `slice_bytes` of text (at least one row, so one larger document makes a slice of its own).
    A batch without a `text` column, or within the bound, is yielded whole."""
    n = batch.num_rows
    if n == 0 or "text" not in batch.schema.names:
        yield batch
        return
    lengths = pc.fill_null(pc.binary_length(batch.column("text")), 0)
    if isinstance(lengths, pa.ChunkedArray):
        lengths = lengths.combine_chunks()
    cum = np.cumsum(lengths.to_numpy(zero_copy_only=False).astype(np.int64))
    if cum[-1] <= slice_bytes:
        yield batch
        return
    start = 0
    while start < n:
        base = int(cum[start - 1]) if start else 0
        stop = min(n, max(int(np.searchsorted(cum, base + slice_bytes, side="right")), start + 1))
        yield batch.slice(start, stop - start)
        start = stop
