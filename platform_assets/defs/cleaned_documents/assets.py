"""cleaned_documents: normalised, boilerplate-free, language-tagged, quality-filtered, PII-redacted."""

import dagster as dg

from platform_assets.charts import bar_chart_markdown
from platform_assets.cleaning.stage import EXCLUSIONS_FILE, clean_output
from platform_assets.defs.cleaned_documents.checks import CLEANING_CHECKS, evaluate_cleaning_checks
from platform_assets.defs.metadata import counts_table, markdown_preview, output_metadata
from platform_assets.defs.raw_documents.partitions import source_partitions
from platform_assets.defs.resources import PipelineResource
from platform_assets.layout import asset_dir
from platform_assets.storage import manifest_version


@dg.asset(
    partitions_def=source_partitions,
    deps=["raw_documents"],
    check_specs=CLEANING_CHECKS,
    group_name="clean",
    kinds={"parquet"},
    code_version="1",
    description=(
        "One source's documents after the cleaning steps (guard, HTML main text, normalisation, "
        "language ID, quality presets, blocklist, PII redaction), with `lang`, `lang_score` and "
        "`pii_redactions` columns. Every removed document is in _exclusions.parquet with its rule and value."
    ),
)
def cleaned_documents(context: dg.AssetExecutionContext, pipeline: PipelineResource) -> dg.MaterializeResult:
    cfg = pipeline.config()
    storage = pipeline.storage(cfg)
    source = context.partition_key
    rel = asset_dir("cleaned_documents", source)
    stage = clean_output(storage, asset_dir("raw_documents", source), rel, cfg.cleaning_settings(),
                         cfg.io.batch_rows, cfg.io.compression, cfg.io.part_max_bytes)
    funnel = stage.funnel
    context.log.info(f"{source}: {funnel.docs_in} in, {funnel.docs_out} out, removed {funnel.removed_by_rule()}")
    metadata = output_metadata(storage, rel, stage.files, stage.schema, stage.rows_out)
    removed = {rule: v["docs"] for rule, v in funnel.removed_by_rule().items()}
    counters = funnel.counters()
    metadata.update({
        "source": source,
        "docs_in": funnel.docs_in,
        "bytes_in": funnel.bytes_in,
        "bytes_out": funnel.bytes_out,
        "removal_rate": round(funnel.removal_rate(), 6),
        "funnel": dg.MetadataValue.md(funnel.to_markdown()),
        "funnel_chart": dg.MetadataValue.md(bar_chart_markdown(
            f"{source}: documents in, removed per rule, out",
            ["in", *removed, "out"], [funnel.docs_in, *removed.values(), funnel.docs_out])),
        "removed_by_rule": counts_table(removed, "rule", "documents"),
        "pii_redactions": counts_table({k.removeprefix("pii."): v for k, v in counters.items()
                                        if k.startswith("pii.") and k != "pii.docs_with_pii"}, "type"),
        "exclusions_uri": dg.MetadataValue.path(storage.uri(f"{rel}/{EXCLUSIONS_FILE}")),
    })
    if stage.parts:
        metadata["preview"] = dg.MetadataValue.md(
            markdown_preview(storage, f"{rel}/{stage.parts[0]}", ["id", "lang", "lang_score", "text"]))
    return dg.MaterializeResult(
        metadata=metadata,
        data_version=dg.DataVersion(manifest_version(stage.files)),
        check_results=evaluate_cleaning_checks(storage, rel, funnel, cfg),
    )
