"""Near dedup with the LSH index on disk (`dedup.near.storage.type: disk`): the same decisions as the
in-memory index, in memory that does not grow with the corpus's distinct documents.

The greedy pass (near_dedup.py) needs, for each document in keep-policy order, the accepted documents
that share one of its LSH band values. A band value held by a single document can never produce a
candidate, and most are (in the real 500 MB corpus 30,629 of 35,799 documents, 86%, share no band
value with any other), so:

1. while signatures are computed, every (band, band values, document) record goes to one of
   `partitions` bucket files on disk, by a hash of the band values (BandBuckets.add);
2. each bucket file is read alone, its records grouped by exact (band, values) with numpy (by a 64-bit
   hash of them, confirmed on the bytes: shared_groups), and only the groups of two or more documents
   are kept: (document, key) pairs (BandBuckets.shared_keys);
3. the greedy pass replays the in-memory algorithm over those keys only (BucketedNearDedup): a
   document without a shared key has no candidates and is accepted; one with keys gets the accepted
   documents of its keys as candidates, verified exactly as before (near_dedup.best_candidate).

Shingles for exact verification are spilled too (ShingleSpill): 8 bytes per document stay in memory
(an offset) instead of 4 bytes per shingle, and only candidates' shingles are read back.

Memory: one bucket file's records while it is grouped (~(10 + 4 x rows) bytes x bands x documents /
partitions: 1 M documents at 18 x 7 and 64 partitions, 11 MB), the shared keys, the shingle cache
(`storage.shingle_cache_bytes`); the signatures are spilled as well (signature_spill.py), only the
accepted ones come back into memory for the artifact. The datasketch index held ~2.7 KB per accepted
document (a bytes key and a list per band).
"""

from __future__ import annotations

import os
import tempfile
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from platform_assets.dedup.hash64 import GOLDEN
from platform_assets.dedup.near_dedup import NearOutcome, best_candidate, keys_of_document
from platform_assets.dedup.settings import NearSettings
from platform_assets.dedup.shingles import ShingleBatch
from platform_assets.dedup.signature_store import AcceptedSignatures

__all__ = ["BandBuckets", "BucketedNearDedup", "ShingleSpill", "SpillDir", "band_records", "record_dtype"]


class SpillDir:
    """A private temporary directory for one dedup run's spill files, removed when closed."""

    def __init__(self, parent: str | None = None):
        self._tmp = tempfile.TemporaryDirectory(prefix="dedup-spill-", dir=parent)
        self.path = Path(self._tmp.name)

    def close(self) -> None:
        self._tmp.cleanup()


class ShingleSpill:
    """Shingle hashes of this run's documents in a file (top 32 bits, as ShingleStore keeps them),
    read back with one `pread` per document that meets a candidate, unique-sorted and cached until
    released or until the cache passes `cache_bytes`, least recently used first. Unbounded, the cache
    held every accepted document that ever met a candidate: 24 MB (19,654 documents) of the 90,013
    of the 4x pipeline_scaling corpus, growing with the corpus. A document read again after
    eviction costs one more `pread` and sort; the values, so the decisions, are the same."""

    def __init__(self, directory: Path, cache_bytes: int = 16 * 2**20):
        self._path = directory / "shingles.u32"
        self._file = open(self._path, "wb")  # noqa: SIM115 (closed in close())
        self._offsets = [np.zeros(1, np.int64)]
        self._end = 0
        self._n_docs = 0
        self._fd: int | None = None
        self._cache: OrderedDict[int, np.ndarray] = OrderedDict()
        self._cache_bytes = cache_bytes
        self._cached_bytes = 0

    def add(self, batch: ShingleBatch) -> None:
        self.add_top32((batch.hashes >> np.uint64(32)).astype(np.uint32), batch.offsets)

    def add_top32(self, values: np.ndarray, offsets: np.ndarray) -> None:
        """As ShingleStore.add_top32: documents' top-32-bit hashes in CSR form, offsets from 0."""
        values.astype("<u4", copy=False).tofile(self._file)
        self._offsets.append(offsets[1:] + self._end)
        self._end += int(offsets[-1])
        self._n_docs += len(offsets) - 1

    def __len__(self) -> int:
        return self._n_docs

    def _reader(self) -> int:
        if self._fd is None:
            self._file.flush()
            self._offsets = [np.concatenate(self._offsets)]
            self._fd = os.open(self._path, os.O_RDONLY)
        return self._fd

    def get(self, doc: int) -> np.ndarray:
        cached = self._cache.get(doc)
        if cached is not None:
            self._cache.move_to_end(doc)
            return cached
        fd = self._reader()
        offsets = self._offsets[0]
        a, b = int(offsets[doc]), int(offsets[doc + 1])
        out = np.unique(np.frombuffer(os.pread(fd, 4 * (b - a), 4 * a), "<u4"))
        self._cache[doc] = out
        self._cached_bytes += out.nbytes
        # the newest entry stays even when it alone is over the budget: the caller holds it anyway
        while self._cached_bytes > self._cache_bytes and len(self._cache) > 1:
            self._cached_bytes -= self._cache.popitem(last=False)[1].nbytes
        return out

    @property
    def cached_bytes(self) -> int:
        return self._cached_bytes

    def release(self, doc: int) -> None:
        dropped = self._cache.pop(doc, None)
        if dropped is not None:
            self._cached_bytes -= dropped.nbytes

    def close(self) -> None:
        self._file.close()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        self._cache.clear()
        self._cached_bytes = 0


def record_dtype(rows: int) -> np.dtype:
    """One band record: the document, the band's number and its `rows` MinHash values."""
    return np.dtype([("doc", "<i8"), ("band", "<u2"), ("values", "<u4", (rows,))])


def band_value_hashes(band: np.ndarray, values: np.ndarray) -> np.ndarray:
    """A 64-bit mix of each band's number and its values (the last axis of `values`; `band` broadcasts
    to the others): a record's bucket is it modulo the partitions, and within a bucket file it groups
    the records (shared_groups)."""
    mix = np.broadcast_to(band.astype(np.uint64) * GOLDEN, values.shape[:-1]).copy()
    for j in range(values.shape[-1]):
        mix ^= values[..., j]
        mix *= np.uint64(0xBF58476D1CE4E5B9)
        mix ^= mix >> np.uint64(31)
    return mix


def band_records(first_doc: int, signatures: np.ndarray, with_shingles: np.ndarray, bands: int, rows: int,
                 partitions: int) -> tuple[np.ndarray, np.ndarray]:
    """(records, bucket of each record): every band of `signatures` (rows are documents first_doc,
    first_doc + 1, ...), document-major; documents without shingles are left out (never candidates,
    never in the index). The bucket is a 64-bit mix of the band's values (and its number) modulo
    `partitions`: equal values, equal bucket, wherever and whenever the records are made."""
    docs = np.flatnonzero(with_shingles) + first_doc
    signatures = signatures[with_shingles]
    n = len(signatures)
    values = signatures[:, : bands * rows].reshape(n, bands, rows).astype("<u4", copy=False)
    mix = band_value_hashes(np.arange(bands)[None, :], values)
    bucket = (mix % np.uint64(partitions)).astype(np.int64).ravel()
    records = np.empty(n * bands, record_dtype(rows))
    records["doc"] = np.repeat(docs.astype(np.int64), bands)
    records["band"] = np.tile(np.arange(bands, dtype=np.uint16), n)
    records["values"] = values.reshape(n * bands, rows)
    return records, bucket


class BandBuckets:
    """(band, band values, global document) records in `partitions` files, by a hash of the values."""

    def __init__(self, directory: Path, bands: int, rows: int, partitions: int):
        self.bands, self.rows, self.partitions = bands, rows, partitions
        self._dtype = record_dtype(rows)
        self._paths = [directory / f"band-bucket-{p:04d}.rec" for p in range(partitions)]
        self._files = [open(path, "wb") for path in self._paths]  # noqa: SIM115 (closed in shared_keys)

    def add(self, first_doc: int, signatures: np.ndarray, with_shingles: np.ndarray) -> None:
        """Records of every band of `signatures` (band_records)."""
        self.add_records(*band_records(first_doc, signatures, with_shingles, self.bands, self.rows, self.partitions))

    def add_records(self, records: np.ndarray, bucket: np.ndarray) -> None:
        """Records made by band_records (here or elsewhere: dedup_signatures stores them), to their files."""
        if len(records) == 0:
            return
        order = np.argsort(bucket, kind="stable")
        bounds = np.searchsorted(bucket[order], np.arange(self.partitions + 1))
        for p in np.flatnonzero(np.diff(bounds)).tolist():
            records[order[bounds[p] : bounds[p + 1]]].tofile(self._files[p])

    def shared_keys(self) -> tuple[np.ndarray, np.ndarray]:
        """(document, key) for every band value two or more documents hold; keys are dense ints.
        Reads one bucket file at a time and deletes it."""
        for f in self._files:
            f.close()
        docs, keys = [], []
        next_key = 0
        for path in self._paths:
            records = np.fromfile(path, self._dtype)
            path.unlink()
            if len(records) < 2:
                continue
            group = shared_groups(records)
            shared = group >= 0
            if shared.any():
                docs.append(records["doc"][shared])
                keys.append(group[shared] + next_key)
                next_key += int(group.max()) + 1
        if not docs:
            return np.empty(0, np.int64), np.empty(0, np.int64)
        return np.concatenate(docs), np.concatenate(keys)


def shared_groups(records: np.ndarray) -> np.ndarray:
    """Per record (record_dtype): the dense number of its exact (band, values) group when two or
    more records hold it, else -1. Groups are numbered in the order of a 64-bit hash of the key.

    Grouped by that hash, then every grouped record's key bytes are compared with its group's first: a
    collision of two distinct keys (~n^2 / 2^65 for n records: 1e-10 for a bucket of 100k) falls back
    to grouping the bytes themselves. np.unique over the 54-byte keys (rows 13) held a sorted copy of
    them, the permutation, the inverse and the counts: ~130 B a record, 17 MB for a bucket of the 16x
    pipeline_scaling corpus, where the hash and its order are 24 B a record."""
    n = len(records)
    h = band_value_hashes(records["band"], records["values"])  # the mix that chose the bucket
    order = np.argsort(h, kind="stable")
    h = h[order]
    first = np.empty(n, dtype=bool)
    first[0] = True
    np.not_equal(h[1:], h[:-1], out=first[1:])
    del h
    starts = np.flatnonzero(first)
    sizes = np.diff(np.append(starts, n))
    start_of = np.repeat(starts, sizes)  # per sorted position: where its hash group starts
    grouped = np.repeat(sizes >= 2, sizes)
    # the (band, values) bytes of each record: a view of the bytes after the document number
    key_from = records.dtype.fields["band"][1]
    key_bytes = records.view(np.uint8).reshape(n, records.dtype.itemsize)[:, key_from:]
    at, head = order[grouped], order[start_of[grouped]]
    if (key_bytes[at] != key_bytes[head]).any():  # two distinct keys with one hash
        return _shared_groups_by_bytes(records)
    dense = np.cumsum(sizes >= 2) - 1  # per hash group: its number among the shared ones
    group = np.full(n, -1, np.int64)
    group[order[grouped]] = np.repeat(dense, sizes)[grouped]
    return group


def _shared_groups_by_bytes(records: np.ndarray) -> np.ndarray:
    """shared_groups by the key bytes themselves (numbered in their byte order): the collision path."""
    key_dtype = np.dtype([("band", "<u2"), ("values", records.dtype["values"])])
    key = np.empty(len(records), key_dtype)
    key["band"], key["values"] = records["band"], records["values"]
    _, inverse, counts = np.unique(key.view(f"V{key_dtype.itemsize}"), return_inverse=True, return_counts=True)
    inverse = inverse.reshape(-1)
    shared = counts[inverse] >= 2
    group = np.full(len(records), -1, np.int64)
    if shared.any():
        _, group[shared] = np.unique(inverse[shared], return_inverse=True)
    return group


class BucketedNearDedup:
    """The greedy pass of near_dedup.GreedyNearDedup over shared band keys (see the module doc).

    Global numbering as there: earlier runs' accepted documents 0..P-1, this run's rows P + row.

    The index of accepted documents is the (key, document) pairs sorted by key, with a flag per
    document set when it is accepted: a document's candidates are the flagged documents among its
    keys' pairs (16 B a pair in all). A dict of lists filled as documents were accepted was ~150-200 B
    a pair (a 300k-document synthetic corpus heavy in near duplicates: 150 MB under memray).
    """

    def __init__(self, settings: NearSettings, prior: AcceptedSignatures, doc_keys: tuple[np.ndarray, np.ndarray],
                 ids_unique: bool = False):
        """ids_unique: every id of this run's documents is distinct, so no id-to-document map is kept to
        spot the same document read twice (~150 B per accepted document with shared keys)."""
        self.settings, self.prior = settings, prior
        docs, keys = doc_keys
        # int32 where the numbers fit (document numbers and key numbers are dense from 0): 4 copies of
        # the pairs at 4 B, not 8
        narrow = np.int32 if max(int(docs.max(initial=0)), int(keys.max(initial=0))) < 2**31 else np.int64
        order = np.argsort(docs, kind="stable")
        self._docs = docs[order].astype(narrow, copy=False)  # by document: each document's keys
        self._keys = keys[order].astype(narrow, copy=False)
        del docs, keys, order
        by_key = np.lexsort((self._docs, self._keys))
        self._key_sorted, self._key_docs = self._keys[by_key], self._docs[by_key]  # by key: its documents
        del by_key
        n_docs = int(self._docs[-1]) + 1 if len(self._docs) else 0
        self._accepted = np.zeros(n_docs, dtype=bool)  # in the index: accepted and holding a shared key
        self._global: dict[str, int] | None = None if ids_unique else {}  # id -> global, of those
        n_prior = len(prior)
        prior_ids = prior.ids.to_pylist() if n_prior and not ids_unique else None
        # earlier runs' documents are in the index first (the in-memory index inserts all of them; only
        # those holding a shared key can ever be a candidate)
        for g in range(n_prior):
            if prior.n_shingles[g] > 0:
                self._insert(g, prior_ids[g] if prior_ids is not None else None)

    def _keys_of(self, doc: int) -> np.ndarray:
        return keys_of_document(self._docs, self._keys, doc)

    def _insert(self, doc: int, key: str | None) -> bool:
        if doc >= len(self._accepted) or not len(self._keys_of(doc)):
            return False
        self._accepted[doc] = True
        if self._global is not None:
            self._global[key] = doc
        return True

    def _candidates(self, keys: np.ndarray) -> list[int]:
        """Accepted documents holding one of `keys`, ascending (a set: its order must not depend on the
        order of acceptance)."""
        lo = np.searchsorted(self._key_sorted, keys, side="left")
        hi = np.searchsorted(self._key_sorted, keys, side="right")
        held = np.concatenate([self._key_docs[a:b] for a, b in zip(lo.tolist(), hi.tolist(), strict=True)])
        return np.unique(held[self._accepted[held]]).tolist()

    def run(self, order: np.ndarray, ids: Sequence[str], signatures: np.ndarray, rank: np.ndarray,
            shingles: ShingleSpill | None = None) -> NearOutcome:
        s = self.settings
        n_prior = len(self.prior)
        out = NearOutcome(np.full(len(ids), -1, np.int64), np.full(len(ids), np.nan, np.float32))
        exact = s.verify == "exact" and shingles is not None
        for row in _rows_of(order):
            out.queries += 1
            keys = self._keys_of(n_prior + row)
            if len(keys) == 0:  # no band value shared with any document: nothing to compare with
                continue
            glob = self._candidates(keys)
            best, sim = best_candidate(s, self.prior, row, signatures[row], glob, signatures, rank,
                                       shingles if exact else None, out)
            if best >= 0:
                out.target[row], out.similarity[row] = best, sim
                if shingles is not None:
                    shingles.release(row)
                continue
            if self._global is not None and ids[row] in self._global:  # the same id twice, identical text
                out.target[row], out.similarity[row] = self._global[ids[row]], 1.0
                continue
            self._insert(n_prior + row, ids[row] if self._global is not None else None)
        return out


def _rows_of(order: np.ndarray, chunk: int = 65_536) -> Iterator[int]:
    """The rows as Python ints (numpy scalars are slow to index with), a chunk's list at a time: the
    whole order as one list was ~36 B a document (12 MB at pipeline_scaling's 16x)."""
    for a in range(0, len(order), chunk):
        yield from order[a: a + chunk].tolist()
