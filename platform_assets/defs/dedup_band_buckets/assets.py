"""dedup_band_buckets[b000 .. b007]: dedup's LSH band grouping as independent partitions (a backfill
runs them together or spreads them over runs and machines, by the backfill policy); deduplicated_documents
reads their shared keys."""

import hashlib
from dataclasses import replace

import dagster as dg
from dagster._core.storage.tags import ASSET_PARTITION_RANGE_END_TAG, ASSET_PARTITION_RANGE_START_TAG

from platform_assets.dedup.band_partitions import bucket_keys, group_band_bucket, uses_band_buckets
from platform_assets.dedup.bucket_audit import audit_shared_keys
from platform_assets.dedup.signature_partition import StaleSignaturesError, check_signature_partitions
from platform_assets.defs.dedup_band_buckets.checks import BAND_BUCKET_CHECKS, shared_keys_check
from platform_assets.defs.resources import PipelineResource
from platform_assets.defs.stage_asset import TRANSIENT_RETRY, run_stage, stage_context, stage_result
from platform_assets.layout import asset_dir

SIGNATURES = "dedup_signatures"

# Fixed in code (band_partitions.BAND_BUCKET_PARTITIONS): Dagster builds a partitions definition when it
# loads the code, before the pipeline config is read
band_bucket_partitions = dg.StaticPartitionsDefinition(bucket_keys())

# A backfill, or the automation sensor (it groups the partitions it requests by backfill policy),
# materializes every requested bucket in ONE run that groups them one after another, each into its own
# output as a run of that bucket alone would (same bytes, tested). Why one: on one machine a run costs
# more than a bucket's work. A daemon-launched run is a fresh process with ~4 s of imports; in process,
# the CLI's bucket step on the sample corpus took 1.8-2.3 s as 8 runs and 0.45-0.67 s as one (~0.2 s of
# run and step events per run; 10 A/B repeats on 2 cores at load 3-6), and the automation test's eager
# dedup came 137 -> 79 s after its backfill (tests/test_backfill_automation.py: the sensor's 8 bucket
# runs went 2 at a time).
# A large deployment where each bucket takes minutes on its own machine (the run launcher's) spreads
# them with `dg.BackfillPolicy.multi_run(max_partitions_per_run=1)`: one run per bucket, as before.
# A single bucket can always be materialized alone (the UI, `dg.materialize(partition_key=...)`).
BAND_BUCKETS_BACKFILL_POLICY = dg.BackfillPolicy.single_run()  # a beta parameter of dg.asset in 1.13

# The tags of a run over every bucket, as a single-run backfill tags its run (Dagster's partition range
# tags; `execute_in_process` / `dg.materialize` take them in place of `partition_key`): the CLI's run
ALL_BUCKETS_RUN_TAGS = {ASSET_PARTITION_RANGE_START_TAG: bucket_keys()[0],
                        ASSET_PARTITION_RANGE_END_TAG: bucket_keys()[-1]}


@dg.asset(
    retry_policy=TRANSIENT_RETRY,  # transient faults re-run the step (defs/stage_asset.py)
    partitions_def=band_bucket_partitions,
    backfill_policy=BAND_BUCKETS_BACKFILL_POLICY,
    deps=[dg.AssetDep(SIGNATURES, partition_mapping=dg.AllPartitionMapping())],
    check_specs=BAND_BUCKET_CHECKS,  # one evaluation per run, over every bucket it materialized (checks.py)
    group_name="dedup",
    kinds={"parquet"},
    # each bucket follows the signature partitions by itself, as deduplicated_documents then follows it
    automation_condition=dg.AutomationCondition.eager(),
    code_version="1",
    description=(
        "One bucket partition of the LSH band values of every document (`near.storage.type: disk`, MinHash): "
        "the (document, key) pairs of the values two or more documents share, grouped from the band records "
        "dedup_signatures stores per bucket (and, in incremental mode, from the accepted documents of earlier "
        "runs). With another storage or method an empty output that says so. A run over several buckets "
        "(a backfill, the automation sensor, the CLI) groups each on its own; each bucket's materialization "
        "carries its own figures."
    ),
)
def dedup_band_buckets(context: dg.AssetExecutionContext, pipeline: PipelineResource) -> dg.MaterializeResult:
    buckets = context.partition_keys  # one key, or the range a backfill policy put in this run
    ctx = stage_context(pipeline, "dedup_band_buckets")
    cfg, storage = ctx.cfg, ctx.storage
    keys_dirs = [asset_dir(SIGNATURES, k) for k in cfg.partition_keys()]
    try:  # once for every bucket of the run: they all read the same signature partitions
        if uses_band_buckets(cfg.dedup):
            check_signature_partitions(storage, [(asset_dir("cleaned_documents", k), d) for k, d in
                                                 zip(cfg.partition_keys(), keys_dirs, strict=True)], cfg.dedup)
    except StaleSignaturesError as err:
        raise dg.Failure(str(err), allow_retries=False) from None
    # incremental: the documents earlier runs accepted are grouped too (deduplicated_documents' artifact)
    prior_rel = asset_dir("deduplicated_documents") if cfg.dedup.incremental else None
    versions, shared, audits = [], 0, []
    for key in sorted(buckets):
        out = replace(ctx, rel=asset_dir("dedup_band_buckets", key))
        stage = run_stage("dedup_band_buckets", lambda out=out, key=key: group_band_bucket(
            storage, key, keys_dirs, out.rel, cfg.dedup, prior_rel, cfg.io))
        context.log.info(f"dedup_band_buckets[{key}]: {stage.reason}; {stage.shared_keys} shared keys")
        result = stage_result(out, stage, {"signature_partitions": len(keys_dirs)})
        # Each partition's materialization event gets its own bucket's figures (Dagster merges a
        # partition's added metadata over the result's, which carries none); its own content version too
        context.add_asset_metadata({**result.metadata, "bucket_version": result.data_version.value},
                                   partition_key=key)
        versions.append((key, result.data_version.value))
        shared += stage.shared_keys
        audits.append(audit_shared_keys(storage, out.rel, stage.rows, stage.shared_keys, cfg.io))
    if len(buckets) > 1:
        context.log.info(f"dedup_band_buckets: {len(buckets)} buckets in this run, {shared} shared keys")
    return dg.MaterializeResult(data_version=_run_data_version(versions), check_results=[shared_keys_check(audits)])


def _run_data_version(versions: list[tuple[str, str]]) -> dg.DataVersion:
    """The data version Dagster records on every partition a run materialized (one per output, not per
    partition): a bucket's own content version when the run had one bucket, as before; over several, a
    hash of every (bucket, version) pair in key order, which changes whenever any of them does, so a
    consumer never sees an unchanged version over changed bytes (each event's `bucket_version` is exact)."""
    if len(versions) == 1:
        return dg.DataVersion(versions[0][1])
    return dg.DataVersion(hashlib.sha256("".join(f"{k}\x00{v}\n" for k, v in versions).encode()).hexdigest()[:24])
