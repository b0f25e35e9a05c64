"""raw_documents: every configured source read into the documents schema, bad input quarantined."""


import dagster as dg

from platform_assets.defs.metadata import counts_table
from platform_assets.defs.raw_documents.checks import RAW_DOCUMENT_CHECKS, evaluate_raw_document_checks
from platform_assets.defs.raw_documents.fingerprint import FINGERPRINT_KEY, source_fingerprint
from platform_assets.defs.raw_documents.partitions import source_partitions
from platform_assets.defs.resources import PipelineResource
from platform_assets.defs.stage_asset import TRANSIENT_RETRY, run_stage, stage_context, stage_result
from platform_assets.ingest.file_partitions import PartitionKeyError
from platform_assets.ingest.run import ingest_source
from platform_assets.schema import QuarantineReason


@dg.asset(
    retry_policy=TRANSIENT_RETRY,  # transient faults re-run the step (defs/stage_asset.py)
    partitions_def=source_partitions,
    check_specs=RAW_DOCUMENT_CHECKS,
    group_name="ingest",
    kinds={"parquet"},
    code_version="1",
    description=(
        "Documents of one configured source (JSONL, CSV, Parquet, text, folder, Hugging Face), as "
        "Parquet parts with the versioned documents schema. Rejected input goes to "
        "_quarantine.parquet beside it with its reason."
    ),
)
def raw_documents(context: dg.AssetExecutionContext, pipeline: PipelineResource) -> dg.MaterializeResult:
    key = context.partition_key  # a source's name, or `<source>.<k>` for a file partition of a split source
    ctx = stage_context(pipeline, "raw_documents", key)
    try:
        part = ctx.cfg.source_partition(key)
    except PartitionKeyError as err:
        raise dg.Failure(f"{err} ({pipeline.config_path})", allow_retries=False) from None
    source = part.source
    # taken before reading: what this materialization read, for the sensor and the schedule to compare with
    fingerprint = source_fingerprint(ctx.cfg, key, pipeline)
    result = run_stage("raw_documents", lambda: ingest_source(ctx.cfg, source, ctx.storage, ctx.rel,
                                                              pipeline.s3_settings(ctx.cfg), part))
    context.log.info(f"{key}: {result.rows} documents, {result.quarantined} quarantined "
                     f"from {result.input_files} input files in {result.input_groups} groups")
    metadata = {
        "quarantine_by_reason": counts_table(
            {r: result.quarantine_counts.get(r, 0) for r in QuarantineReason.all()
             if result.quarantine_counts.get(r)}, "reason"),
        "quarantine_uri": dg.MetadataValue.path(ctx.storage.uri(result.exclusions_path())),
        **({FINGERPRINT_KEY: fingerprint} if fingerprint is not None else {}),
        **({"file_partition": f"{part.bucket} of {part.buckets}"} if part.bucket is not None else {}),
    }
    checks = evaluate_raw_document_checks(ctx.storage, ctx.rel, result, ctx.cfg, part.bucket is not None)
    return stage_result(ctx, result, metadata, checks, preview=["id", "uri", "modality", "text"])
