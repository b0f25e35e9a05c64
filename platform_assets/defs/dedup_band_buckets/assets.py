"""dedup_band_buckets[b000 .. b007]: dedup's LSH band grouping as independent partitions (a backfill
spreads them over runs and machines); deduplicated_documents reads their shared keys."""

import dagster as dg

from platform_assets.dedup.band_partitions import bucket_keys, group_band_bucket, uses_band_buckets
from platform_assets.dedup.signature_partition import StaleSignaturesError, check_signature_partitions
from platform_assets.defs.resources import PipelineResource
from platform_assets.defs.stage_asset import TRANSIENT_RETRY, run_stage, stage_context, stage_result
from platform_assets.layout import asset_dir

SIGNATURES = "dedup_signatures"

# Fixed in code (band_partitions.BAND_BUCKET_PARTITIONS): Dagster builds a partitions definition when it
# loads the code, before the pipeline config is read
band_bucket_partitions = dg.StaticPartitionsDefinition(bucket_keys())


@dg.asset(
    retry_policy=TRANSIENT_RETRY,  # transient faults re-run the step (defs/stage_asset.py)
    partitions_def=band_bucket_partitions,
    deps=[dg.AssetDep(SIGNATURES, partition_mapping=dg.AllPartitionMapping())],
    group_name="dedup",
    kinds={"parquet"},
    # each bucket follows the signature partitions by itself, as deduplicated_documents then follows it
    automation_condition=dg.AutomationCondition.eager(),
    code_version="1",
    description=(
        "One bucket partition of the LSH band values of every document (`near.storage.type: disk`, MinHash): "
        "the (document, key) pairs of the values two or more documents share, grouped from the band records "
        "dedup_signatures stores per bucket (and, in incremental mode, from the accepted documents of earlier "
        "runs). With another storage or method an empty output that says so."
    ),
)
def dedup_band_buckets(context: dg.AssetExecutionContext, pipeline: PipelineResource) -> dg.MaterializeResult:
    key = context.partition_key
    ctx = stage_context(pipeline, "dedup_band_buckets", key)
    cfg, storage = ctx.cfg, ctx.storage
    keys_dirs = [asset_dir(SIGNATURES, k) for k in cfg.partition_keys()]
    try:
        if uses_band_buckets(cfg.dedup):
            check_signature_partitions(storage, [(asset_dir("cleaned_documents", k), d) for k, d in
                                                 zip(cfg.partition_keys(), keys_dirs, strict=True)], cfg.dedup)
    except StaleSignaturesError as err:
        raise dg.Failure(str(err), allow_retries=False) from None
    # incremental: the documents earlier runs accepted are grouped too (deduplicated_documents' artifact)
    prior_rel = asset_dir("deduplicated_documents") if cfg.dedup.incremental else None
    stage = run_stage("dedup_band_buckets", lambda: group_band_bucket(storage, key, keys_dirs, ctx.rel, cfg.dedup,
                                                                      prior_rel, cfg.io))
    context.log.info(f"dedup_band_buckets[{key}]: {stage.reason}; {stage.shared_keys} shared keys")
    return stage_result(ctx, stage, {"signature_partitions": len(keys_dirs)})
