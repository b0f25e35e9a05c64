"""This run's MinHash signatures on disk (`near.storage.type: disk`), read back only where needed.

A signature is `num_perm` uint32 (512 B at 128 slots), the largest per-document state of the decision
pass. Held as one in-memory matrix it made the stage's peak grow with the corpus: on the whole
pipeline_scaling corpus the deduplicated_documents process grew 548 -> 645 MB of peak tree RSS from
1x to 4x (21,362 -> 90,013 documents in), the matrix, its concatenation and the accepted subset being
~1.5 KB per document at the end of the decisions. Here the rows go to a file as they are fed, and:

- the greedy pass reads the rows of a document that has candidates and of those candidates, one
  `pread` per row (`rows`): on the real corpus 86% of documents share no band value and are never read;
- the stage's accepted-signature artifact reads the kept rows a row group at a time while it is
  written (`signature_store.TakenSignatures`, ~4 MB at once): gathered whole, with the artifact's encoded row group
  beside them, they were ~1 KB per accepted document at the end of the decisions (deduplicated_documents
  grew 479 -> 954 MB from 1x to 16x of the whole pipeline_scaling corpus); a caller that wants the
  matrix (`take`) reads the file in order, at most `chunk_rows` rows at a time.

The values read back are the ones written, so decisions and artifact bytes are those of the matrix.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

__all__ = ["SignatureSpill"]

# rows per read while gathering the kept signatures: 8,192 x 512 B = 4 MB at 128 slots
TAKE_CHUNK_ROWS = 8192


class SignatureSpill:
    """Fixed-width uint32 rows appended to a file, then read back by row number (0, 1, ... in the
    order they were added). Adding after the first read is refused: the file is complete by then."""

    def __init__(self, directory: Path, width: int):
        self.width = width
        self._path = directory / "signatures.u32"
        self._file = open(self._path, "wb")  # noqa: SIM115 (closed in close())
        self._rows = 0
        self._fd: int | None = None

    def __len__(self) -> int:
        return self._rows

    def add(self, signatures: np.ndarray) -> None:
        if self._fd is not None:
            raise RuntimeError("SignatureSpill is being read: no more rows can be added")
        if signatures.ndim != 2 or signatures.shape[1] != self.width:
            raise ValueError(f"signatures of shape {signatures.shape}, expected (n, {self.width})")
        np.ascontiguousarray(signatures, dtype="<u4").tofile(self._file)
        self._rows += len(signatures)

    def _reader(self) -> int:
        if self._fd is None:
            self._file.flush()
            self._fd = os.open(self._path, os.O_RDONLY)
        return self._fd

    def _read(self, first: int, count: int) -> np.ndarray:
        if first < 0 or first + count > self._rows:
            raise IndexError(f"rows {first}..{first + count} of {self._rows}")
        size = 4 * self.width
        data = os.pread(self._reader(), size * count, size * first)
        if len(data) != size * count:
            raise OSError(f"{self._path}: short read ({len(data)} of {size * count} bytes)")
        return np.frombuffer(data, "<u4").reshape(count, self.width)

    def row(self, index: int) -> np.ndarray:
        """One signature, (width,)."""
        return self._read(int(index), 1)[0]

    def rows(self, indices: np.ndarray) -> np.ndarray:
        """The signatures of `indices` (any order, repeats allowed), (len(indices), width): one read per row,
        for the few rows a candidate check needs."""
        indices = np.asarray(indices, dtype=np.int64)
        out = np.empty((len(indices), self.width), np.uint32)
        for j, r in enumerate(indices.tolist()):
            out[j] = self._read(r, 1)[0]
        return out

    def __getitem__(self, index: int | np.integer | np.ndarray) -> np.ndarray:
        """`spill[row]` or `spill[array of rows]`, as on the (n, width) matrix it replaces."""
        if isinstance(index, int | np.integer):
            return self.row(int(index))
        return self.rows(index)

    def take(self, indices: np.ndarray, chunk_rows: int = TAKE_CHUNK_ROWS) -> np.ndarray:
        """The signatures of `indices` (any order), reading the file front to back `chunk_rows` rows at a
        time and only the chunks that hold one of them: memory is the result plus one chunk."""
        indices = np.asarray(indices, dtype=np.int64)
        out = np.empty((len(indices), self.width), np.uint32)
        if not len(indices):
            return out
        order = np.argsort(indices, kind="stable")
        wanted = indices[order]
        if wanted[0] < 0 or wanted[-1] >= self._rows:
            raise IndexError(f"rows outside 0..{self._rows - 1}")
        for first in range(int(wanted[0]) // chunk_rows * chunk_rows, int(wanted[-1]) + 1, chunk_rows):
            a, b = np.searchsorted(wanted, [first, first + chunk_rows])
            if a == b:
                continue
            count = min(chunk_rows, self._rows - first)
            out[order[a:b]] = self._read(first, count)[wanted[a:b] - first]
        return out

    def close(self) -> None:
        self._file.close()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

