"""The dedup stage over stored outputs: read every cleaned partition, deduplicate, write the kept
documents with their cluster ids, the exclusions, the duplicates table and the signature artifact.

Two passes over the input (the second streams text again instead of holding it: memory stays at
~600 B per document plus one batch). In incremental mode the previous output is the starting point:
its documents stay accepted (their signatures come from `_signatures.parquet`, never recomputed),
documents seen before (accepted or excluded) are not fed again, and only new documents are
deduplicated, against everything accepted so far.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from platform_assets.contracts import (
    DEFAULT_IO,
    DUPLICATES_FILE,
    EXCLUSIONS_FILE,
    PART_GLOB,
    SIGNATURES_FILE,
    IOSettings,
    StageResult,
)
from platform_assets.dedup.deduplicator import Deduplicator, DedupResult
from platform_assets.dedup.settings import DedupSettings
from platform_assets.dedup.signature_store import AcceptedSignatures
from platform_assets.parquet_parts import PartWriter, output_schema, read_batches, write_table
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


def _read_single(storage: Storage, rel: str) -> pa.Table | None:
    if not storage.exists(rel):
        return None
    with storage.fs.open_input_file(storage.path(rel)) as f:
        return pq.read_table(f)


def _input_columns(schema: pa.Schema, settings: DedupSettings) -> list[str]:
    wanted = ["id", "source", "text", "ingested_at"]
    if settings.quality_column:
        wanted.append(settings.quality_column.split(".")[0])
    return [c for c in wanted if c in schema.names]


def deduplicate_outputs(
    storage: Storage,
    input_dirs: list[str],
    out_rel: str,
    settings: DedupSettings,
    io: IOSettings = DEFAULT_IO,
) -> DedupStageResult:
    schemas = [s for s in (output_schema(storage, d) for d in input_dirs) if s is not None]
    if not schemas:
        raise ValueError(f"no input documents under {input_dirs}")
    schema = schemas[0]
    for d, s in zip(input_dirs, schemas, strict=False):
        if s.names != schema.names:
            raise ValueError(f"{d} has columns {s.names}, expected {schema.names} like the other inputs")

    accepted, seen = None, None
    previous_parts: list[str] = []
    if settings.incremental:
        signatures = _read_single(storage, f"{out_rel}/{SIGNATURES_FILE}")
        if signatures is not None:
            accepted = AcceptedSignatures.from_table(signatures, settings)
            excluded = _read_single(storage, f"{out_rel}/{EXCLUSIONS_FILE}")
            seen = pa.concat_arrays([accepted.ids.cast(pa.string()),
                                     *([excluded["id"].combine_chunks()] if excluded is not None else [])])
            previous_parts = [e.path for e in storage.list_files(out_rel, PART_GLOB)]

    def new_batches(columns: list[str] | None) -> Iterator[pa.RecordBatch]:
        for d in input_dirs:
            for batch in read_batches(storage, d, columns, io.batch_rows):
                if seen is not None:
                    batch = batch.filter(pc.invert(pc.is_in(batch.column("id"), value_set=seen)))
                if batch.num_rows:
                    yield batch

    dedup = Deduplicator(settings, accepted)
    rows_in = 0
    for batch in new_batches(_input_columns(schema, settings)):
        rows_in += batch.num_rows
        dedup.add_batch(batch)
    result = dedup.finish()

    out_schema = schema.append(pa.field("cluster_id", pa.string(), nullable=False))
    carried = 0
    with storage.staged_dir(out_rel) as staged:
        with PartWriter.with_io(staged, out_schema, io) as writer:
            for path in previous_parts:  # incremental: earlier runs' documents first, as they were
                with storage.fs.open_input_file(path) as f:
                    for batch in pq.ParquetFile(f).iter_batches(batch_size=io.batch_rows):
                        carried += batch.num_rows
                        writer.write(batch)
            for batch in new_batches(None):
                writer.write(result.filter_batch(batch))
        previous_exclusions = _read_single(storage, f"{out_rel}/{EXCLUSIONS_FILE}") if seen is not None else None
        exclusions = result.exclusions()
        if previous_exclusions is not None:
            exclusions = pa.concat_tables([previous_exclusions.cast(exclusions.schema), exclusions])
        write_table(staged, EXCLUSIONS_FILE, exclusions, io.compression)
        write_table(staged, DUPLICATES_FILE, result.duplicates, io.compression)
        write_table(staged, SIGNATURES_FILE, result.accepted.to_table(settings), io.compression)
    return DedupStageResult(rel=out_rel, files=staged.manifest, rows=writer.rows, schema=out_schema,
                            exclusions=EXCLUSIONS_FILE, rows_in=rows_in, carried_over=carried, result=result)
