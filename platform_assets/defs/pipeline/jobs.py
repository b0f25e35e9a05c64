"""Jobs over the asset graph: the per-source chain runs once per source partition."""

import dagster as dg

PER_SOURCE_ASSETS = dg.AssetSelection.assets("raw_documents")

per_source_job = dg.define_asset_job(
    "per_source_job",
    selection=PER_SOURCE_ASSETS,  # partitioned by source, like the assets it selects
    description="Ingest (and, as stages land, clean) one source partition.",
)
