"""What a dedup run decides: the decision, duplicate and exclusion schemas, the counts, and
DedupResult, which filters the second pass's batches by the decisions (deduplicator.py makes it).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from platform_assets.contracts import Counts, exclusions_schema
from platform_assets.dedup.clusters import cluster_size_histogram, removed_per_source
from platform_assets.dedup.signature_store import AcceptedSignatures

EXACT = "exact_duplicate"
NEAR = "near_duplicate"
NEAR_IMAGE = "near_duplicate_image"  # perceptual hash within dedup.images.max_distance
NEAR_SIMHASH = "near_duplicate_simhash"  # near.method simhash: fingerprints within simhash.max_distance

DECISIONS_SCHEMA = pa.schema(
    [
        pa.field("id", pa.string(), nullable=False),
        pa.field("source", pa.string(), nullable=False),
        pa.field("keep", pa.bool_(), nullable=False),
        pa.field("rule", pa.string()),  # null, or one of exact_duplicate, near_duplicate(_image, _simhash)
        pa.field("cluster_id", pa.string(), nullable=False),  # id of the kept member (own id if kept)
        pa.field("kept_id", pa.string()),
        pa.field("similarity", pa.float32()),  # to the kept member; 1.0 for exact duplicates
    ]
)

DUPLICATES_SCHEMA = pa.schema(
    [
        pa.field("cluster_id", pa.string(), nullable=False),
        pa.field("kept_id", pa.string(), nullable=False),
        pa.field("kept_source", pa.string(), nullable=False),
        pa.field("removed_id", pa.string(), nullable=False),
        pa.field("removed_source", pa.string(), nullable=False),
        pa.field("similarity", pa.float32(), nullable=False),
        pa.field("rule", pa.string(), nullable=False),
        pa.field("kept_in_earlier_run", pa.bool_(), nullable=False),
    ]
)

# The shared exclusion columns (value: the similarity as text, "0.8125", or for SimHash the Hamming
# distance, "2"; bytes: null, dedup never loads the text it removes twice), then which document was
# kept and the similarity as a number.
EXCLUSIONS_SCHEMA = exclusions_schema("dedup", (
    pa.field("kept_id", pa.string(), nullable=False),
    pa.field("similarity", pa.float64(), nullable=True),
))


@dataclass
class DedupCounts(Counts):
    documents: int = 0
    kept: int = 0
    removed_exact: int = 0
    removed_near: int = 0
    without_shingles: int = 0  # empty or no word characters: only exact dedup applies
    duplicate_ids: int = 0  # rows whose id appeared before (the same document read twice)
    removed_against_earlier_runs: int = 0
    lsh_bands: int = 0
    lsh_rows: int = 0
    lsh_queries: int = 0
    lsh_candidates: int = 0
    rejected_by_verification: int = 0
    unknown_candidates: int = 0  # LSH keys without a local signature (other workers, shared Redis)
    images: int = 0  # image documents with a phash (exact duplicates included)
    removed_near_image: int = 0
    image_bands: int = 0
    image_tables: int = 0  # sorted passes of the band index (one per combination of key bands)
    image_candidates: int = 0  # pairs the band index proposed (distinct hashes, before the popcount)
    image_pairs: int = 0  # of those, within max_distance
    simhash_blocks: int = 0  # near.method simhash: blocks of the 64 bits, and tables (combinations)
    simhash_tables: int = 0


@dataclass
class DedupResult:
    decisions: pa.Table  # DECISIONS_SCHEMA, one row per input row, in keep-policy order
    duplicates: pa.Table  # DUPLICATES_SCHEMA, one row per removed document
    # earlier runs' + this run's kept documents: the next run's input; None once `hand_over_accepted`
    accepted: AcceptedSignatures | None
    counts: DedupCounts
    _keep_ids: pa.Array = field(init=False, repr=False)
    _keep_flag: np.ndarray = field(init=False, repr=False)
    _cluster: pa.Array = field(init=False, repr=False)
    _emitted: np.ndarray = field(init=False, repr=False)
    _excl: pa.Table = field(init=False, repr=False)

    def __post_init__(self) -> None:
        d = self.decisions
        if self.counts.duplicate_ids == 0:
            # every id once (the usual input): the decisions' own columns. The grouping below cost ~390 B
            # a document at its peak (Arrow's hash aggregation; 117 MB for 300k documents), the largest
            # per-document state of the decisions
            self._keep_ids = d["id"].combine_chunks()
            self._keep_flag = d["keep"].combine_chunks().to_numpy(zero_copy_only=False).astype(bool)
            self._cluster = d["cluster_id"].combine_chunks()
        else:
            # one decision per distinct id (an id read twice is the same document: kept once at most)
            g = pa.table({"id": d["id"], "keep": d["keep"].cast(pa.int8()), "cid": d["cluster_id"]})
            g = g.group_by("id", use_threads=False).aggregate([("keep", "max"), ("cid", "first")])
            self._keep_ids = g["id"].combine_chunks()
            self._keep_flag = g["keep_max"].to_numpy().astype(bool)
            self._cluster = g["cid_first"].combine_chunks()
        self._emitted = np.zeros(len(self._keep_ids), dtype=bool)
        removed = d.filter(pc.invert(d["keep"]))
        similarity = removed["similarity"].cast(pa.float64())
        value = [None if s is None else f"{round((1 - s) * 64)}" if r == NEAR_SIMHASH else f"{s:.4g}"
                 for s, r in zip(similarity.to_pylist(), removed["rule"].to_pylist(), strict=True)]
        self._excl = pa.table(
            {
                "id": removed["id"],
                "rule": removed["rule"],
                "value": pa.array(value, pa.string()),
                "bytes": pa.nulls(removed.num_rows, pa.int64()),
                "kept_id": removed["kept_id"],
                "similarity": similarity,
            },
            schema=EXCLUSIONS_SCHEMA,
        )

    def filter_batch(self, batch: pa.RecordBatch | pa.Table) -> pa.Table:
        """The batch's kept documents, with a `cluster_id` column (the kept member's id).

        Rows may come in any order and batching; an id is emitted once even if read twice.
        """
        table = batch if isinstance(batch, pa.Table) else pa.Table.from_batches([batch])
        found = pc.index_in(table["id"], value_set=self._keep_ids)
        if found.null_count:
            raise ValueError("filter_batch got documents that were not given to add_batch")
        idx = found.to_numpy(zero_copy_only=False).astype(np.int64)
        keep = self._keep_flag[idx] & ~self._emitted[idx]
        rows = np.flatnonzero(keep)
        _, first = np.unique(idx[rows], return_index=True)  # an id twice in one batch: its first row
        rows = np.sort(rows[first])
        self._emitted[idx[rows]] = True
        # most batches keep every row (the 16x pipeline_scaling input: 14 of 16): the batch itself,
        # not a `take` copy of it, so the write pass holds one copy of the batch's text, not two
        kept = table if len(rows) == table.num_rows else table.take(pa.array(rows, pa.int64()))
        cluster = pc.take(self._cluster, pa.array(idx[rows], pa.int64()))
        if "cluster_id" in kept.schema.names:
            kept = kept.drop_columns(["cluster_id"])
        return kept.append_column(pa.field("cluster_id", pa.string(), nullable=False), cluster)

    def hand_over_accepted(self) -> AcceptedSignatures:
        """The accepted-signature artifact, no longer held here: the stage writes it before the write
        pass and drops it, so its 512 B per accepted document (40 MB for the 83,024 of the 4x
        pipeline_scaling corpus) are not resident while the text is read and written again."""
        if self.accepted is None:
            raise RuntimeError("the accepted signatures were handed over already")
        accepted, self.accepted = self.accepted, None
        return accepted

    def exclusions(self) -> pa.Table:
        """Removed documents for `_exclusions.parquet`: id, rule, value, bytes, kept_id, similarity."""
        return self._excl

    def removed_per_source(self) -> pa.Table:
        return removed_per_source(self.decisions)

    def cluster_size_histogram(self) -> pa.Table:
        return cluster_size_histogram(self.duplicates)
