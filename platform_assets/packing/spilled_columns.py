"""One number per input row on disk, appended in row order and read back by row range: the survey's
per-document columns (each set's lengths, loss-token counts and chunks, and every row's set), of
which packing needs one placement window's or one record batch's at a time, never a set's.

Held in memory they were the survey's 24 B per input row (lengths and loss counts int64, chunks and
sets int32) for the whole stage: 7.8 MB for the 16x corpus's 325,855 documents, 24 GB for a billion.
Here a column holds at most FLUSH_BYTES of appended values before it writes them to its raw file
(opened per flush and closed again, as spilled_keys.py: a stage holds sets x 3 columns), and a
read is an `np.fromfile` at the range's byte offset.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np

FLUSH_BYTES = 64 * 1024


class SpilledColumn:
    """Numbers of one dtype appended in row order (`append`), read by row range (`col[a:b]`, an
    ndarray) or row (`col[i]`); `sum()` is kept as values arrive. The file is removed by `close`."""

    def __init__(self, path: Path, dtype: np.dtype | type):
        self.path, self.dtype = path, np.dtype(dtype)
        self.rows = 0
        self._total = 0
        self._pending: list[np.ndarray] = []
        self._pending_bytes = 0
        path.write_bytes(b"")

    def append(self, values: np.ndarray) -> None:
        values = np.ascontiguousarray(values, self.dtype)
        if not values.size:
            return
        self.rows += values.size
        self._total += int(values.sum(dtype=np.int64))
        self._pending.append(values)
        self._pending_bytes += values.nbytes
        if self._pending_bytes >= FLUSH_BYTES:
            self._flush()

    def _flush(self) -> None:
        if self._pending:
            with open(self.path, "ab") as f:
                for values in self._pending:
                    values.tofile(f)
            self._pending, self._pending_bytes = [], 0

    def __len__(self) -> int:
        return self.rows

    def sum(self) -> int:
        return self._total

    def __getitem__(self, key: slice | int) -> np.ndarray | int:
        if isinstance(key, slice):
            start, stop, step = key.indices(self.rows)
            if step != 1:
                raise ValueError("spilled columns are read by contiguous row ranges")
            return self._read(start, max(0, stop - start))
        row = int(key)
        if not 0 <= row < self.rows:
            raise IndexError(f"row {row} of {self.rows}")
        return self._read(row, 1)[0].item()

    def _read(self, start: int, count: int) -> np.ndarray:
        if not count:
            return np.zeros(0, self.dtype)
        self._flush()
        with open(self.path, "rb") as f:
            return np.fromfile(f, self.dtype, count=count, offset=start * self.dtype.itemsize)

    def chunks(self, rows: int) -> Iterator[np.ndarray]:
        """The whole column, `rows` values at a time."""
        for start in range(0, self.rows, rows):
            yield self[start : start + rows]

    def close(self) -> None:
        self._pending, self._pending_bytes = [], 0
        self.path.unlink(missing_ok=True)
