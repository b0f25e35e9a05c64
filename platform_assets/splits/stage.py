"""The split stage over stored outputs: add a `split` column to every deduplicated document.

Pass 1 reads ids (and the stratification column) only and assigns splits; pass 2 streams the
documents and writes them with their split. The previous output is the `prior` assignment, so with
stratification existing documents never move either.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from platform_assets.contracts import DEFAULT_IO, IOSettings, StageResult
from platform_assets.dedup.keys import MEDIA_KEY_COLUMNS
from platform_assets.dedup.settings import DedupSettings
from platform_assets.parquet_parts import TableSink, TableSource
from platform_assets.splits.assignment import SPLIT_NAMES, assign_splits, split_counts
from platform_assets.splits.leakage import LeakageChecker, LeakageReport
from platform_assets.splits.settings import SplitSettings
from platform_assets.storage import Storage


@dataclass(frozen=True, kw_only=True)
class SplitStageResult(StageResult):
    counts: dict[str, int]  # documents per split


def split_outputs(
    storage: Storage,
    in_rel: str,
    out_rel: str,
    settings: SplitSettings,
    io: IOSettings = DEFAULT_IO,
) -> SplitStageResult:
    source = TableSource(storage, in_rel, io)
    schema = source.schema
    if schema is None:
        raise ValueError(f"no input documents under {in_rel}")
    if settings.stratify_by and settings.stratify_by not in schema.names:
        raise ValueError(f"splits.stratify_by: no column {settings.stratify_by!r} in {in_rel} ({schema.names})")
    key_columns = ["id", *([settings.stratify_by] if settings.stratify_by else [])]
    keys = source.table(key_columns)
    prior = TableSource(storage, out_rel, io).table(["id", "split"]) if settings.stratify_by else None
    # one split per row of `keys`; pass 2 reads the same parts in the same order, so row i of the
    # stream is row i of the assignment (no per-batch id lookup)
    assignment = assign_splits(keys, settings, prior)

    out_schema = schema.append(pa.field("split", pa.string(), nullable=False)) if "split" not in schema.names \
        else schema
    offset = 0
    with TableSink(storage, out_rel, out_schema, io) as sink:
        for batch in source.tracked_batches("split"):
            split = assignment.slice(offset, batch.num_rows)
            offset += batch.num_rows
            table = pa.Table.from_batches([batch])
            if "split" in table.schema.names:
                table = table.drop_columns(["split"])
            sink.write(table.append_column("split", split))
    return SplitStageResult(rel=out_rel, files=sink.files, rows=sink.rows, schema=out_schema,
                            counts=split_counts(assignment))


def check_split_leakage(
    storage: Storage, rel: str, dedup: DedupSettings, settings: SplitSettings, io: IOSettings = DEFAULT_IO
) -> LeakageReport:
    """Exact, near and image near duplicates across splits in a written split output (the blocking
    check). `modality` and the media items' hashes are read where the output has them (sha256 and
    phash, never the bytes)."""
    checker = LeakageChecker(dedup.near, dedup.exact, settings.leakage, dedup.images)
    source = TableSource(storage, rel, io)
    names = source.schema.names if source.schema is not None else []
    columns = ["id", "text", "split", *(["modality"] if "modality" in names else []),
               *(MEDIA_KEY_COLUMNS if "media" in names else ())]
    for batch in source.tracked_batches("leak check", columns):
        checker.add_batch(batch)
    return checker.finish()


__all__ = ["SPLIT_NAMES", "SplitStageResult", "check_split_leakage", "split_outputs"]
