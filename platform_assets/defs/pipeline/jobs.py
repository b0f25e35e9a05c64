"""Jobs over the asset graph: the per-source chain runs once per source partition."""

import dagster as dg

PER_SOURCE_ASSETS = dg.AssetSelection.assets("raw_documents", "cleaned_documents")
CORPUS_ASSETS = dg.AssetSelection.assets("deduplicated_documents", "dataset_splits")

per_source_job = dg.define_asset_job(
    "per_source_job",
    selection=PER_SOURCE_ASSETS,  # partitioned by source, like the assets it selects
    description="Ingest and clean one source partition.",
)

corpus_job = dg.define_asset_job(
    "corpus_job",
    selection=CORPUS_ASSETS,
    description="Deduplicate across all sources and split; needs every source's cleaned partition.",
)
