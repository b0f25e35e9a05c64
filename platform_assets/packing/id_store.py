"""A set's document ids on disk, read back by row range: what offline packing needs of them at once is
one placement window's (windows.py), not the set's.

The survey appends each set's ids in input order to an Arrow IPC file of its own in the packing run's
spill directory; a window reads the record batches that overlap its rows (read into memory, never
mapped, as the token spill files). Held in memory the ids were the survey's largest part: 32-character
hex ids cost ~40 B a document in Arrow, every set's for the whole stage (~13 MB for the 16x corpus's
325,855 documents; ids that are URLs or paths cost several times that). With the shard writer's
digests (shard_writers.document_digests) the 16x stage's peak went 436 -> 415 MB (1x: 355).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa


class SpilledIds:
    """Ids appended in row order (`append`), then read by row range (`range`) once `seal`ed."""

    def __init__(self, path: Path):
        self.path = path
        self._sink = pa.OSFile(str(path), "wb")
        self._writer = pa.ipc.new_file(self._sink, pa.schema([("id", pa.string())]))
        self._starts = [0]  # row of each record batch's first id, then the total
        self.rows = 0

    def append(self, ids: pa.Array) -> None:
        if not len(ids):
            return
        self._writer.write_batch(pa.record_batch([ids.cast(pa.string())], names=["id"]))
        self.rows += len(ids)
        self._starts.append(self.rows)

    def seal(self) -> None:
        """Appending is over: the file is closed and can be read."""
        if self._writer is not None:
            self._writer.close()
            self._sink.close()
            self._writer = self._sink = None

    def range(self, d0: int, d1: int) -> pa.Array:
        """Ids of rows d0..d1-1, one array."""
        if not 0 <= d0 <= d1 <= self.rows:
            raise IndexError(f"rows {d0}:{d1} of {self.rows}")
        if d0 == d1:
            return pa.array([], pa.string())
        starts = np.asarray(self._starts)
        first = int(np.searchsorted(starts, d0, side="right")) - 1
        last = int(np.searchsorted(starts, d1, side="left"))  # batches first..last-1 hold the rows
        with pa.OSFile(str(self.path)) as f:
            reader = pa.ipc.open_file(f)
            chunks = [reader.get_batch(i).column(0) for i in range(first, last)]
            ids = pa.chunked_array(chunks, pa.string()).slice(d0 - int(starts[first]), d1 - d0).combine_chunks()
        return ids

    def __getitem__(self, row: int) -> str:
        return self.range(row, row + 1)[0].as_py()

    def close(self) -> None:
        self.seal()
        self.path.unlink(missing_ok=True)
