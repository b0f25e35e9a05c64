"""deduplicated_documents: exact + MinHash-LSH near dedup across every source, before splitting, from
every source's dedup_signatures (the keys; the text is read again only to write the kept documents) and
the shared band keys of every dedup_band_buckets partition (`near.storage.type: disk`, MinHash)."""

import dagster as dg
import pyarrow.compute as pc

from platform_assets.charts import bar_chart_markdown
from platform_assets.contracts import DUPLICATES_FILE, EXCLUSIONS_FILE, MANIFEST_FILE, PART_GLOB, SIGNATURES_FILE
from platform_assets.dedup.band_partitions import bucket_keys
from platform_assets.dedup.stage import deduplicate_outputs
from platform_assets.defs.deduplicated_documents.checks import DEDUP_CHECKS, evaluate_dedup_checks
from platform_assets.defs.metadata import arrow_table, counts_table
from platform_assets.defs.resources import PipelineResource
from platform_assets.defs.stage_asset import TRANSIENT_RETRY, run_stage, stage_context, stage_result
from platform_assets.query import key_globs
from platform_assets.spot_checks import spot_check, to_markdown

UPSTREAM = "cleaned_documents"
SIGNATURES = "dedup_signatures"  # each cleaned partition's keys: the first pass reads them, not the text
BUCKETS = "dedup_band_buckets"  # the LSH band values documents share, grouped per bucket partition


def _top_clusters_markdown(duplicates, limit: int = 5) -> str:
    if duplicates.num_rows == 0:
        return "_no duplicates_"
    sizes = duplicates.group_by("cluster_id").aggregate([("removed_id", "count")]).sort_by(
        [("removed_id_count", "descending"), ("cluster_id", "ascending")]).slice(0, limit)
    lines = ["| cluster (kept id) | removed | sources of removed |", "|---|---|---|"]
    for row in sizes.to_pylist():
        members = duplicates.filter(pc.equal(duplicates["cluster_id"], row["cluster_id"]))
        sources = sorted(set(members["removed_source"].to_pylist()))
        lines.append(f"| {row['cluster_id']} | {row['removed_id_count']} | {', '.join(sources)} |")
    return "\n".join(lines)


@dg.asset(
    retry_policy=TRANSIENT_RETRY,  # transient faults re-run the step (defs/stage_asset.py)
    deps=[dg.AssetDep(UPSTREAM, partition_mapping=dg.AllPartitionMapping()),
          dg.AssetDep(SIGNATURES, partition_mapping=dg.AllPartitionMapping()),
          dg.AssetDep(BUCKETS, partition_mapping=dg.AllPartitionMapping())],
    check_specs=DEDUP_CHECKS,
    group_name="dedup",
    kinds={"parquet"},
    # Runs once every upstream partition exists and none is in progress, after any of them changed:
    # the daily refresh or the file sensor re-ingests sources, then this follows by itself.
    automation_condition=dg.AutomationCondition.eager(),
    code_version="1",
    description=(
        "All sources' cleaned documents with exact duplicates (normalised-text hash) and near "
        "duplicates (MinHash-LSH, verified) removed, keeping one member per cluster by the "
        "configured policy. Beside the parts: _exclusions, _duplicates and _signatures (the LSH "
        "artifact for incremental runs)."
    ),
)
def deduplicated_documents(context: dg.AssetExecutionContext, pipeline: PipelineResource) -> dg.MaterializeResult:
    ctx = stage_context(pipeline, "deduplicated_documents")
    cfg, storage, rel = ctx.cfg, ctx.storage, ctx.rel
    inputs = [ctx.input_dir(UPSTREAM, k) for k in cfg.partition_keys()]  # file partitions of split sources too
    missing = [d for d in inputs if not storage.exists(f"{d}/{MANIFEST_FILE}")]  # committed, maybe empty
    if missing:
        raise dg.Failure(f"{UPSTREAM} has no documents for: {', '.join(d.split('/')[-1] for d in missing)} "
                         "(materialize those partitions first, or remove the sources)", allow_retries=False)
    keys = [ctx.input_dir(SIGNATURES, k) for k in cfg.partition_keys()]
    buckets = [ctx.input_dir(BUCKETS, b) for b in bucket_keys()]
    # a missing or stale signature or bucket partition: deduplicate_outputs raises StaleSignaturesError or
    # StaleBandBucketsError naming them, ValueErrors that run_stage makes a Failure without retries
    stage = run_stage("deduplicated_documents", lambda: deduplicate_outputs(
        storage, inputs, rel, cfg.dedup, cfg.io, signature_dirs=keys, bucket_dirs=buckets))
    result = stage.result
    counts = result.counts.as_dict()
    context.log.info(f"dedup: {stage.rows_in} in, {stage.rows_out} out; {counts}")
    histogram = result.cluster_size_histogram().to_pylist()
    metadata = {
        "removed_per_source": arrow_table(result.removed_per_source()),
        "cluster_sizes": counts_table({str(r["cluster_size"]): r["clusters"] for r in histogram}, "cluster_size",
                                      "clusters"),
        "cluster_size_chart": dg.MetadataValue.md(bar_chart_markdown(
            "clusters by size (kept + removed members)", [str(r["cluster_size"]) for r in histogram],
            [r["clusters"] for r in histogram])),
        "top_clusters": dg.MetadataValue.md(_top_clusters_markdown(result.duplicates)),
        "duplicates_uri": dg.MetadataValue.path(storage.uri(f"{rel}/{DUPLICATES_FILE}")),
        "signatures_uri": dg.MetadataValue.path(storage.uri(f"{rel}/{SIGNATURES_FILE}")),
    }
    # 3 removed documents a rule, with the cleaned text dedup compared: a spot check in the UI
    sample = spot_check(storage, n=30, per_rule=3, stages=("dedup_exclusions",), views={
        "cleaned_documents": (UPSTREAM, key_globs(cfg.partition_keys(), PART_GLOB)),
        "dedup_exclusions": (rel, EXCLUSIONS_FILE)})
    metadata["spot_checks"] = dg.MetadataValue.md(to_markdown(sample) if sample else "nothing removed")
    kept = spot_check(storage, n=10, kept=True, kept_view="deduplicated_documents",
                      views={"deduplicated_documents": (rel, PART_GLOB)})
    metadata["spot_checks_kept"] = dg.MetadataValue.md(to_markdown(kept) if kept else "nothing kept")
    return stage_result(ctx, stage, metadata, evaluate_dedup_checks(storage, rel, stage, cfg.dedup, cfg.io))
