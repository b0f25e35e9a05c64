"""cleaned_documents: normalised, boilerplate-free, language-tagged, quality-filtered, PII-redacted."""

import dagster as dg

from platform_assets.charts import bar_chart_markdown
from platform_assets.cleaning.stage import clean_output
from platform_assets.contracts import EXCLUSIONS_FILE, PART_GLOB
from platform_assets.defs.cleaned_documents.checks import CLEANING_CHECKS, evaluate_cleaning_checks
from platform_assets.defs.metadata import counts_table
from platform_assets.defs.raw_documents.partitions import source_partitions
from platform_assets.defs.resources import PipelineResource
from platform_assets.defs.stage_asset import TRANSIENT_RETRY, run_stage, stage_context, stage_result
from platform_assets.ingest.file_partitions import PartitionKeyError
from platform_assets.spot_checks import spot_check, to_markdown


@dg.asset(
    retry_policy=TRANSIENT_RETRY,  # transient faults re-run the step (defs/stage_asset.py)
    partitions_def=source_partitions,
    deps=["raw_documents"],
    check_specs=CLEANING_CHECKS,
    group_name="clean",
    kinds={"parquet"},
    code_version="1",
    description=(
        "One source's documents after the cleaning steps of its recipe (`recipe:`; guard, HTML main text, "
        "normalisation, chat turn checks, language ID, quality presets, blocklist, PII redaction), with "
        "`lang`, `lang_score` and `pii_redactions` columns. Every removed document is in "
        "_exclusions.parquet with its rule and value."
    ),
)
def cleaned_documents(context: dg.AssetExecutionContext, pipeline: PipelineResource) -> dg.MaterializeResult:
    key = context.partition_key  # a source's name, or `<source>.<k>` for a file partition of a split source
    ctx = stage_context(pipeline, "cleaned_documents", key)
    cfg = ctx.cfg
    try:
        source = cfg.source_partition(key).source
    except PartitionKeyError as err:
        raise dg.Failure(f"{err} ({pipeline.config_path})", allow_retries=False) from None
    in_rel = ctx.input_dir("raw_documents", key)
    recipe = cfg.cleaning_recipe(source)  # the source's `recipe:` (cleaning/recipes.py), its gates with it
    stage = run_stage("cleaned_documents", lambda: clean_output(ctx.storage, in_rel, ctx.rel,
                                                                recipe.settings, cfg.io))
    funnel = stage.funnel
    context.log.info(f"{key} (recipe {recipe.name}): {funnel.docs_in} in, {funnel.docs_out} out, "
                     f"removed {funnel.removed_by_rule()}")
    removed = {rule: v["docs"] for rule, v in funnel.removed_by_rule().items()}
    counters = funnel.counters()
    metadata = {
        "source": source,
        **({"partition": key} if key != source else {}),
        "recipe": recipe.name,
        "funnel": dg.MetadataValue.md(funnel.to_markdown()),
        "funnel_chart": dg.MetadataValue.md(bar_chart_markdown(
            f"{key}: documents in, removed per rule, out",
            ["in", *removed, "out"], [funnel.docs_in, *removed.values(), funnel.docs_out])),
        "removed_by_rule": counts_table(removed, "rule", "documents"),
        "pii_redactions": counts_table({k.removeprefix("pii."): v for k, v in counters.items()
                                        if k.startswith("pii.") and k != "pii.docs_with_pii"}, "type"),
    }
    # what each rule removed, 3 documents a rule with the value and the raw text: a spot check in the UI
    sample = spot_check(ctx.storage, n=60, per_rule=3, stages=("cleaning_exclusions",), views={
        "raw_documents": (in_rel, PART_GLOB), "cleaning_exclusions": (ctx.rel, EXCLUSIONS_FILE)})
    metadata["spot_checks"] = dg.MetadataValue.md(to_markdown(sample) if sample else "nothing removed")
    # and 10 kept documents by the same hash, with their cleaned text: what the rules let through
    kept = spot_check(ctx.storage, n=10, kept=True, kept_view="cleaned_documents",
                      views={"cleaned_documents": (ctx.rel, PART_GLOB)})
    metadata["spot_checks_kept"] = dg.MetadataValue.md(to_markdown(kept) if kept else "nothing kept")
    checks = evaluate_cleaning_checks(ctx.storage, ctx.rel, funnel, cfg, in_rel, source=source, recipe=recipe)
    return stage_result(ctx, stage, metadata, checks, preview=["id", "lang", "lang_score", "text"])
