"""dataset_splits: train / validation / test by a seeded hash of the document id, leak-checked."""

import dagster as dg

from platform_assets.defs.dataset_splits.checks import SPLIT_CHECKS, evaluate_split_checks
from platform_assets.defs.metadata import counts_table
from platform_assets.defs.resources import PipelineResource
from platform_assets.defs.stage_asset import TRANSIENT_RETRY, run_stage, stage_context, stage_result
from platform_assets.splits.stage import split_outputs
from platform_assets.stats.report import labels_markdown, strata_markdown


@dg.asset(
    retry_policy=TRANSIENT_RETRY,  # transient faults re-run the step (defs/stage_asset.py)
    deps=["deduplicated_documents"],
    check_specs=SPLIT_CHECKS,
    group_name="dedup",
    kinds={"parquet"},
    # Runs once every upstream partition exists and none is in progress, after any of them changed:
    # the daily refresh or the file sensor re-ingests sources, then this follows by itself.
    automation_condition=dg.AutomationCondition.eager(),
    code_version="1",
    description=(
        "Deduplicated documents with a `split` column: a seeded hash of the id decides, so adding "
        "documents never moves existing ones. Blocking check: no duplicate crosses splits. Metadata: "
        "documents per stratum (splits.stratify_by) and the label distribution (statistics.label_field)."
    ),
)
def dataset_splits(context: dg.AssetExecutionContext, pipeline: PipelineResource) -> dg.MaterializeResult:
    ctx = stage_context(pipeline, "dataset_splits")
    cfg = ctx.cfg
    stage = run_stage("dataset_splits", lambda: split_outputs(
        ctx.storage, ctx.input_dir("deduplicated_documents"), ctx.rel, cfg.splits, cfg.io, cfg.statistics))
    context.log.info(f"splits: {stage.counts}")
    metadata = {"documents_per_split": counts_table(stage.counts, "split", "documents"),
                "seed": cfg.splits.seed, "stratify_by": cfg.splits.stratify_by or "none"}
    if cfg.splits.stratify_by:
        metadata["strata"] = dg.MetadataValue.md(strata_markdown(cfg.splits.stratify_by, stage.strata,
                                                                 stage.strata_total))
        metadata["strata_counts"] = dg.MetadataValue.json({"total": stage.strata_total, "shown": stage.strata})
    if stage.labels is not None:
        k = cfg.statistics.label_top_k
        metadata["label_distribution"] = dg.MetadataValue.md(labels_markdown(stage.labels, k))
        metadata["label_counts"] = dg.MetadataValue.json(stage.labels.to_dict(k))
    return stage_result(ctx, stage, metadata, evaluate_split_checks(ctx.storage, ctx.rel, stage, cfg))
