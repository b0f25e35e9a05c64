"""raw_documents: every configured source read into the documents schema, bad input quarantined."""


import dagster as dg

from platform_assets.config import ConfigError
from platform_assets.defs.metadata import counts_table, markdown_preview, output_metadata
from platform_assets.defs.raw_documents.checks import RAW_DOCUMENT_CHECKS, evaluate_raw_document_checks
from platform_assets.defs.raw_documents.partitions import source_partitions
from platform_assets.defs.resources import PipelineResource
from platform_assets.ingest.readers.huggingface import DatasetLoadError
from platform_assets.ingest.run import QUARANTINE_FILE, ingest_source
from platform_assets.layout import asset_dir
from platform_assets.schema import DOCUMENTS_SCHEMA, QuarantineReason
from platform_assets.storage import manifest_version


@dg.asset(
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
    cfg = pipeline.config()
    source = context.partition_key
    if source not in cfg.source_names():
        raise dg.Failure(f"partition {source!r} is not a source of {pipeline.config_path} "
                         f"(configured: {', '.join(cfg.source_names())}); remove the partition or add the source")
    storage = pipeline.storage(cfg)
    rel = asset_dir("raw_documents", source)
    try:
        result = ingest_source(cfg, source, storage, rel, pipeline.s3_settings(cfg))
    except (ConfigError, DatasetLoadError) as err:
        raise dg.Failure(description=str(err)) from None
    context.log.info(f"{source}: {result.rows} documents, {result.quarantined} quarantined "
                     f"from {result.input_files} input files")
    metadata = output_metadata(storage, rel, result.files, DOCUMENTS_SCHEMA, result.rows)
    metadata.update(
        {
            "source": source,
            "input_files": result.input_files,
            "text_bytes": result.text_bytes,
            "quarantined": result.quarantined,
            "quarantine_by_reason": counts_table(
                {r: result.quarantine_counts.get(r, 0) for r in QuarantineReason.all()
                 if result.quarantine_counts.get(r)}, "reason"),
            "quarantine_uri": dg.MetadataValue.path(storage.uri(f"{rel}/{QUARANTINE_FILE}")),
        }
    )
    if result.parts:
        metadata["preview"] = dg.MetadataValue.md(
            markdown_preview(storage, f"{rel}/{result.parts[0]}", ["id", "uri", "modality", "text"]))
    return dg.MaterializeResult(
        metadata=metadata,
        data_version=dg.DataVersion(manifest_version(result.files)),
        check_results=evaluate_raw_document_checks(storage, rel, result, cfg),
    )
