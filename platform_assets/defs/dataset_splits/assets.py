"""dataset_splits: train / validation / test by a seeded hash of the document id, leak-checked."""

import dagster as dg

from platform_assets.defs.dataset_splits.checks import SPLIT_CHECKS, evaluate_split_checks
from platform_assets.defs.metadata import counts_table, output_metadata
from platform_assets.defs.resources import PipelineResource
from platform_assets.layout import asset_dir
from platform_assets.splits.stage import split_outputs
from platform_assets.storage import manifest_version


@dg.asset(
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
        "documents never moves existing ones. Blocking check: no duplicate crosses splits."
    ),
)
def dataset_splits(context: dg.AssetExecutionContext, pipeline: PipelineResource) -> dg.MaterializeResult:
    cfg = pipeline.config()
    storage = pipeline.storage(cfg)
    rel = asset_dir("dataset_splits")
    try:
        stage = split_outputs(storage, asset_dir("deduplicated_documents"), rel, cfg.splits, cfg.dedup.batch_rows,
                              cfg.ingest.compression, cfg.ingest.part_max_bytes)
    except ValueError as err:
        raise dg.Failure(str(err)) from None
    context.log.info(f"splits: {stage.counts}")
    metadata = output_metadata(storage, rel, stage.files, stage.schema, stage.rows)
    metadata.update({"documents_per_split": counts_table(stage.counts, "split", "documents"),
                     "seed": cfg.splits.seed, "stratify_by": cfg.splits.stratify_by or "none"})
    return dg.MaterializeResult(
        metadata=metadata,
        data_version=dg.DataVersion(manifest_version(stage.files)),
        check_results=evaluate_split_checks(storage, rel, stage, cfg),
    )
