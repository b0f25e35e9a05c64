"""The dedup stage over stored outputs: read every cleaned partition, deduplicate (exact, MinHash,
image phash), write the kept documents with their cluster ids, the exclusions, the duplicates table
and the signature artifact.

Two passes over the input. The first feeds every document's keys to the global decisions: the keys
`dedup_signatures` stored per cleaned partition (signature_partition.py; the asset's path: shingling
and MinHash ran per source, in parallel), or keys computed here from the text (the library path).
With `near.storage.type: disk` and MinHash the shared LSH band keys come grouped from the
`dedup_band_buckets` partitions too (band_partitions.py), mapped to the documents this pass feeds.
The second streams the cleaned text again to write the kept documents instead of holding it.

Memory: with `storage: disk` the signatures wait on disk (signature_spill.py), the accepted ones are
written as the `_signatures` artifact by the decisions themselves, a row group (8,192 rows) read from
the spill at a time, and glibc's freed heap is given back after the decisions (malloc_trim): the second
pass holds ~10 B per document (keep_lookup.py: a hash of each id, a keep and an emitted flag) and the
removed documents' tables, plus the write pass's batch (`io.batch_bytes`: the
read one, whose kept rows are written as slices of it, not a copy, encoded in this thread before the
next is read). The stage process on the
whole pipeline_scaling corpus (21,362 documents in at 1x, 90,013 at 4x; 2 cores, 2-4 runs each), peak
tree RSS before 473-499 MB at 1x, 609-636 at 4x; with the spill 464-475 and 532-562; without the write-
behind thread 467 and 491-498; the same bytes out. At 16x (~360k documents) it still grew to 954 MB: the
accepted signatures were gathered at once for the artifact (~170 MB there) and the artifact encoded as
one row group (as much again), the write pass looked ids up in a per-id grouping (~390 B a document),
and the greedy pass's index was a dict of lists: 604 MB at 16x then (1.29x of 1x). The write pass then
still held the decisions table (~95 B a document) and two copies of its ids for the lookup, and the
asset's spot checks ~250 MB: 465 / 498 / 538 MB at 1x / 4x / 16x (1.16x); and a `take` copied each
batch's kept rows while the batch was held (the 16x peak, ~520 MB in the process): 467 / 482 / 507 MB
then (1.09x); 442 / 478 / 506 on the whole corpus (1x = 21k documents in). Then (in-process, 16x): the
write pass held the batch written while it read the next (every generator's loop variable), and a
batch read whole cost up to twice its size again, so it is read in pieces (TableSource.tables) and
written as one row group of them; finish() counted distinct ids three times with Arrow's hash table
(+95 MB each: IdHashes, 16 B a document, instead); the checks counted distinct ids and exact keys the
same way (+89 and +109 MB: 64-bit and 128-bit sorted hashes instead, validation.py and checks.py).
The stage's process tree: 388 / 403 / 438 MB (max process 393 / 396 / 418). What is left grows with
documents in finish(): ids, sources, hashes, order, ranks, links and roots (~150-250 B each), freed
before the write pass.

In incremental mode the previous output is the starting point:
its documents stay accepted (their signatures come from `_signatures.parquet`, never recomputed),
documents seen before (accepted or excluded) are not fed again, and only new documents are
deduplicated, against everything accepted so far.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from platform_assets.contracts import (
    DEFAULT_IO,
    DUPLICATES_FILE,
    EXCLUSIONS_FILE,
    SIGNATURES_FILE,
    IOSettings,
    StageResult,
    schema_tag,
)
from platform_assets.dedup.band_partitions import (
    check_band_buckets,
    live_band_keys,
    signature_rows,
    uses_band_buckets,
)
from platform_assets.dedup.deduplicator import EXCLUSIONS_SCHEMA, Deduplicator, DedupResult
from platform_assets.dedup.settings import DedupSettings
from platform_assets.dedup.signature_partition import check_signature_partitions, dedup_input_columns
from platform_assets.dedup.signature_store import AcceptedSignatures
from platform_assets.heap import fix_mmap_threshold, release_freed_heap
from platform_assets.output_lock import BasedOn
from platform_assets.parquet_parts import TableSink, TableSource
from platform_assets.progress import tracked_batches
from platform_assets.storage import Storage

__all__ = ["DUPLICATES_FILE", "EXCLUSIONS_FILE", "SIGNATURES_FILE", "DedupStageResult", "deduplicate_outputs"]


@dataclass(frozen=True, kw_only=True)
class DedupStageResult(StageResult):
    rows_in: int
    carried_over: int  # documents kept from the previous output (incremental mode)
    result: DedupResult

    @property
    def rows_out(self) -> int:
        return self.rows

    @property
    def metadata(self) -> dict[str, Any]:
        c = self.result.counts
        return {"documents_in": self.rows_in, "carried_over": self.carried_over, "removed_exact": c.removed_exact,
                "removed_near": c.removed_near, "removed_near_image": c.removed_near_image,
                "lsh_bands_x_rows": f"{c.lsh_bands} x {c.lsh_rows}",
                **({"simhash_blocks_x_tables": f"{c.simhash_blocks} x {c.simhash_tables}"} if c.simhash_tables
                   else {})}


def _previous_exclusions(table: pa.Table) -> pa.Table:
    """Exclusions an earlier run committed, in today's schema. Before the shared exclusions schema
    (no tag), `value` was the similarity as a float64 and there were no `bytes`/`similarity` columns."""
    if schema_tag(table.schema) == schema_tag(EXCLUSIONS_SCHEMA):
        return table
    similarity = table["value"].cast(pa.float64())
    return pa.table({
        "id": table["id"], "rule": table["rule"],
        "value": pa.array([None if v is None else f"{v:.4g}" for v in similarity.to_pylist()], pa.string()),
        "bytes": pa.nulls(table.num_rows, pa.int64()), "kept_id": table["kept_id"], "similarity": similarity,
    }, schema=EXCLUSIONS_SCHEMA)


def deduplicate_outputs(
    storage: Storage,
    input_dirs: list[str],
    out_rel: str,
    settings: DedupSettings,
    io: IOSettings = DEFAULT_IO,
    signature_dirs: list[str] | None = None,
    bucket_dirs: list[str] | None = None,
) -> DedupStageResult:
    """Deduplicate the cleaned outputs `input_dirs` into `out_rel`.

    signature_dirs: the stored keys of each input (`dedup_signatures`, signature_partition.py), in
    the same order: the first pass reads them instead of the text (refused, by name, when one is
    missing or stale). None: the keys are computed here from the text (the library path; the same
    decisions and bytes).
    bucket_dirs: with signature_dirs, `storage: disk` and MinHash, the dedup_band_buckets outputs
    (band_partitions.py): their shared band keys replace the grouping this process would do.
    """
    fix_mmap_threshold(settings.malloc_mmap_threshold)  # freed batch temporaries leave RSS (heap.py)
    inputs = [TableSource(storage, d, io) for d in input_dirs]
    schemas = [(i.rel, i.schema) for i in inputs if i.schema is not None]
    if not schemas:
        raise ValueError(f"no input documents under {input_dirs}")
    schema = schemas[0][1]
    for rel, s in schemas:
        if s.names != schema.names:
            raise ValueError(f"{rel} has columns {s.names}, expected {schema.names} like the other inputs")

    # incremental: this run adds to the version it reads now; committing over a newer one (another run's,
    # committed meanwhile) would drop that run's documents and signatures, so the commit checks it
    based_on = BasedOn(storage.output_version(out_rel)) if settings.incremental else None
    previous = TableSource(storage, out_rel, io)
    accepted, seen, previous_exclusions = None, None, None
    if settings.incremental:
        signatures = previous.side_table(SIGNATURES_FILE)
        if signatures is not None:
            accepted = AcceptedSignatures.from_table(signatures, settings)
            excluded = previous.side_table(EXCLUSIONS_FILE)
            previous_exclusions = _previous_exclusions(excluded) if excluded is not None else None
            seen = pa.concat_arrays([accepted.ids.cast(pa.string()),
                                     *([excluded["id"].combine_chunks()] if excluded is not None else [])])

    # the first pass's decisions do not depend on its batching (any order, any batching), so it reads
    # batches of `dedup.slice_bytes`; the write pass keeps `io.batch_bytes` (one row group per batch)
    key_io = io.model_copy(update={"batch_bytes": min(io.batch_bytes, settings.slice_bytes)})
    if signature_dirs is not None:
        if len(signature_dirs) != len(input_dirs):
            raise ValueError(f"{len(signature_dirs)} signature outputs for {len(input_dirs)} inputs")
        check_signature_partitions(storage, list(zip(input_dirs, signature_dirs, strict=True)), settings)
        key_inputs = [TableSource(storage, d, key_io) for d in signature_dirs]
    else:
        key_inputs = [TableSource(storage, d, key_io) for d in input_dirs]

    def new_batches(columns: list[str] | None, sources: list[TableSource] = inputs,
                    in_pieces: bool = False) -> Iterator[pa.RecordBatch | pa.Table]:
        for source in sources:
            for batch in source.tables(columns) if in_pieces else source.batches(columns):
                if seen is not None:
                    batch = batch.filter(pc.invert(pc.is_in(batch.column("id"), value_set=seen)))
                if batch.num_rows:
                    yield batch
                del batch  # not held while the next is read (tracked_batches)

    buckets = bucket_dirs is not None and signature_dirs is not None and uses_band_buckets(settings)
    n_prior = len(accepted) if accepted is not None else 0
    if buckets:
        prior = {"version": storage.output_version(out_rel), "rows": n_prior} if accepted is not None else None
        check_band_buckets(storage, bucket_dirs, signature_dirs, settings, prior)
    dedup = Deduplicator(settings, accepted, band_keys_given=buckets)
    rows_in = 0
    # in incremental mode the rows seen before are skipped, so the footers' total would overstate
    total = None if seen is not None else sum(i.num_rows for i in inputs)
    live = None  # with the band buckets: this pass's number of each document (below)
    if signature_dirs is not None:
        # the buckets number documents as earlier runs' accepted ones, then every row of every signature
        # partition in order; live[that number] = the number this pass gives the document, -1: not fed
        live = starts = None
        if buckets:
            part_rows = [signature_rows(storage, d) for d in signature_dirs]
            starts = n_prior + np.cumsum([0, *part_rows[:-1]], dtype=np.int64)
            live = np.full(n_prior + sum(part_rows), -1, np.int64)
            live[:n_prior] = np.arange(n_prior)
        reading = [0]  # the partition the batch being fed comes from

        def keyed_batches() -> Iterator[pa.RecordBatch]:
            for i, source in enumerate(key_inputs):
                reading[0] = i
                yield from new_batches(None, [source])

        for keys in tracked_batches(keyed_batches(), "decisions", total):
            if live is not None:
                live[starts[reading[0]] + keys.column("row").to_numpy()] = n_prior + rows_in + np.arange(keys.num_rows)
            rows_in += keys.num_rows
            dedup.add_keys(keys)
            del keys  # not held while the next is read, nor through the write pass
    else:
        for batch in tracked_batches(new_batches(dedup_input_columns(schema, settings), key_inputs), "signatures",
                                     total):
            rows_in += batch.num_rows
            dedup.add_batch(batch)
            del batch
    out_schema = schema.append(pa.field("cluster_id", pa.string(), nullable=False))
    carried = 0
    # the write pass encodes each kept batch itself before reading the next: a write-behind thread held
    # a third batch (~64 MiB at the default io.batch_bytes), which only inputs of many batches reached
    # (stage process, whole corpus 1x / 4x: 475 / 532 MB with it, 467 / 491-498 without; the same CPU)
    with TableSink(storage, out_rel, out_schema, io, based_on, write_behind=False) as sink:
        # the artifact is written by finish() a row group at a time, its spilled signatures read as it
        # goes, and never held (side files are listed by name: the order of writing changes no byte)
        # the shared band keys (16 B a pair) are read here and handed over, not also held by this frame
        result = dedup.finish(live_band_keys(storage, bucket_dirs, live) if live is not None else None,
                              write_accepted=partial(sink.write_side_row_groups, SIGNATURES_FILE), decisions=False)
        live = None
        # the decisions' Python objects and numpy temporaries (the candidate index, the shingle cache)
        # are freed now, but glibc keeps their pages in fragmented arenas: given back before the write
        # pass, which otherwise peaked that much higher (see the module doc)
        release_freed_heap()
        if seen is not None:  # incremental: earlier runs' documents first, as they were
            for batch in previous.batches():
                carried += batch.num_rows
                sink.write(batch)
        # each batch read in pieces (a table of them: TableSource.tables), written back as one row group
        for batch in tracked_batches(new_batches(None, in_pieces=True), "write", None if seen is not None else rows_in):
            sink.write(result.filter_batch(batch), as_chunks=True)  # the kept rows: slices of the batch
            del batch  # not held while the next one is read: the peak was two input batches
        exclusions = result.exclusions()
        if previous_exclusions is not None:
            exclusions = pa.concat_tables([previous_exclusions, exclusions])
        sink.write_side(EXCLUSIONS_FILE, exclusions)
        sink.write_side(DUPLICATES_FILE, result.duplicates)
    return DedupStageResult(rel=out_rel, files=sink.files, rows=sink.rows, schema=out_schema,
                            exclusions=EXCLUSIONS_FILE, rows_in=rows_in, carried_over=carried, result=result)
