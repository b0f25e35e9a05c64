"""Which documents the dedup decisions keep, looked up by id in the write pass, in ~10 bytes a document.

The write pass reads the cleaned documents again in any order and batching and must emit each kept
id once. Looking ids up in the decisions' own string column (`pc.index_in`) held the ids (36 B a
32-character id, plus a second copy for the lookup) and built a hash table of all of them for every
batch written. Here each id is a 64-bit hash, sorted, with a keep flag and an emitted flag: a batch's
ids are hashed and found by binary search. The 352,156 documents of pipeline_scaling's 16x corpus:
3.5 MB, where the decisions' columns held ~35 MB through the write pass.

Equal hashes are confirmed on the ids when the lookup is built: the same id read twice is one entry
(kept if any of its rows is kept, as before), and two distinct ids that share a hash (chance, ~n^2 /
2^65: 3e-9 for 352k documents) make it fall back to the ids themselves. An id that was never decided
is refused by name; one whose hash equals a decided id's (the same chance) would pass as that one.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from platform_assets.dedup.hash64 import id_hashes


class IdHashes:
    """Each id's 64-bit hash, sorted, and how many distinct ids there are: equal hashes are confirmed on
    the ids. `distinct` counts like `pc.count_distinct(ids)`, whose hash table of the strings was the
    decisions' peak (the 16x pipeline_scaling corpus, 364k ids: +95 MB for each of its three calls)."""

    def __init__(self, ids: pa.Array):
        hashes = id_hashes(ids)
        self.order = np.argsort(hashes, kind="stable")
        self.sorted = hashes[self.order]
        del hashes
        # positions i of `sorted` equal to the next; a run of equal hashes is one id unless two differ
        self.same = np.flatnonzero(self.sorted[1:] == self.sorted[:-1])
        self.collide = False  # two distinct ids with one hash (chance, ~n^2 / 2^65)
        if len(self.same):
            pairs = pa.array(self.order[np.concatenate([self.same, self.same + 1])], pa.int64())
            a, b = np.split(pc.take(ids, pairs).to_numpy(zero_copy_only=False), 2)
            self.collide = bool((a != b).any())
        self.distinct = pc.count_distinct(ids).as_py() if self.collide else len(self.sorted) - len(self.same)


class KeepLookup:
    """`kept_rows(ids)`: the rows of a batch to write (kept, each id once over all batches)."""

    def __init__(self, ids: pa.Array, keep: np.ndarray, hashed: IdHashes | None = None):
        """ids: every decided row's id (an id may repeat: the same document read twice); keep: per row;
        hashed: the ids' IdHashes, when the caller has them already."""
        self._ids: pa.Array | None = None  # the distinct ids, only when two of them share a hash
        found = hashed if hashed is not None else IdHashes(ids)
        if found.collide:  # distinct ids with one hash: look up the ids themselves
            self._exact(ids, keep)
            return
        order, hashes, same = found.order, found.sorted, found.same
        first = np.ones(len(hashes), dtype=bool)
        first[same + 1] = False
        starts = np.flatnonzero(first)
        self._hashes = hashes[starts]
        # one decision per distinct id: kept if any row of it is (a run of equal hashes is one id)
        keep = np.asarray(keep, dtype=bool)[order]
        self._keep = np.logical_or.reduceat(keep, starts) if len(starts) else np.zeros(0, bool)
        self._emitted = np.zeros(len(starts), dtype=bool)

    def _exact(self, ids: pa.Array, keep: np.ndarray) -> None:
        g = pa.table({"id": ids, "keep": pa.array(np.asarray(keep, dtype=np.int8))})
        g = g.group_by("id", use_threads=False).aggregate([("keep", "max")])
        self._ids = g["id"].combine_chunks()
        self._hashes = None
        self._keep = g["keep_max"].to_numpy().astype(bool)
        self._emitted = np.zeros(len(self._ids), dtype=bool)

    def __len__(self) -> int:
        return len(self._keep)

    def _positions(self, ids: pa.Array) -> np.ndarray:
        if self._ids is not None:
            found = pc.index_in(ids, value_set=self._ids)
            if found.null_count:
                raise ValueError(f"filter_batch got documents that were not given to add_batch: "
                                 f"{ids.filter(found.is_null()).to_pylist()[:5]}")
            return found.to_numpy(zero_copy_only=False).astype(np.int64)
        h = id_hashes(ids)
        at = np.minimum(np.searchsorted(self._hashes, h), max(len(self._hashes) - 1, 0))
        unknown = (self._hashes[at] != h) if len(self._hashes) else np.ones(len(h), bool)
        if unknown.any():
            raise ValueError(f"filter_batch got documents that were not given to add_batch: "
                             f"{pc.filter(ids, pa.array(unknown)).to_pylist()[:5]}")
        return at.astype(np.int64)

    def kept_rows(self, ids: pa.Array | pa.ChunkedArray) -> np.ndarray:
        """Ascending rows of `ids` to emit: kept, not emitted by an earlier call, an id's first row only."""
        if isinstance(ids, pa.ChunkedArray):
            ids = ids.combine_chunks()
        at = self._positions(ids)
        rows = np.flatnonzero(self._keep[at] & ~self._emitted[at])
        _, first = np.unique(at[rows], return_index=True)  # an id twice in one batch: its first row
        rows = np.sort(rows[first])
        self._emitted[at[rows]] = True
        return rows
