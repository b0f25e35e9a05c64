"""Quality gates on raw_documents, evaluated in the materializing step on the committed output.

The first three are blocking: a failure stops downstream assets in the same run, so a broken reader
cannot feed cleaning an empty or malformed source.
"""

from __future__ import annotations

import dagster as dg

from platform_assets.config import PipelineConfig
from platform_assets.ingest.run import IngestResult
from platform_assets.ingest.validation import duplicate_ids, schema_problems
from platform_assets.schema import DOCUMENTS_SCHEMA
from platform_assets.storage import Storage

ASSET = "raw_documents"

RAW_DOCUMENT_CHECKS = [
    dg.AssetCheckSpec("schema_matches", asset=ASSET, blocking=True,
                      description="Every part file has the versioned documents schema."),
    dg.AssetCheckSpec("ids_unique", asset=ASSET, blocking=True,
                      description="No document id appears twice in the source's output."),
    dg.AssetCheckSpec("source_not_empty", asset=ASSET, blocking=True,
                      description="The source produced at least one document (a file partition of a split "
                                  "source: unless no file hashed into it)."),
    dg.AssetCheckSpec("quarantine_rate_within_bounds", asset=ASSET,
                      description="Quarantined inputs are at most `ingest.max_quarantine_fraction` of all inputs."),
    dg.AssetCheckSpec("media_decode_failures_within_bounds", asset=ASSET, blocking=True,
                      description="Media files no room could decode (corrupt, encrypted, unsupported) are at most "
                                  "`ingest.max_media_decode_failure_fraction` of the media read."),
    dg.AssetCheckSpec("pdf_text_coverage", asset=ASSET,
                      description="At least `ingest.min_pdf_text_coverage` of the PDF pages have text (text layer "
                                  "or OCR)."),
]


def evaluate_raw_document_checks(
    storage: Storage, rel_dir: str, result: IngestResult, cfg: PipelineConfig, file_partition: bool = False
) -> list[dg.AssetCheckResult]:
    """`file_partition`: the output is one file partition of a split source, which may hold no file at
    all (files are hashed into partitions: 8 files over 4 partitions leave at least one empty 38% of the time)."""
    problems = schema_problems(storage, rel_dir, DOCUMENTS_SCHEMA)
    dups = duplicate_ids(storage, rel_dir)
    seen = result.rows + result.quarantined
    fraction = result.quarantined / seen if seen else 0.0
    bound = cfg.ingest.max_quarantine_fraction
    return [
        dg.AssetCheckResult(
            check_name="schema_matches", passed=not problems,
            metadata={"problems": "\n".join(problems[:20]) or "none", "files_checked": len(result.parts)},
        ),
        dg.AssetCheckResult(
            check_name="ids_unique", passed=dups.duplicates == 0,
            metadata={"rows": dups.rows, "distinct_ids": dups.distinct,
                      "examples": ", ".join(f"{i} x{n}" for i, n in dups.examples) or "none"},
        ),
        dg.AssetCheckResult(check_name="source_not_empty",
                            passed=result.rows > 0 or (file_partition and result.input_files == 0),
                            metadata={"rows": result.rows, "input_files": result.input_files}),
        dg.AssetCheckResult(
            check_name="quarantine_rate_within_bounds", passed=fraction <= bound,
            severity=dg.AssetCheckSeverity.WARN,
            metadata={"quarantined": result.quarantined, "fraction": round(fraction, 6), "bound": bound},
        ),
        *media_checks(result, cfg),
    ]


def media_checks(result: IngestResult, cfg: PipelineConfig) -> list[dg.AssetCheckResult]:
    failures = result.media_decode_failures
    read = failures + result.media_documents
    failure_rate = failures / read if read else 0.0
    pages = result.modalities.get("pdf", 0)
    coverage = result.pdf_text_pages / pages if pages else 1.0
    return [
        dg.AssetCheckResult(
            check_name="media_decode_failures_within_bounds",
            passed=failure_rate <= cfg.ingest.max_media_decode_failure_fraction,
            metadata={"decode_failures": failures, "media_documents": result.media_documents,
                      "fraction": round(failure_rate, 6), "bound": cfg.ingest.max_media_decode_failure_fraction},
        ),
        dg.AssetCheckResult(
            check_name="pdf_text_coverage", passed=coverage >= cfg.ingest.min_pdf_text_coverage,
            severity=dg.AssetCheckSeverity.WARN,
            metadata={"pdf_pages": pages, "pages_with_text": result.pdf_text_pages, "pages_ocr": result.ocr_pages,
                      "coverage": round(coverage, 6), "bound": cfg.ingest.min_pdf_text_coverage},
        ),
    ]
