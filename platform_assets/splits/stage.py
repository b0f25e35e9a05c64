"""The split stage over stored outputs: add a `split` column to every deduplicated document.

Without stratification one pass streams the documents and writes each batch with its split, a
seeded hash of each id (nothing is kept per document). With `stratify_by`, pass 1 reads ids and the
stratification column (or `meta` for a `meta.` field: a batch at a time, keeping only the extracted
strings) and assigns splits, 1 B a document; pass 2 writes as above. The label field is counted per
split on the way. The previous output is the `prior` assignment, so with stratification existing
documents never move either.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from platform_assets.contracts import DEFAULT_IO, IOSettings, StageResult
from platform_assets.dedup.keys import MEDIA_KEY_COLUMNS
from platform_assets.dedup.settings import DedupSettings
from platform_assets.parquet_parts import TableSink, TableSource
from platform_assets.progress import tracked_batches
from platform_assets.splits.assignment import (
    SPLIT_NAMES,
    assign_split_codes,
    code_counts,
    hash_split_codes,
    id_unit_interval,
    split_names,
)
from platform_assets.splits.leakage import LeakageChecker, LeakageReport
from platform_assets.splits.settings import SplitSettings
from platform_assets.stats.fields import FieldPath, display, field_values
from platform_assets.stats.labels import LabelCounts
from platform_assets.stats.settings import StatisticsSettings
from platform_assets.storage import Storage


@dataclass(frozen=True, kw_only=True)
class SplitStageResult(StageResult):
    counts: dict[str, int]  # documents per split
    strata: list[dict[str, Any]] = field(default_factory=list)
    """With `stratify_by`: the largest strata (and `<missing>`), each with documents and per-split counts."""
    strata_total: int = 0
    labels: LabelCounts | None = None
    """With `statistics.label_field`: the label distribution per split."""


def _stratum_keys(source: TableSource, settings: SplitSettings) -> pa.Table:
    """`id` and the stratum (as a string column named `stratify_by`) of every row, in part order. Read a
    batch at a time: a `meta.` field needs the whole `meta` column, which holds chat conversations."""
    path = FieldPath.parse(settings.stratify_by, source.schema.names)
    batches = [pa.record_batch({"id": pa.concat_arrays([b.column("id")]),
                                settings.stratify_by: pa.concat_arrays([field_values(b, path)])})
               for b in source.batches(["id", path.column])]
    schema = pa.schema([pa.field("id", pa.string()), pa.field(settings.stratify_by, pa.string())])
    return pa.Table.from_batches(batches, schema=schema)


def strata_report(keys: pa.Table, spec: str, assignment: pa.Array, top: int) -> tuple[list[dict[str, Any]], int]:
    """The `top` largest strata (ties by name) plus `<missing>` if any: documents, train, validation, test."""
    grouped = pa.table({"stratum": keys.column(spec), "split": assignment}).group_by(
        ["stratum", "split"], use_threads=False).aggregate([([], "count_all")])
    per: dict[str | None, dict[str, int]] = {}
    for stratum, split, n in zip(*(grouped[c].to_pylist() for c in ("stratum", "split", "count_all")), strict=True):
        per.setdefault(stratum, dict.fromkeys(SPLIT_NAMES, 0))[split] = n
    order = sorted((k for k in per if k is not None), key=lambda k: (-sum(per[k].values()), k))[:top]
    shown = [*order, *([None] if None in per else [])]
    rows = [{"stratum": display(k), "documents": sum(per[k].values()), **per[k]} for k in shown]
    return rows, len(per)


def _parse_field(key: str, spec: str, schema: pa.Schema, in_rel: str) -> FieldPath:
    try:
        return FieldPath.parse(spec, schema.names)
    except ValueError as e:
        raise ValueError(f"{key}: {e} in {in_rel}") from e


class _PieceSplitter:
    """Gives each piece of the write pass its `split` column, in stream order: from the assignment of
    pass 1 (`assigned`, row i of the stream is row i of it) or a seeded hash of each id; counts the
    documents per split and the labels on the way. A call's batch and columns are its own locals,
    gone when it returns."""

    def __init__(self, settings: SplitSettings, assigned: np.ndarray | None, labels: LabelCounts | None):
        self.seed, self.ratios, self.assigned, self.labels = settings.seed, settings.ratios.as_tuple(), assigned, labels
        self.offset = 0
        self.per_split = np.zeros(len(SPLIT_NAMES), np.int64)

    def __call__(self, batch: pa.RecordBatch) -> pa.Table:
        if self.assigned is None:
            codes = hash_split_codes(id_unit_interval(batch.column("id"), self.seed), self.ratios)
        else:
            codes = self.assigned[self.offset : self.offset + batch.num_rows]
        self.offset += batch.num_rows
        self.per_split += code_counts(codes)
        split = split_names(codes)
        if self.labels is not None:
            self.labels.add_batch(batch, split)
        table = pa.Table.from_batches([batch])
        if "split" in table.schema.names:
            table = table.drop_columns(["split"])
        return table.append_column("split", split)


def split_outputs(
    storage: Storage,
    in_rel: str,
    out_rel: str,
    settings: SplitSettings,
    io: IOSettings = DEFAULT_IO,
    statistics: StatisticsSettings | None = None,
) -> SplitStageResult:
    statistics = statistics or StatisticsSettings()
    source = TableSource(storage, in_rel, io)
    schema = source.schema
    if schema is None:
        raise ValueError(f"no input documents under {in_rel}")
    if settings.stratify_by:
        _parse_field("splits.stratify_by", settings.stratify_by, schema, in_rel)
    label_path = _parse_field("statistics.label_field", statistics.label_field, schema, in_rel) \
        if statistics.label_field else None
    if settings.stratify_by:
        # exact shares per stratum depend on the whole set: pass 1 assigns every row, 1 B a document,
        # and pass 2 reads the same parts in the same order, so row i of the stream is row i of it
        keys = _stratum_keys(source, settings)
        prior = TableSource(storage, out_rel, io).table(["id", "split"])
        assigned: np.ndarray | None = assign_split_codes(keys, settings, prior)
        strata, strata_total = strata_report(keys, settings.stratify_by, split_names(assigned),
                                             statistics.strata_reported)
        del keys, prior  # the ids (~40 B a document): not held through the write pass
    else:
        # a seeded hash of the id alone decides: assigned a batch at a time in the write pass, nothing
        # kept per document (a first pass held every id and split string: ~55 B a document)
        assigned, strata, strata_total = None, [], 0
    labels = LabelCounts(label_path, statistics.max_distinct_labels) if label_path else None

    out_schema = schema.append(pa.field("split", pa.string(), nullable=False)) if "split" not in schema.names \
        else schema
    splitter = _PieceSplitter(settings, assigned, labels)
    # each batch is read in pieces (TableSource.tables: a batch read whole cost up to twice its size
    # again) and written back as one row group of them; without a write-behind thread, which held the
    # batch being encoded while the next was read (two batches at the peak). pipeline_scaling's whole
    # corpus, the stage's process tree at 1x / 16x: 426 / 475 MB before; 387 / 437 with each batch
    # dropped before the next is read; 366 / 411 with the pieces and the leakage check's per-document
    # state cut (leakage.py).
    with TableSink(storage, out_rel, out_schema, io, write_behind=False) as sink:
        for run in tracked_batches(source.tables(), "split", source.num_rows):
            pieces = [splitter(batch) for batch in run.to_batches()]
            sink.write(pa.concat_tables(pieces), as_chunks=True)
            del run, pieces  # not held while the next batch is read
        offset = splitter.offset
        if assigned is not None and offset != len(assigned):  # raised inside: the sink commits nothing
            raise RuntimeError(f"{in_rel} changed while it was split: {len(assigned)} rows assigned, "
                               f"{offset} read back")
    return SplitStageResult(rel=out_rel, files=sink.files, rows=sink.rows, schema=out_schema,
                            counts=dict(zip(SPLIT_NAMES, splitter.per_split.tolist(), strict=True)), strata=strata,
                            strata_total=strata_total, labels=labels)


def check_split_leakage(
    storage: Storage, rel: str, dedup: DedupSettings, settings: SplitSettings, io: IOSettings = DEFAULT_IO
) -> LeakageReport:
    """Exact, near and image near duplicates across splits in a written split output (the blocking
    check). `modality` and the media items' hashes are read where the output has them (sha256 and
    phash, never the bytes)."""
    checker = LeakageChecker(dedup.near, dedup.exact, settings.leakage, dedup.images)
    # slices of io.work_bytes: the check shingles each batch's texts in Python and numpy, nothing is
    # written, so batches need not be the output's row groups (64 MiB ones: ~170 MB of peak RSS)
    source = TableSource(storage, rel, io.model_copy(update={"batch_bytes": io.work_bytes}))
    names = source.schema.names if source.schema is not None else []
    columns = ["id", "text", "split", *(["modality"] if "modality" in names else []),
               *(MEDIA_KEY_COLUMNS if "media" in names else ())]
    for batch in source.tracked_batches("leak check", columns):
        checker.add_batch(batch)
    return checker.finish()


__all__ = ["SPLIT_NAMES", "SplitStageResult", "check_split_leakage", "split_outputs"]
