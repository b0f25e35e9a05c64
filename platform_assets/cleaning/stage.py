"""The cleaning stage over stored outputs: one raw_documents partition in, one cleaned partition out.

Batches stream through the pipeline, so memory is bounded by the batch. Beside the kept documents
the output holds `_exclusions.parquet` (id, rule, value, bytes: every removed document with the rule
that removed it and the value that tripped it).
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from platform_assets.cleaning.pipeline import Funnel, build_pipeline
from platform_assets.cleaning.settings import CleaningSettings
from platform_assets.cleaning.steps import EXCLUSIONS_SCHEMA
from platform_assets.parquet_parts import PartWriter, output_schema, read_batches, write_table
from platform_assets.schema import DOCUMENTS_SCHEMA
from platform_assets.storage import Storage

EXCLUSIONS_FILE = "_exclusions.parquet"


@dataclass(frozen=True)
class CleaningStageResult:
    funnel: Funnel
    schema: pa.Schema
    rows_out: int
    exclusions: int
    parts: list[str]
    files: dict[str, dict[str, object]]


def clean_output(
    storage: Storage,
    in_rel: str,
    out_rel: str,
    settings: CleaningSettings,
    batch_rows: int = 8192,
    compression: str = "zstd",
    part_max_bytes: int = 512 * 2**20,
) -> CleaningStageResult:
    schema = output_schema(storage, in_rel) or DOCUMENTS_SCHEMA  # a source may have no documents
    pipeline = build_pipeline(settings)
    out_schema = pipeline.output_schema(schema)
    excluded = []
    with storage.staged_dir(out_rel) as staged:
        with PartWriter(staged, out_schema, compression, part_max_bytes) as writer:
            for batch in read_batches(storage, in_rel, None, batch_rows):
                result = pipeline.process_batch(batch)
                writer.write(result.kept)
                if result.exclusions.num_rows:
                    excluded.append(result.exclusions)
        exclusions = pa.Table.from_batches(excluded, schema=EXCLUSIONS_SCHEMA)
        write_table(staged, EXCLUSIONS_FILE, exclusions, compression)
    funnel = pipeline.funnel()
    funnel.check()  # docs and bytes in = out + removed (+ rewritten) for every step, or it raises
    return CleaningStageResult(funnel, out_schema, writer.rows, exclusions.num_rows, writer.parts, staged.manifest)
