"""dedup_signatures[source]: one cleaned partition's dedup keys (shingles, MinHash or SimHash, exact
keys, keep-policy values, image hashes), computed in the per-source chain so a backfill spreads
dedup's CPU-heavy part over runs; deduplicated_documents reads them instead of the text."""

import dagster as dg

from platform_assets.contracts import MANIFEST_FILE
from platform_assets.dedup.signature_partition import write_signature_partition
from platform_assets.defs.dedup_signatures.checks import SIGNATURE_CHECKS, evaluate_signature_checks
from platform_assets.defs.raw_documents.partitions import source_partitions
from platform_assets.defs.resources import PipelineResource
from platform_assets.defs.stage_asset import TRANSIENT_RETRY, run_stage, stage_context, stage_result
from platform_assets.ingest.file_partitions import PartitionKeyError

UPSTREAM = "cleaned_documents"


@dg.asset(
    retry_policy=TRANSIENT_RETRY,  # transient faults re-run the step (defs/stage_asset.py)
    partitions_def=source_partitions,
    deps=[UPSTREAM],  # the same partitions definition: partition k reads cleaned_documents[k]
    check_specs=SIGNATURE_CHECKS,
    group_name="dedup",
    kinds={"parquet"},
    code_version="1",
    description=(
        "Per document of one cleaned partition, what dedup's global pass needs without the text: id, "
        "source, row, exact key, keep-policy value, MinHash signature (or SimHash), shingle count, image "
        "phash, and the distinct shingle hashes for exact verification. `_keys_of.json` names the cleaned "
        "version and the dedup settings they were computed from (other ones make them stale)."
    ),
)
def dedup_signatures(context: dg.AssetExecutionContext, pipeline: PipelineResource) -> dg.MaterializeResult:
    key = context.partition_key
    ctx = stage_context(pipeline, "dedup_signatures", key)
    cfg = ctx.cfg
    try:
        cfg.source_partition(key)
    except PartitionKeyError as err:
        raise dg.Failure(f"{err} ({pipeline.config_path})", allow_retries=False) from None
    in_rel = ctx.input_dir(UPSTREAM, key)
    if not ctx.storage.exists(f"{in_rel}/{MANIFEST_FILE}"):
        raise dg.Failure(f"{UPSTREAM} has no documents for: {key} (materialize that partition first)",
                         allow_retries=False)
    stage = run_stage("dedup_signatures",
                      lambda: write_signature_partition(ctx.storage, in_rel, ctx.rel, cfg.dedup, cfg.io))
    context.log.info(f"dedup_signatures[{key}]: {stage.rows} documents, {stage.with_shingles} with shingles, "
                     f"{stage.with_phash} with an image hash")
    checks = evaluate_signature_checks(ctx.storage, in_rel, ctx.rel, cfg.io)
    return stage_result(ctx, stage, {"partition": key}, checks, preview=["id", "source", "row", "n_shingles"])
