"""The dedup stage as one object: feed record batches, get decisions, duplicates and artifacts.

    dedup = Deduplicator(settings, accepted=None)      # or the previous run's AcceptedSignatures
    for batch in batches_of_all_cleaned_partitions:    # pass 1: ~600 B kept per document
        dedup.add_batch(batch)                         # or .add_keys(stored keys): document_keys.py
    result = dedup.finish()
    for batch in the_same_batches:                     # pass 2: any order, any batching
        kept, excluded = result.filter_batch(batch)

The per-document work (shingles, signatures, exact keys, keep-policy values) is DocumentKeyer's,
pure per batch; this object holds what the global decisions need and makes them in `finish()`.
Memory is bounded by the batch for text and by ~100 bytes per document otherwise (id, source, text
hash) with `near.storage.type: disk`, whose signatures wait in a file (signature_spill.py; ~600 B
with the 512-byte signature in memory otherwise), plus 4 bytes per shingle of this run for `verify:
exact` in memory (a spill file and a bounded cache on disk), plus 16 bytes per image document (its
phash and row number) for perceptual-hash dedup (image_near.py).
"""

from __future__ import annotations

__all__ = ["DECISIONS_SCHEMA", "DUPLICATES_SCHEMA", "EXACT", "EXCLUSIONS_SCHEMA", "NEAR", "NEAR_IMAGE", "NEAR_SIMHASH",
           "DedupCounts", "DedupResult", "Deduplicator", "deduplicate"]

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from platform_assets.contracts import DEFAULT_IO
from platform_assets.dedup.band_buckets import BandBuckets, BucketedNearDedup, ShingleSpill, SpillDir
from platform_assets.dedup.batch_slices import text_row_slices
from platform_assets.dedup.clusters import UnionFind, removed_per_source
from platform_assets.dedup.document_keys import DocumentKeyer, shingle_lists, signature_matrix
from platform_assets.dedup.exact import TEXT_HASH_TYPE, first_of_each_hash
from platform_assets.dedup.image_near import near_duplicate_links, similarity
from platform_assets.dedup.keep_lookup import IdHashes, KeepLookup
from platform_assets.dedup.keep_policy import priority_order, ranks
from platform_assets.dedup.lsh_shape import lsh_shape
from platform_assets.dedup.near_dedup import GreedyNearDedup, ShingleStore
from platform_assets.dedup.result import (  # re-exported: callers import them from here
    DECISIONS_SCHEMA,
    DUPLICATES_SCHEMA,
    EXACT,
    EXCLUSIONS_SCHEMA,
    NEAR,
    NEAR_IMAGE,
    NEAR_SIMHASH,
    DedupCounts,
    DedupResult,
    exclusions_table,
)
from platform_assets.dedup.settings import DedupSettings
from platform_assets.dedup.signature_spill import SignatureSpill
from platform_assets.dedup.signature_store import (
    ARTIFACT_ROW_GROUP_ROWS,
    AcceptedSignatures,
    TakenSignatures,
    artifact_row_groups,
)
from platform_assets.dedup.simhash import simhash_near_pass


class Deduplicator:
    def __init__(self, settings: DedupSettings, accepted: AcceptedSignatures | None = None,
                 band_keys_given: bool = False):
        """band_keys_given: `storage: disk` with MinHash takes its shared band keys from `finish(band_keys=...)`
        (the dedup_band_buckets partitions, band_partitions.py) instead of grouping band records here."""
        self.settings = settings
        self._band_keys_given = band_keys_given
        self._band_keys: tuple[np.ndarray, np.ndarray] | None = None
        near = settings.near
        self.keyer = DocumentKeyer(settings)
        self.minhasher, self.simhasher = self.keyer.minhasher, self.keyer.simhasher
        self._width = near.signature_width()  # MinHash slots, or a SimHash fingerprint's 2 words
        self.prior = accepted if accepted is not None else AcceptedSignatures.empty(self._width)
        self._ids: list[pa.Array] = []
        self._sources: list[pa.Array] = []
        self._prio: list[pa.Array] = []
        self._hashes: list[pa.Array] = []
        self._sigs: list[np.ndarray] = []
        self._n_shingles: list[np.ndarray] = []
        self._store: ShingleStore | ShingleSpill | None = None
        self._buckets: BandBuckets | None = None
        self._spill: SpillDir | None = None
        self._sig_spill: SignatureSpill | None = None  # storage: disk with MinHash: the signatures on disk
        if near.enabled and near.storage.type == "disk":
            self._spill = SpillDir(near.storage.spill_dir)
            if self.simhasher is None:  # SimHash's 8 B fingerprints stay in memory: its tables read them all
                self._sig_spill = SignatureSpill(self._spill.path, self._width)
            if self.simhasher is None and not band_keys_given:  # SimHash builds its tables in finish()
                bands, rows = lsh_shape(near)
                self._buckets = BandBuckets(self._spill.path, bands, rows, near.storage.partitions)
                self._buckets.add(0, self.prior.signatures, self.prior.n_shingles > 0)
            if near.verify == "exact":
                self._store = ShingleSpill(self._spill.path, near.storage.shingle_cache_bytes)
        elif near.enabled and near.verify == "exact":
            self._store = ShingleStore()
        self._rows = 0
        self._finished = False
        self._image_rows: list[np.ndarray] = []  # row numbers of image documents with a phash
        self._phashes: list[np.ndarray] = []

    def add_batch(self, batch: pa.RecordBatch | pa.Table) -> None:
        """Documents (the cleaned documents schema): their keys computed here, from the text."""
        self._check_open()
        for piece in text_row_slices(batch, self.settings.slice_bytes):  # same arrays as the whole batch
            if piece.num_rows:
                self.add_keys(self.keyer.keys(piece, self._rows))

    def add_keys(self, keys: pa.RecordBatch | pa.Table) -> None:
        """Documents as their keys (document_keys.py), computed by `add_batch` or stored by
        `dedup_signatures`: the decisions are the same either way, for any batching."""
        self._check_open()
        n = keys.num_rows
        if n == 0:
            return
        self._ids.append(_plain(keys.column("id"), pa.string()))
        self._sources.append(_plain(keys.column("source"), pa.string()))
        self._prio.append(_plain(keys.column("priority"), pa.float64()))
        self._hashes.append(_plain(keys.column("text_hash"), TEXT_HASH_TYPE))
        # kept even when dedup.images is off: the accepted artifact carries them for a later run
        phash = _plain(keys.column("phash"), pa.uint64())
        if phash.null_count < n:
            rows = np.flatnonzero(phash.is_valid().to_numpy(zero_copy_only=False))
            self._image_rows.append(rows.astype(np.int64) + self._rows)
            self._phashes.append(phash.fill_null(0).to_numpy(zero_copy_only=False).astype(np.uint64)[rows])
        first = len(self.prior) + self._rows  # global number of the batch's first document
        self._rows += n
        sigs = signature_matrix(keys, self._width)
        n_sh = keys.column("n_shingles").to_numpy(zero_copy_only=False).astype(np.int32)
        if self._sig_spill is not None:
            self._sig_spill.add(sigs)
        else:
            self._sigs.append(sigs)
        self._n_shingles.append(n_sh)
        if self._store is not None:
            self._store.add_top32(*shingle_lists(keys))
        if self._buckets is not None:
            self._buckets.add(first, sigs, n_sh > 0)

    def finish(self, band_keys: tuple[np.ndarray, np.ndarray] | None = None,
               write_accepted: Callable[[pa.Schema, Iterator[pa.Table]], None] | None = None,
               decisions: bool = True) -> DedupResult:
        """band_keys: (document, key) of every band value two fed documents (or earlier runs' accepted
        ones) share, documents numbered globally; required when constructed with band_keys_given.

        write_accepted: called with the accepted-signature artifact's schema and its row groups
        (ARTIFACT_ROW_GROUP_ROWS rows) before the spill files are removed; the result's `accepted` is
        then None. With spilled signatures only a row group of them is read at a time.
        decisions: False leaves the result's `decisions` table out (the stage writes the removed
        documents' tables and filters by the keep lookup, never reading it)."""
        self._check_open()
        if self._band_keys_given and self._spill is not None and self.simhasher is None and band_keys is None:
            raise ValueError("this Deduplicator takes its shared band keys from finish(band_keys=...)")
        self._band_keys = band_keys
        self._finished = True
        s = self.settings
        n_prior = len(self.prior)
        ids = _concat(self._ids, pa.string())
        sources = _concat(self._sources, pa.string())
        hashes = _concat(self._hashes, TEXT_HASH_TYPE)
        n = len(ids)
        # storage: disk reads rows back per candidate and for the kept rows only (signature_spill.py)
        sigs = self._sig_spill if self._sig_spill is not None else (
            np.concatenate(self._sigs) if self._sigs else np.empty((0, self._width), np.uint32))
        n_sh = np.concatenate(self._n_shingles) if self._n_shingles else np.empty(0, np.int32)
        prio = _concat(self._prio, pa.float64())
        # the per-slice pieces are copied into the arrays above: released now, not when the caller drops
        # this object (the stage keeps it through the write pass: 512 B of signature per document twice)
        self._ids, self._sources, self._hashes, self._sigs, self._n_shingles, self._prio = [], [], [], [], [], []
        counts = DedupCounts(documents=n, without_shingles=int((n_sh == 0).sum()) if s.near.enabled else n)
        id_hashes = IdHashes(ids)  # 16 B a document: distinct ids counted, and the write pass's lookup
        order = priority_order(prio, ids, sources, s.keep)
        rank = ranks(order)

        # every link goes from a removed row to the (global) index of the document it duplicates
        links = _Links(np.full(n, -1, np.int64), np.full(n, np.nan, np.float32), np.zeros(n, np.int8))
        if s.exact.enabled and n:
            self._exact_links(hashes, order, rank, links)
        try:
            if s.near.enabled and n:
                self._near_links(ids, sigs, n_sh, order, rank, links, counts, id_hashes.distinct == n)
            self._release_near_state()  # shingles, band keys: not needed for the rest
            image_rows = np.concatenate(self._image_rows) if self._image_rows else np.empty(0, np.int64)
            phashes = np.concatenate(self._phashes) if self._phashes else np.empty(0, np.uint64)
            self._image_rows, self._phashes = [], []
            counts.images = len(image_rows)
            if s.images.enabled and len(image_rows):
                self._image_links(image_rows, phashes, rank, links, counts)
            root = self._resolve_clusters(rank, links)

            keep = links.target < 0
            kept_roots = root[keep] == n_prior + np.flatnonzero(keep)  # filter_batch relies on it
            if not kept_roots.all():
                raise RuntimeError(f"{int((~kept_roots).sum())} kept documents are not their cluster's root")
            del kept_roots
            tables = self._tables(ids, sources, order, root, keep, links, decisions)
            kept_rows = order[keep[order]]  # this run's accepted documents, in keep-policy order
            if id_hashes.distinct < n:  # an id read twice is accepted once
                kept_rows = kept_rows[_first_occurrence(ids, kept_rows)]
            if write_accepted is not None:
                # the stage's artifact: this run's accepted rows taken a row group at a time (the spilled
                # signatures read from the spill file before close() removes it)
                taken = TakenSignatures(ids, sources, hashes, n_sh, sigs, kept_rows,
                                        partial(_phashes_of, image_rows=image_rows, phashes=phashes))
                write_accepted(*artifact_row_groups([self.prior, taken], s, ARTIFACT_ROW_GROUP_ROWS))
                accepted = None
            else:  # a caller that keeps the result: all at once
                take = pa.array(kept_rows, pa.int64())
                accepted = self.prior.extended(
                    AcceptedSignatures(
                        pc.take(ids, take),
                        pc.take(sources, take),
                        pc.take(hashes, take),
                        n_sh[kept_rows],
                        sigs.take(kept_rows) if isinstance(sigs, SignatureSpill) else sigs[kept_rows],
                        _phashes_of(kept_rows, image_rows, phashes),
                    )
                )
            del sigs
        finally:
            self.close()
        removed = ~keep
        counts.kept = int(keep.sum())
        counts.removed_exact = int((links.rule == 1).sum())
        counts.removed_near = int(((links.rule == 2) | (links.rule == 4)).sum())
        counts.removed_near_image = int((links.rule == 3).sum())
        counts.removed_against_earlier_runs = int((root[removed] < n_prior).sum())
        counts.duplicate_ids = n - id_hashes.distinct
        return DedupResult(tables.decisions, tables.duplicates, accepted, counts, KeepLookup(ids, keep, id_hashes),
                           tables.exclusions, tables.per_source)

    def _check_open(self) -> None:
        if self._finished:
            raise RuntimeError("this Deduplicator has finished: its per-document state is released; "
                               "start a new one to deduplicate again")

    def _release_near_state(self) -> None:
        if isinstance(self._store, ShingleSpill):
            self._store.close()
        self._store = self._buckets = self._band_keys = None  # `verify: exact` in memory: 4 B per shingle

    def close(self) -> None:
        """Remove the spill files (storage: disk); finish() does it, a caller that gives up may."""
        self._release_near_state()
        if self._sig_spill is not None:
            self._sig_spill.close()
            self._sig_spill = None
        if self._spill is not None:
            self._spill.close()
            self._spill = None

    def _exact_links(self, hashes: pa.Array, order: np.ndarray, rank: np.ndarray, links: _Links) -> None:
        """Same normalised text: link to the best-ranked row, or to an earlier run's document."""
        n_prior = len(self.prior)
        best = first_of_each_hash(hashes, rank)
        dup = best != rank
        links.target[dup] = n_prior + order[best[dup]]
        if n_prior:
            found = pc.index_in(hashes, value_set=self.prior.text_hashes, skip_nulls=True)
            hit = found.is_valid().to_numpy(zero_copy_only=False)
            links.target[hit] = found.filter(found.is_valid()).to_numpy().astype(np.int64)
        exact = links.target >= 0
        links.rule[exact] = 1
        links.similarity[exact] = 1.0

    def _near_links(
        self,
        ids: pa.StringArray,
        sigs: np.ndarray | SignatureSpill,
        n_sh: np.ndarray,
        order: np.ndarray,
        rank: np.ndarray,
        links: _Links,
        counts: DedupCounts,
        ids_unique: bool,
    ) -> None:
        """Greedy LSH (or SimHash) pass over the rows exact dedup kept that have shingles, best first.
        ids_unique: no id of this run repeats (earlier runs' accepted ids are checked here)."""
        eligible = (links.target < 0) & (n_sh > 0)
        rule = 2
        if self.simhasher is not None:
            out, blocks = simhash_near_pass(self.settings.near, self.prior, sigs, eligible, order, ids.to_pylist(),
                                            rank, self._store)
            counts.simhash_blocks, counts.simhash_tables, rule = blocks.blocks, len(blocks.tables), 4
        elif self._buckets is not None or self._band_keys is not None:  # storage: disk
            counts.lsh_bands, counts.lsh_rows = lsh_shape(self.settings.near)
            keys = self._band_keys if self._band_keys is not None else self._buckets.shared_keys()
            self._band_keys = None  # the greedy pass keeps them sorted its own way
            # an id seen twice (this run's, or an earlier run's accepted one) needs an id -> document map
            if ids_unique and len(self.prior):
                all_ids = pa.concat_arrays([self.prior.ids, ids])
                ids_unique = IdHashes(all_ids).distinct == len(all_ids)
                del all_ids
            greedy = BucketedNearDedup(self.settings.near, self.prior, keys, ids_unique=ids_unique)
            del keys
            # ids are read only for documents that share a band value (14% on the real corpus): a list
            # of them all was ~90 B per document
            out = greedy.run(order[eligible[order]], _ArrowIds(ids), sigs, rank, self._store)
        else:
            # datasketch's index: imported only here, the default `disk` storage does not need it
            from platform_assets.dedup.lsh_index import LshIndex

            index = LshIndex(self.settings.near, self.minhasher)
            counts.lsh_bands, counts.lsh_rows = index.bands, index.rows
            greedy = GreedyNearDedup(self.settings.near, index, self.prior)
            out = greedy.run(order[eligible[order]], ids.to_pylist(), sigs, rank, self._store)
        near = out.target >= 0
        links.target[near] = out.target[near]
        links.similarity[near] = out.similarity[near]
        links.rule[near] = rule
        counts.lsh_queries, counts.lsh_candidates = out.queries, out.candidates
        counts.rejected_by_verification = out.rejected
        counts.unknown_candidates = out.unknown_candidates

    def _prior_phashes(self) -> tuple[np.ndarray, np.ndarray]:
        """(global index, phash) of earlier runs' accepted documents that have a phash."""
        if self.prior.phashes is None:
            return np.empty(0, np.int64), np.empty(0, np.uint64)
        ph = self.prior.phashes
        at = np.flatnonzero(ph.is_valid().to_numpy(zero_copy_only=False))
        return at, ph.fill_null(0).to_numpy(zero_copy_only=False).astype(np.uint64)[at]

    def _image_links(
        self, rows: np.ndarray, phashes: np.ndarray, rank: np.ndarray, links: _Links, counts: DedupCounts
    ) -> None:
        """Images within max_distance of a better kept image (or an earlier run's one): greedy over
        distinct hashes in keep-policy order (image_near.py). Rows exact dedup removed take no part:
        they follow the copy they were linked to."""
        n_prior = len(self.prior)
        eligible = links.target[rows] < 0
        rows, phashes = rows[eligible], phashes[eligible]
        prior_at, prior_ph = self._prior_phashes()
        glob = np.concatenate([prior_at, rows + n_prior])
        # earlier runs' documents are preferred to any new one (negative priorities), as in _resolve_clusters
        priority = np.concatenate([prior_at - n_prior, rank[rows]])
        fixed = np.arange(len(glob)) < len(prior_at)
        out = near_duplicate_links(np.concatenate([prior_ph, phashes]), priority,
                                   self.settings.images.max_distance, fixed)
        counts.image_bands, counts.image_tables = out.bands, out.tables
        counts.image_candidates, counts.image_pairs = out.candidates, out.pairs
        hit = np.flatnonzero(out.target >= 0)
        r = glob[hit] - n_prior  # never an earlier run's document: those are fixed
        links.target[r] = glob[out.target[hit]]
        links.similarity[r] = similarity(out.distance[hit])
        links.rule[r] = 3

    def _resolve_clusters(self, rank: np.ndarray, links: _Links) -> np.ndarray:
        """Kept document (global index) of every row: union-find rooted at the best member."""
        n_prior = len(self.prior)
        priority = np.concatenate([np.arange(n_prior, dtype=np.int64) - n_prior, rank])
        uf = UnionFind(priority)
        rows = np.flatnonzero(links.target >= 0)
        via = links.target[rows]
        uf.union_many(rows + n_prior, via)
        # an exact copy of a document that was itself removed as a near duplicate (text or image)
        # inherits that document's similarity to the kept one
        second = np.zeros(len(rows), dtype=bool)
        current = via >= n_prior
        second[current] = links.rule[via[current] - n_prior] >= 2
        links.similarity[rows[second]] = links.similarity[via[second] - n_prior]
        return uf.roots()[n_prior:]

    def _tables(self, ids: pa.Array, sources: pa.Array, order: np.ndarray, root: np.ndarray, keep: np.ndarray,
                links: _Links, with_decisions: bool) -> _Tables:
        """The removed documents' tables (duplicates, exclusions), the per-source counts, and the whole
        decisions table if asked: a removed row's cluster is its kept document's id, a kept row's its own."""
        n_prior = len(self.prior)
        all_ids = pa.concat_arrays([self.prior.ids, ids]) if n_prior else ids
        all_sources = pa.concat_arrays([self.prior.sources, sources]) if n_prior else sources
        rule_names = pa.array(np.array([None, EXACT, NEAR, NEAR_IMAGE, NEAR_SIMHASH], dtype=object)[links.rule],
                              pa.string())
        sim = pa.array(links.similarity, pa.float32(), from_pandas=True)  # NaN -> null for kept rows
        per_source = removed_per_source(pa.table({"source": sources, "rule": rule_names}))
        decisions = None
        if with_decisions:
            cluster_id = pc.take(all_ids, pa.array(root, pa.int64()))
            kept_id = pc.if_else(pa.array(keep), pa.scalar(None, pa.string()), cluster_id)
            decisions = pa.table(
                [ids, sources, pa.array(keep), rule_names, cluster_id, kept_id, sim], schema=DECISIONS_SCHEMA
            ).take(pa.array(order, pa.int64()))
            del cluster_id, kept_id
        # the removed rows in keep-policy order (the exclusions' order), and ascending (the duplicates')
        by_policy = order[~keep[order]]
        excl_rows = pa.array(by_policy, pa.int64())
        exclusions = exclusions_table(pc.take(ids, excl_rows), pc.take(rule_names, excl_rows),
                                      pc.take(all_ids, pa.array(root[by_policy], pa.int64())),
                                      pc.take(sim, excl_rows))
        removed = np.flatnonzero(~keep)
        r = pa.array(removed, pa.int64())
        cluster_of_removed = pc.take(all_ids, pa.array(root[removed], pa.int64()))
        duplicates = pa.table(
            [
                cluster_of_removed,
                cluster_of_removed,
                pc.take(all_sources, pa.array(root[removed], pa.int64())),
                pc.take(ids, r),
                pc.take(sources, r),
                pc.take(sim, r),
                pc.take(rule_names, r),
                pa.array(root[removed] < n_prior),
            ],
            schema=DUPLICATES_SCHEMA,
        ).sort_by([("cluster_id", "ascending"), ("removed_id", "ascending"), ("removed_source", "ascending")])
        return _Tables(decisions, duplicates, exclusions, per_source)


@dataclass
class _Tables:
    decisions: pa.Table | None
    duplicates: pa.Table
    exclusions: pa.Table
    per_source: pa.Table


class _ArrowIds(Sequence[str]):
    """`ids[row]` as str, read from the Arrow array on demand."""

    def __init__(self, ids: pa.StringArray):
        self._ids = ids

    def __len__(self) -> int:
        return len(self._ids)

    def __getitem__(self, row):  # an int (a slice too, as Sequence promises)
        if isinstance(row, slice):
            return self._ids[row].to_pylist()
        return self._ids[row].as_py()


@dataclass
class _Links:
    target: np.ndarray  # int64: -1, or the global index of the document a row duplicates
    similarity: np.ndarray  # float32, NaN where no link
    rule: np.ndarray  # int8: 0 kept, 1 exact, 2 near (MinHash), 3 near image, 4 near (SimHash)


def _phashes_of(rows: np.ndarray, image_rows: np.ndarray, phashes: np.ndarray) -> pa.UInt64Array | None:
    """The phash of each of `rows` (null where none); None when this run has no image with one."""
    if len(image_rows) == 0:
        return None
    at = np.minimum(np.searchsorted(image_rows, rows), len(image_rows) - 1)  # image_rows is ascending
    found = image_rows[at] == rows
    return pa.array(np.where(found, phashes[at], 0).astype(np.uint64), pa.uint64(), mask=~found)


def _first_occurrence(ids: pa.Array, rows: np.ndarray) -> np.ndarray:
    """Positions j of `rows` whose id is not that of an earlier row (ids repeat only where the input
    has the same id twice). Arrow, not a Python set of the ids: that was ~100 B per kept document."""
    kept_ids = pc.take(ids, pa.array(rows, pa.int64()))
    if pc.count_distinct(kept_ids).as_py() == len(kept_ids):
        return np.arange(len(rows), dtype=np.int64)
    firsts = pa.table({"id": kept_ids, "j": np.arange(len(rows), dtype=np.int64)}).group_by(
        "id", use_threads=False).aggregate([("j", "min")])
    return np.sort(firsts["j_min"].to_numpy())


def _plain(col: pa.Array | pa.ChunkedArray, typ: pa.DataType) -> pa.Array:
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks()
    return col.cast(typ) if col.type != typ else col


def _concat(parts: list[pa.Array], typ: pa.DataType) -> pa.Array:
    return pa.concat_arrays(parts) if parts else pa.array([], typ)


def deduplicate(
    table: pa.Table, settings: DedupSettings, accepted: AcceptedSignatures | None = None,
    batch_rows: int = DEFAULT_IO.batch_rows,
) -> tuple[pa.Table, DedupResult]:
    """One-shot helper for in-memory tables: (kept documents with cluster_id, result)."""
    dedup = Deduplicator(settings, accepted)
    for batch in table.to_batches(max_chunksize=batch_rows):
        dedup.add_batch(batch)
    result = dedup.finish()
    return result.filter_batch(table), result
