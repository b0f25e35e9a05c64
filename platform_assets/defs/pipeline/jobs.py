"""Jobs over the asset graph: the per-source chain runs once per source partition, then the corpus
stages, the release (DVC version) and training, each a job of its own so each can run on its own:
re-pack without retraining, retrain on the same version without re-versioning."""

import dagster as dg

# dedup_signatures is per source too: the file sensor and the daily schedule request this job, so a
# source's dedup keys are recomputed whenever its cleaned partition is
PER_SOURCE_ASSETS = dg.AssetSelection.assets("raw_documents", "cleaned_documents", "dedup_signatures")
# static bucket partitions: a job of their own (a job cannot mix partitions definitions), run before corpus_job
BAND_BUCKET_ASSETS = dg.AssetSelection.assets("dedup_band_buckets")
CORPUS_ASSETS = dg.AssetSelection.assets(
    "deduplicated_documents", "dataset_splits", "tokenizer", "tokenized_documents", "packed_shards", "media_shards")
RELEASE_ASSETS = dg.AssetSelection.assets("dataset_version")
TRAINING_ASSETS = dg.AssetSelection.assets("training_run")

per_source_job = dg.define_asset_job(
    "per_source_job",
    selection=PER_SOURCE_ASSETS,  # partitioned by source, like the assets it selects
    description="Ingest and clean one source partition, and compute its documents' dedup keys.",
)

band_buckets_job = dg.define_asset_job(
    "band_buckets_job",
    selection=BAND_BUCKET_ASSETS,  # partitioned by bucket (b000 ..), like the asset it selects
    description="Group bucket partitions of the LSH band values every source's dedup_signatures wrote (one, or "
                "a range in one run, each bucket its own output); deduplicated_documents reads all of them.",
)

corpus_job = dg.define_asset_job(
    "corpus_job",
    selection=CORPUS_ASSETS,
    description="Deduplicate across all sources, split, train/load the tokenizer, tokenize and pack into shards, "
                "and write the media documents as media shards; needs every source's cleaned partition.",
)

release_job = dg.define_asset_job(
    "release_job",
    selection=RELEASE_ASSETS,
    description="Record the packed shards (and the media shards) as DVC versions and push them to the remote.",
)

training_job = dg.define_asset_job(
    "training_job",
    selection=TRAINING_ASSETS,
    description="Train on the current dataset version (resumes its latest checkpoint).",
)
