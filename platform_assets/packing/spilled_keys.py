"""Fixed-width hash keys counted or checked for repeats without holding them: packed_shards' per-document
keys (each set's distinct-document digests in the shard writer, each (document, chunk)'s hash in the
provenance check) were arrays of 8-16 bytes a document held to the end of the stage, ~9 MB of the
16x pipeline_scaling corpus's peak (325,855 documents) and 16 GB for a billion.

Keys are hashes, so their first 64 bits spread them evenly over `partitions` files; a key's copies all
land in one partition, and each partition is read and sorted alone at the end. The partition count
comes from the number of keys expected and `budget_bytes` (what one partition may hold when read
back), at most MAX_PARTITIONS, so memory is bounded by the budget up to MAX_PARTITIONS x budget of
keys (256 MiB at the default 1 MiB) and grows by 1/256 of the keys beyond. Added keys wait in a
buffer of FLUSH_BYTES, then each partition's share is appended to its file, which is closed again: a
stage holds one store per (split, source) until its end, so open files would be sets x partitions.
Without a directory the partitions stay in memory (writers outside a packing run: tests, benchmarks,
media shards).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np

__all__ = ["FLUSH_BYTES", "KEYS_BUDGET_BYTES", "MAX_PARTITIONS", "SpilledKeys"]

KEYS_BUDGET_BYTES = 2**20
MAX_PARTITIONS = 256  # files per store, one read each at the end
FLUSH_BYTES = 64 * 2**10  # keys buffered before they go to their files: 2 MiB for 32 sets at once


class SpilledKeys:
    """Keys of one dtype (uint64 hashes, or 16-byte `V16` digests) `add`ed in any order; then
    `distinct()` or `repeated()`, each a pass over the partitions."""

    def __init__(self, directory: Path | None, name: str, dtype: np.dtype | str, expected: int,
                 budget_bytes: int | None = None):
        budget_bytes = KEYS_BUDGET_BYTES if budget_bytes is None else budget_bytes
        self.dtype = np.dtype(dtype)
        if self.dtype.itemsize % 8:
            raise ValueError(f"keys must be whole 64-bit words, got {self.dtype}")
        self.partitions = int(min(MAX_PARTITIONS, max(1, -(-max(expected, 0) * self.dtype.itemsize // budget_bytes))))
        self._paths = (None if directory is None else
                       [directory / f"{name}.{p:03d}.keys" for p in range(self.partitions)])
        self._buffer: list[np.ndarray] = []
        self._buffered = 0
        self._held: list[list[np.ndarray]] = [[] for _ in range(self.partitions)] if directory is None else []

    def add(self, keys: np.ndarray) -> None:
        keys = np.array(keys, self.dtype)  # a copy: the caller's array is not kept
        if not keys.size:
            return
        if self._paths is not None:
            self._buffer.append(keys)
            self._buffered += keys.nbytes
            if self._buffered >= FLUSH_BYTES:
                self._flush()
            return
        self._route(keys)

    def _flush(self) -> None:
        if self._buffer:
            keys = np.concatenate(self._buffer)
            self._buffer, self._buffered = [], 0
            self._route(keys)

    def _route(self, keys: np.ndarray) -> None:
        if self.partitions == 1:
            self._put(0, keys)
            return
        first_word = keys.view(np.uint64)[:: self.dtype.itemsize // 8]
        part = first_word % np.uint64(self.partitions)
        order = np.argsort(part, kind="stable")
        bounds = np.searchsorted(part[order], np.arange(self.partitions + 1, dtype=np.uint64))
        for p in np.flatnonzero(np.diff(bounds)).tolist():
            self._put(p, keys[order[bounds[p] : bounds[p + 1]]])

    def _put(self, p: int, keys: np.ndarray) -> None:
        if self._paths is None:
            self._held[p].append(keys)
            return
        with open(self._paths[p], "ab") as f:
            f.write(memoryview(np.ascontiguousarray(keys)).cast("B"))

    def _sorted_partitions(self) -> Iterator[np.ndarray]:
        self._flush()
        for p in range(self.partitions):
            if self._paths is None:
                keys = np.concatenate(self._held[p]) if self._held[p] else np.zeros(0, self.dtype)
            else:
                keys = (np.fromfile(self._paths[p], self.dtype) if self._paths[p].exists()
                        else np.zeros(0, self.dtype))
            keys.sort()
            yield keys

    def distinct(self) -> int:
        """How many different keys were added."""
        total = 0
        for keys in self._sorted_partitions():
            if keys.size:
                total += 1 + int(np.count_nonzero(keys[1:] != keys[:-1]))
        return total

    def repeated(self) -> np.ndarray:
        """The keys added more than once, each once, sorted within their partition."""
        out = [np.unique(keys[1:][keys[1:] == keys[:-1]]) for keys in self._sorted_partitions()]
        return np.concatenate(out) if out else np.zeros(0, self.dtype)

    def close(self) -> None:
        """Remove the partition files."""
        self._buffer, self._buffered = [], 0
        for path in self._paths or ():
            path.unlink(missing_ok=True)
        self._held = [[] for _ in range(self.partitions)] if self._paths is None else []
