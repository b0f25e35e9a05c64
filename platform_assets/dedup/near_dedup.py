"""Near-duplicate removal: greedy over documents in keep-policy order against an LSH index of the
documents accepted so far.

For each document, best first: query the index (which holds only accepted documents), verify the
candidates, and either link the document to the most similar verified candidate (it is removed) or
accept it and insert it. Why this shape:

- deterministic and independent of input order: the order is the keep policy's total order, so the
  kept member of every cluster is its best member and the result is a function of the corpus;
- no chaining: every removed document is itself similar (>= threshold, when verified) to the one
  kept for it. Transitive closure over all LSH pairs would let A~B~C~D drift until A and D share
  nothing;
- linear on boilerplate: 5,000 copies of a licence leave one accepted document in the index, so
  every query returns ~1 candidate; nothing enumerates pairs inside a bucket. Work per document is
  bounded by `max_candidates` verifications even when many distinct documents share buckets;
- incremental for free: documents accepted by earlier runs are simply in the index first.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from platform_assets.dedup.minhash import exact_jaccard
from platform_assets.dedup.settings import NearSettings
from platform_assets.dedup.shingles import ShingleBatch
from platform_assets.dedup.signature_store import AcceptedSignatures

if TYPE_CHECKING:  # only `storage: memory | redis` builds one (deduplicator.py imports it there)
    from platform_assets.dedup.lsh_index import LshIndex


class ShingleStore:
    """Shingle hashes of this run's documents, kept for exact verification.

    Stored as the top 32 bits of each shingle hash (4 B per shingle, ~0.7 B per byte of text): two
    2,000-shingle documents share a spurious 32-bit value with probability ~1e-3, which moves their
    Jaccard by 1/4000. Unique-sorted lazily, only for documents that meet a candidate.
    """

    def __init__(self) -> None:
        self._hashes: list[np.ndarray] = []
        self._offsets: list[np.ndarray] = []
        self._first_doc: list[int] = []
        self._n_docs = 0
        self._cache: dict[int, np.ndarray] = {}

    def add(self, batch: ShingleBatch) -> None:
        self.add_top32((batch.hashes >> np.uint64(32)).astype(np.uint32), batch.offsets)

    def add_top32(self, values: np.ndarray, offsets: np.ndarray) -> None:
        """Documents whose top-32-bit shingle hashes are values[offsets[i]:offsets[i + 1]] (any order,
        repeats allowed: `get` takes the set), e.g. the `shingles` of stored document keys."""
        self._hashes.append(values.astype(np.uint32, copy=False))
        self._offsets.append(offsets)
        self._first_doc.append(self._n_docs)
        self._n_docs += len(offsets) - 1

    def __len__(self) -> int:
        return self._n_docs

    def get(self, doc: int) -> np.ndarray:
        cached = self._cache.get(doc)
        if cached is not None:
            return cached
        b = bisect_right(self._first_doc, doc) - 1
        j = doc - self._first_doc[b]
        off = self._offsets[b]
        out = np.unique(self._hashes[b][off[j] : off[j + 1]])
        self._cache[doc] = out
        return out

    def release(self, doc: int) -> None:
        self._cache.pop(doc, None)


@dataclass
class NearOutcome:
    target: np.ndarray  # int64 per current document: -1, or the global index of the kept document
    similarity: np.ndarray  # float32: the verified (or estimated) Jaccard to the target; NaN if none
    queries: int = 0
    candidates: int = 0  # candidates returned by the LSH (after the max_candidates cap)
    rejected: int = 0  # candidates verification rejected (false positives of the LSH)
    unknown_candidates: int = 0  # keys in a shared index without a local signature (Redis)


class GreedyNearDedup:
    """Holds the index of accepted documents (earlier runs' first) and runs the greedy pass.

    Global document numbering: earlier runs' accepted documents are 0..P-1 (in artifact order, all
    preferred to any new document), this run's documents are P + row.
    """

    def __init__(self, settings: NearSettings, index: LshIndex, prior: AcceptedSignatures | None = None):
        self.settings = settings
        self.index = index
        self.prior = prior if prior is not None else AcceptedSignatures.empty(settings.num_perm)
        self._global: dict[str, int] = {}
        prior_ids = self.prior.ids.to_pylist()
        insert = np.flatnonzero(self.prior.n_shingles > 0)
        self._global.update((prior_ids[i], int(i)) for i in insert)
        index.insert_many((prior_ids[i] for i in insert), self.prior.signatures[insert])

    def run(
        self,
        order: np.ndarray,
        ids: list[str],
        signatures: np.ndarray,
        rank: np.ndarray,
        shingles: ShingleStore | None = None,
    ) -> NearOutcome:
        """Visit `order` (row indices, best first; only rows with shingles) and decide each."""
        s = self.settings
        n_prior = len(self.prior)
        out = NearOutcome(np.full(len(ids), -1, np.int64), np.full(len(ids), np.nan, np.float32))
        exact = s.verify == "exact" and shingles is not None
        for row in order.tolist():
            sig = signatures[row]
            lean = self.index.minhasher.lean_minhash(sig)
            keys = self.index.query(lean)
            out.queries += 1
            if keys:
                best, best_sim = self._best_candidate(
                    row, sig, keys, signatures, rank, shingles if exact else None, out
                )
                if best >= 0:
                    out.target[row] = best
                    out.similarity[row] = best_sim
                    if shingles is not None:
                        shingles.release(row)  # removed: never a candidate again
                    continue
            key = ids[row]
            if key in self._global:  # the same id twice in the input, with identical text
                out.target[row] = self._global[key]
                out.similarity[row] = 1.0
                continue
            self.index.insert(key, lean)
            self._global[key] = n_prior + row
        return out

    def _best_candidate(
        self,
        row: int,
        sig: np.ndarray,
        keys: list,
        signatures: np.ndarray,
        rank: np.ndarray,
        shingles: ShingleStore | None,
        out: NearOutcome,
    ) -> tuple[int, float]:
        glob = []
        for k in keys:
            g = self._global.get(k)
            if g is None:
                out.unknown_candidates += 1
            else:
                glob.append(g)
        return best_candidate(self.settings, self.prior, row, sig, glob, signatures, rank, shingles, out)


def keys_of_document(docs: np.ndarray, keys: np.ndarray, doc: int) -> np.ndarray:
    """The keys of `doc` among (document, key) pairs sorted by document (the bucketed MinHash and the
    SimHash greedy passes). The needles take the pairs' dtype: a Python list (int64) made numpy cast
    every int32 pair to int64 on each call, O(pairs) per document (90% of the 16x corpus's 792 s
    dedup stage)."""
    a, b = np.searchsorted(docs, np.array([doc, doc + 1], docs.dtype))
    return keys[a:b]


def best_candidate(
    settings: NearSettings,
    prior: AcceptedSignatures,
    row: int,
    sig: np.ndarray,
    glob: list[int],
    signatures: np.ndarray,
    rank: np.ndarray,
    shingles: ShingleStore | None,
    out: NearOutcome,
) -> tuple[int, float]:
    """The accepted document (global index) `row` duplicates, and the similarity, or (-1, nan):
    the `max_candidates` best-priority candidates of `glob` (accepted documents sharing a band),
    verified as settings say, the most similar one that passes."""
    n_prior = len(prior)
    if not glob:
        return -1, float("nan")
    cand = np.array(glob, dtype=np.int64)
    # best-priority candidates first (earlier runs' documents, then this run's by rank)
    prio = np.where(cand < n_prior, cand - n_prior, rank[np.maximum(cand - n_prior, 0)])
    cand = cand[np.argsort(prio, kind="stable")][: settings.max_candidates]
    out.candidates += len(cand)
    is_prior = cand < n_prior
    cand_sigs = np.where(
        is_prior[:, None],
        prior.signatures[np.minimum(cand, max(n_prior - 1, 0))] if n_prior else 0,
        signatures[np.maximum(cand - n_prior, 0)],
    )
    sims = (cand_sigs == sig[None, :]).mean(axis=1)
    if shingles is not None:
        mine = shingles.get(row)
        for j in np.flatnonzero(~is_prior):
            sims[j] = exact_jaccard(mine, shingles.get(int(cand[j] - n_prior)))
    if settings.verify == "none":
        ok = np.ones(len(cand), dtype=bool)
    else:
        ok = sims >= settings.threshold
    out.rejected += int((~ok).sum())
    if not ok.any():
        return -1, float("nan")
    j = int(np.flatnonzero(ok)[np.argmax(sims[ok])])  # most similar; ties: best priority
    return int(cand[j]), float(sims[j])
