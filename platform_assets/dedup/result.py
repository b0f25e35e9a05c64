"""What a dedup run decides: the decision, duplicate and exclusion schemas, the counts, and
DedupResult, which filters the second pass's batches by the decisions (deduplicator.py makes it).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from platform_assets.contracts import Counts, exclusions_schema
from platform_assets.dedup.clusters import cluster_size_histogram
from platform_assets.dedup.keep_lookup import KeepLookup
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


def kept_runs(table: pa.Table, rows: np.ndarray) -> pa.Table:
    """`table.take(rows)` for ascending `rows`, as slices of `table` (no data copied): a chunk per run of
    consecutive rows. Parquet writes it as the same values (TableSink.write(..., as_chunks=True): one row
    group), with pages cut where chunks end."""
    if len(rows) == 0:
        return table.slice(0, 0)
    breaks = np.flatnonzero(np.diff(rows) != 1) + 1
    starts = np.concatenate(([0], breaks))
    ends = np.concatenate((breaks, [len(rows)]))
    return pa.concat_tables([table.slice(int(rows[a]), int(b - a)) for a, b in zip(starts, ends, strict=True)])


def exclusions_table(ids: pa.Array, rules: pa.Array, kept_ids: pa.Array, similarity: pa.Array) -> pa.Table:
    """Removed documents for `_exclusions.parquet` (EXCLUSIONS_SCHEMA): `value` is the similarity as
    text, or for SimHash the Hamming distance its similarity stands for."""
    similarity = similarity.cast(pa.float64())
    value = [None if s is None else f"{round((1 - s) * 64)}" if r == NEAR_SIMHASH else f"{s:.4g}"
             for s, r in zip(similarity.to_pylist(), rules.to_pylist(), strict=True)]
    return pa.table(
        {
            "id": ids,
            "rule": rules,
            "value": pa.array(value, pa.string()),
            "bytes": pa.nulls(len(ids), pa.int64()),
            "kept_id": kept_ids,
            "similarity": similarity,
        },
        schema=EXCLUSIONS_SCHEMA,
    )


@dataclass
class DedupResult:
    """What the decisions hold for the write pass: which ids to keep (~10 B a document, keep_lookup.py)
    and the removed documents' tables; the whole decisions table only when asked for."""

    # DECISIONS_SCHEMA, one row per input row, in keep-policy order; None from `finish(decisions=False)`
    # (the stage: ~95 B a document it never reads: 33 MB of the 16x pipeline_scaling corpus)
    decisions: pa.Table | None
    duplicates: pa.Table  # DUPLICATES_SCHEMA, one row per removed document
    # earlier runs' + this run's kept documents: the next run's input; None once `hand_over_accepted`
    accepted: AcceptedSignatures | None
    counts: DedupCounts
    keep: KeepLookup = field(repr=False)
    excluded: pa.Table = field(repr=False)  # EXCLUSIONS_SCHEMA, the removed rows in keep-policy order
    per_source: pa.Table = field(repr=False)  # removed_per_source of the decisions

    def filter_batch(self, batch: pa.RecordBatch | pa.Table) -> pa.Table:
        """The batch's kept documents, with a `cluster_id` column (the kept member's id: its own).

        Rows may come in any order and batching; an id is emitted once even if read twice.
        """
        table = batch if isinstance(batch, pa.Table) else pa.Table.from_batches([batch])
        rows = self.keep.kept_rows(table["id"])
        # the kept rows as zero-copy slices of the batch (one chunk per run of kept rows), not a `take`
        # copy: the write pass held the batch, its copy and take's temporaries at once, its peak (the
        # 16x pipeline_scaling corpus: 62 MB batches, the process at ~520 MB inside take, ~470 writing)
        kept = table if len(rows) == table.num_rows else kept_runs(table, rows)
        # a kept document is the root of its cluster (Deduplicator.finish checks it)
        cluster = kept["id"].cast(pa.string())
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
        return self.excluded

    def removed_per_source(self) -> pa.Table:
        return self.per_source

    def cluster_size_histogram(self) -> pa.Table:
        return cluster_size_histogram(self.duplicates)
