"""The cleaning stage over stored outputs: one raw_documents partition in, one cleaned partition out.

Batches stream through the pipeline, so memory is bounded by the batch. Beside the kept documents
the output holds `_exclusions.parquet` (the shared exclusion columns id, rule, value, bytes: every
removed document with the rule that removed it and the value that tripped it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from platform_assets.cleaning.pipeline import Funnel, build_pipeline
from platform_assets.cleaning.settings import CleaningSettings
from platform_assets.cleaning.steps import EXCLUSIONS_SCHEMA
from platform_assets.contracts import DEFAULT_IO, EXCLUSIONS_FILE, IOSettings, StageResult
from platform_assets.parquet_parts import TableSink, TableSource
from platform_assets.schema import DOCUMENTS_SCHEMA
from platform_assets.storage import Storage

__all__ = ["EXCLUSIONS_FILE", "CleaningStageResult", "clean_output"]


@dataclass(frozen=True, kw_only=True)
class CleaningStageResult(StageResult):
    funnel: Funnel
    excluded: int

    @property
    def rows_out(self) -> int:
        return self.rows

    @property
    def metadata(self) -> dict[str, Any]:
        f = self.funnel
        return {"docs_in": f.docs_in, "bytes_in": f.bytes_in, "bytes_out": f.bytes_out,
                "removal_rate": round(f.removal_rate(), 6)}


def clean_output(
    storage: Storage,
    in_rel: str,
    out_rel: str,
    settings: CleaningSettings,
    io: IOSettings = DEFAULT_IO,
) -> CleaningStageResult:
    source = TableSource(storage, in_rel, io)
    schema = source.schema or DOCUMENTS_SCHEMA  # a source may have no documents
    pipeline = build_pipeline(settings)
    out_schema = pipeline.output_schema(schema)
    excluded = []
    with TableSink(storage, out_rel, out_schema, io) as sink:
        for batch in source.tracked_batches("clean"):
            result = pipeline.process_batch(batch)
            sink.write(result.kept)
            if result.exclusions.num_rows:
                excluded.append(result.exclusions)
        exclusions = pa.Table.from_batches(excluded, schema=EXCLUSIONS_SCHEMA)
        sink.write_side(EXCLUSIONS_FILE, exclusions)
    funnel = pipeline.funnel()
    funnel.check()  # docs and bytes in = out + removed (+ rewritten) for every step, or it raises
    return CleaningStageResult(rel=out_rel, files=sink.files, rows=sink.rows, schema=out_schema,
                               exclusions=EXCLUSIONS_FILE, funnel=funnel, excluded=exclusions.num_rows)
