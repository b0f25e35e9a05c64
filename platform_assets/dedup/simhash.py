"""SimHash near dedup (`dedup.near.method: simhash`): 64-bit fingerprints, pairs within a Hamming
distance, the same greedy decision as the MinHash path.

Fingerprint (Charikar 2002, as Manku, Jain & Das Sarma 2007 use it for web pages): every occurrence of
a shingle (the shingles MinHash sees, shingles.py; a shingle repeated 3 times counts 3 times: term
frequency weighting) votes +1 or -1 on each of 64 bits by the bits of its seeded 64-bit hash; bit b of
the fingerprint is 1 where the +1 votes are a strict majority. Two documents differ on a bit with
probability angle/pi of their term-frequency vectors: 3 bits of 64 is a cosine of ~0.99.

Vectorised over a whole slice of documents: the hashes' bits are unpacked (one byte per bit) and
summed per document with `np.add.reduceat` over uint64 words holding 8 byte lanes (8 additions per
shingle instead of 64); a lane cannot carry into the next while it sums at most 255 shingles, so the
sums go over runs of <= 255 shingles and are widened to int32 per document afterwards: 3.5 us per
~2 KB real document (244 shingles) on top of the shingles' ~15 us, where 128 one-permutation MinHash
slots take 1.35 us; a plain int32 reduceat over the unpacked bits is 4x slower (22 vs 5.3 ms per 1.7e5).

Pairs (Manku et al.'s block tables): cut the 64 bits into `blocks` contiguous blocks; two
fingerprints within distance k differ in at most k blocks, so they agree on at least blocks - k of
them: one table per combination of blocks - k blocks (the key: those blocks' bits) holds every such
pair (image_near.py does the same for perceptual hashes). As band_buckets.py does for MinHash bands,
each table is sorted once and only its keys held by two or more documents are kept: (document, key).
The greedy pass (near_dedup.py's, over the keep-policy order) gives a document as candidates the
accepted documents sharing one of its keys, keeps those within k (the popcount of the XOR), verifies
the nearest `max_candidates` by exact Jaccard when `verify: exact`, and links it to the nearest that
passes (ties: the better-ranked). So the result never depends on `blocks`, only the time does, and
as with MinHash a cluster of 5,000 near copies leaves one accepted document for the others to meet.

Memory: 8 B per document (the fingerprint, in memory for the whole run: 80 MB at 10 M documents,
vs 512 B for 128 MinHash slots), ~40 B per document while one table is sorted, 16 B per shared
(document, key), and, with `verify: exact`, the shingles as the MinHash path keeps them (in memory,
or spilled with `storage.type: disk`).
"""

from __future__ import annotations

from collections import defaultdict
from itertools import combinations
from math import comb, exp
from typing import TYPE_CHECKING

import numpy as np

from platform_assets.dedup.hash64 import fmix64_inplace, seed_key
from platform_assets.dedup.image_near import band_bounds
from platform_assets.dedup.minhash import exact_jaccard
from platform_assets.dedup.near_dedup import NearOutcome, ShingleStore, keys_of_document
from platform_assets.dedup.settings import MAX_SIMHASH_TABLES, NearSettings
from platform_assets.dedup.shingles import ShingleBatch
from platform_assets.dedup.signature_store import AcceptedSignatures

if TYPE_CHECKING:
    from platform_assets.dedup.band_buckets import ShingleSpill

__all__ = ["SIMHASH_BITS", "SimHasher", "SimHashBlocks", "GreedySimHashDedup", "fingerprints_of",
           "hamming", "signature_words", "similarity", "simhash_near_pass"]

SIMHASH_BITS = 64
_SEED_SALT = 2  # minhash.py keys its hashes with salts 0 and 1 of the same seed
_LANE_MAX = 255  # shingles one uint8 lane may sum without carrying into the next
_CHUNK_SHINGLES = 1 << 16  # unpacked bits per pass: 64 B per shingle, 4 MB (stays in cache)


class SimHasher:
    """64-bit SimHash fingerprints of documents from their shingle hashes; the seed fixes them."""

    def __init__(self, seed: int = 1):
        self.seed = seed
        self._key = seed_key(seed, _SEED_SALT)

    def fingerprints(self, shingles: ShingleBatch) -> np.ndarray:
        """uint64 per document; 0 for a document without shingles (never compared: n_shingles 0)."""
        out = np.zeros(shingles.n_docs, np.uint64)
        if len(shingles.hashes) == 0:
            return out
        # the shingle hashes fold token hashes; one more seeded fmix64 makes every bit a fair coin
        h = fmix64_inplace(shingles.hashes ^ self._key).astype("<u8", copy=False)
        counts = shingles.counts
        has = counts > 0
        ones = _bit_counts(h, shingles.offsets[:-1][has], counts[has])
        majority = 2 * ones > counts[has, None]  # ties (as many -1 as +1 votes) give 0
        out[has] = np.packbits(majority, axis=1, bitorder="little").view("<u8").reshape(-1)
        return out


def _bit_counts(h: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """(documents, 64) int32: per document (starts/lengths into h, all non-empty, back to back), how
    many of its hashes have bit b set."""
    runs = (lengths + _LANE_MAX - 1) // _LANE_MAX  # runs of <= 255 shingles per document
    first_run = np.cumsum(runs) - runs
    run_starts = np.repeat(starts, runs) + (np.arange(int(runs.sum())) - np.repeat(first_run, runs)) * _LANE_MAX
    bounds = np.append(run_starts, starts[-1] + lengths[-1])
    partial = np.empty((len(run_starts), 8), np.uint64)  # 8 lanes of 8 bits: one byte per hash bit
    p0 = 0
    while p0 < len(run_starts):
        # whole runs, about _CHUNK_SHINGLES shingles (at least one run)
        p1 = max(p0 + 1, int(np.searchsorted(bounds, bounds[p0] + _CHUNK_SHINGLES, side="right")) - 1)
        a, b = int(bounds[p0]), int(bounds[p1])
        bits = np.unpackbits(h[a:b].view(np.uint8).reshape(-1, 8), axis=1, bitorder="little")  # byte i = bit i
        partial[p0:p1] = np.add.reduceat(bits.view(np.uint64), run_starts[p0:p1] - a, axis=0)
        p0 = p1
    return np.add.reduceat(partial.view(np.uint8), first_run, axis=0, dtype=np.int32)


def hamming(a: np.ndarray | np.uint64, b: np.ndarray | np.uint64) -> np.ndarray:
    """Bits that differ between uint64 fingerprints (element-wise, broadcast)."""
    return np.bitwise_count(np.bitwise_xor(a, b, dtype=np.uint64)).astype(np.int64)


def similarity(distance: np.ndarray | int) -> np.ndarray:
    """1 - distance/64 as float32 (exact: a dyadic fraction), as image_near.similarity."""
    return (1.0 - np.asarray(distance, np.float32) / SIMHASH_BITS).astype(np.float32)


def signature_words(fps: np.ndarray) -> np.ndarray:
    """Fingerprints as the artifact's (n, 2) uint32 signature rows: low word, high word."""
    fps = np.ascontiguousarray(fps, dtype="<u8")
    return fps.view("<u4").reshape(-1, 2).astype(np.uint32)


def fingerprints_of(signatures: np.ndarray) -> np.ndarray:
    """The inverse of signature_words: (n, 2) uint32 -> n uint64."""
    words = np.ascontiguousarray(signatures, dtype="<u4").reshape(-1, 2)
    return words.view("<u8").reshape(-1).astype(np.uint64)


# Cost of the pass in ns, measured on 200k random fingerprints (2-core machine, 2026-11-26): sorting one
# table ~80 per document; a (document, shared key) pair ~3,000 (Python: key lookup, candidate set,
# insert); a candidate ~200 (set entry, XOR, popcount). At max_distance 3: 4 tables of 16-bit keys
# 3.2 s (762k shared keys, 1.2M candidates), 10 tables of ~26-bit keys 0.5 s (8k, 4k). Only speed
# depends on it: a 2x error moves the choice where both cost about the same.
_SORT_NS, _SHARED_KEY_NS, _CANDIDATE_NS = 80.0, 3000.0, 200.0


def expected_cost_ns(n: int, max_distance: int, key_blocks: int) -> float:
    """Cost model of the block tables + greedy pass for n uniformly random fingerprints: C(m, r)
    tables (m = max_distance + r blocks) with keys of 64 r / m bits; a document shares a key with
    probability 1 - exp(-n / 2^bits), and a table proposes ~n^2 / 2^(bits + 1) candidates."""
    m = max_distance + key_blocks
    buckets = 2.0 ** (SIMHASH_BITS * key_blocks / m)
    per_table = n * _SORT_NS + n * (1 - exp(-n / buckets)) * _SHARED_KEY_NS + n * n / 2 / buckets * _CANDIDATE_NS
    return comb(m, key_blocks) * per_table


def choose_key_blocks(n: int, max_distance: int) -> int:
    """Blocks per key (blocks - max_distance) cheapest for n documents, at most MAX_SIMHASH_TABLES
    tables: at max_distance 3, 1 (4 tables of 16-bit keys) below ~2.6k documents, 2 (10 tables of
    ~26 bits) up to ~1.4M, 3 (20 tables of ~32 bits) above."""
    options = [r for r in range(1, 5)
               if max_distance + r <= SIMHASH_BITS and comb(max_distance + r, r) <= MAX_SIMHASH_TABLES]
    return min(options, key=lambda r: (expected_cost_ns(n, max_distance, r), r))


class SimHashBlocks:
    """The block tables: (global document, key) for every block key two or more documents share."""

    def __init__(self, max_distance: int, blocks: int | None, n_docs: int):
        key_blocks = (blocks - max_distance) if blocks is not None else choose_key_blocks(n_docs, max_distance)
        self.max_distance = max_distance
        self.bounds = band_bounds(max_distance, key_blocks)  # (shift, width) of each block
        self.tables = list(combinations(range(len(self.bounds)), key_blocks))

    @property
    def blocks(self) -> int:
        return len(self.bounds)

    def shared_keys(self, docs: np.ndarray, fps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(document, key) pairs, keys dense ints unique over all tables, for the documents `docs`
        (global numbers) with fingerprints `fps`."""
        out_docs, out_keys = [], []
        next_key = 0
        fps = np.asarray(fps, np.uint64)
        if len(fps) < 2:
            return np.empty(0, np.int64), np.empty(0, np.int64)
        for combo in self.tables:
            key = np.zeros(len(fps), np.uint64)
            for b in combo:  # the combination's blocks side by side (at most 64 bits)
                shift, width = self.bounds[b]
                key <<= np.uint64(width)
                key |= (fps >> np.uint64(shift)) & np.uint64((1 << width) - 1)
            order = np.argsort(key, kind="stable")
            key = key[order]
            same = key[1:] == key[:-1]
            shared = np.zeros(len(key), dtype=bool)
            shared[1:] |= same
            shared[:-1] |= same
            if not shared.any():
                continue
            group = np.cumsum(np.concatenate(([True], ~same))) - 1  # one number per distinct key
            out_docs.append(docs[order[shared]].astype(np.int64))
            out_keys.append(group[shared].astype(np.int64) + next_key)
            next_key += int(group[-1]) + 1
        if not out_docs:
            return np.empty(0, np.int64), np.empty(0, np.int64)
        return np.concatenate(out_docs), np.concatenate(out_keys)


class GreedySimHashDedup:
    """The greedy pass of near_dedup.py over SimHash block keys.

    Global numbering as there: earlier runs' accepted documents 0..P-1 (all preferred to any new
    one), this run's rows P + row. Earlier runs' documents have no shingles here: they are matched on
    the distance alone (the MinHash path likewise uses the estimate for them)."""

    def __init__(self, settings: NearSettings, prior_fps: np.ndarray, prior_has: np.ndarray,
                 doc_keys: tuple[np.ndarray, np.ndarray]):
        self.settings = settings
        self.max_distance = settings.simhash.max_distance
        self._prior_fps = np.asarray(prior_fps, np.uint64)
        docs, keys = doc_keys
        order = np.argsort(docs, kind="stable")
        self._docs, self._keys = docs[order], keys[order]
        self._index: defaultdict[int, list[int]] = defaultdict(list)  # key -> accepted documents
        self._global: dict[str, int] = {}  # id -> global number, of accepted documents with keys
        for g in np.flatnonzero(prior_has).tolist():
            self._insert(g)

    def _keys_of(self, doc: int) -> np.ndarray:
        return keys_of_document(self._docs, self._keys, doc)

    def _insert(self, doc: int) -> bool:
        keys = self._keys_of(doc)
        for k in keys.tolist():
            self._index[k].append(doc)
        return bool(len(keys))

    def run(self, order: np.ndarray, ids: list[str], fps: np.ndarray, rank: np.ndarray,
            shingles: ShingleStore | ShingleSpill | None = None) -> NearOutcome:
        """Visit `order` (rows with shingles, best first) and decide each; similarity = 1 - d/64."""
        n_prior = len(self._prior_fps)
        out = NearOutcome(np.full(len(ids), -1, np.int64), np.full(len(ids), np.nan, np.float32))
        exact = self.settings.verify == "exact" and shingles is not None
        for row in order.tolist():
            out.queries += 1
            keys = self._keys_of(n_prior + row)
            if len(keys) == 0:  # no block shared with any document: nothing within the distance
                continue
            # sorted: the candidate list is a set, its order must not depend on insertion history
            glob = sorted({g for k in keys.tolist() for g in self._index.get(k, ())})
            best, dist = self._best(row, glob, fps, rank, shingles if exact else None, out)
            if best >= 0:
                out.target[row], out.similarity[row] = best, similarity(dist)
                if shingles is not None:
                    shingles.release(row)
                continue
            if ids[row] in self._global:  # the same id twice in the input, with identical text
                out.target[row], out.similarity[row] = self._global[ids[row]], 1.0
                continue
            if self._insert(n_prior + row):
                self._global[ids[row]] = n_prior + row
        return out

    def _best(self, row: int, glob: list[int], fps: np.ndarray, rank: np.ndarray,
              shingles: ShingleStore | ShingleSpill | None, out: NearOutcome) -> tuple[int, int]:
        """The accepted document (global) `row` duplicates and the distance, or (-1, -1)."""
        if not glob:
            return -1, -1
        n_prior = len(self._prior_fps)
        cand = np.array(glob, dtype=np.int64)
        is_prior = cand < n_prior
        cand_fps = np.where(is_prior, self._prior_fps[np.minimum(cand, max(n_prior - 1, 0))] if n_prior else 0,
                            fps[np.maximum(cand - n_prior, 0)])
        dist = hamming(cand_fps, fps[row])
        out.candidates += len(cand)
        near = dist <= self.max_distance
        out.rejected += int((~near).sum())
        cand, dist, is_prior = cand[near], dist[near], is_prior[near]
        if len(cand) == 0:
            return -1, -1
        # nearest first, then best priority (earlier runs' documents, then this run's by rank)
        prio = np.where(is_prior, cand - n_prior, rank[np.maximum(cand - n_prior, 0)])
        o = np.lexsort((prio, dist))[: self.settings.max_candidates]
        cand, dist, is_prior = cand[o], dist[o], is_prior[o]
        if shingles is None:
            return int(cand[0]), int(dist[0])
        mine = shingles.get(row)
        for j in range(len(cand)):
            if is_prior[j] or exact_jaccard(mine, shingles.get(int(cand[j] - n_prior))) >= self.settings.threshold:
                out.rejected += j
                return int(cand[j]), int(dist[j])
        out.rejected += len(cand)
        return -1, -1


def simhash_near_pass(settings: NearSettings, prior: AcceptedSignatures, signatures: np.ndarray,
                      eligible: np.ndarray, order: np.ndarray, ids: list[str], rank: np.ndarray,
                      shingles: ShingleStore | ShingleSpill | None) -> tuple[NearOutcome, SimHashBlocks]:
    """The stage's SimHash pass: block tables over earlier runs' accepted documents and this run's
    `eligible` rows (not exact duplicates, with shingles), then the greedy pass in `order`.
    `signatures` are this run's (n, 2) artifact rows (signature_words)."""
    n_prior = len(prior)
    fps = fingerprints_of(signatures)
    prior_fps = fingerprints_of(prior.signatures)
    prior_has = prior.n_shingles > 0
    docs = np.concatenate([np.flatnonzero(prior_has), np.flatnonzero(eligible) + n_prior])
    blocks = SimHashBlocks(settings.simhash.max_distance, settings.simhash.blocks, len(docs))
    doc_keys = blocks.shared_keys(docs, np.concatenate([prior_fps[prior_has], fps[eligible]]))
    greedy = GreedySimHashDedup(settings, prior_fps, prior_has, doc_keys)
    return greedy.run(order[eligible[order]], ids, fps, rank, shingles), blocks
