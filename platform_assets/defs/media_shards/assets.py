"""media_shards: the image, PDF-page and audio documents of every split and source as WebDataset tars
and Parquet with binary columns, each format with an index.json (samples, bytes, sha256 per shard)."""

import dagster as dg
import pyarrow as pa

from platform_assets.charts import bar_chart_markdown
from platform_assets.defs.media_shards.checks import MEDIA_CHECKS, evaluate_media_checks
from platform_assets.defs.metadata import arrow_table, column_schema
from platform_assets.defs.resources import PipelineResource
from platform_assets.defs.stage_asset import TRANSIENT_RETRY, run_stage, stage_context, stage_result
from platform_assets.ingest.readers import source_directory
from platform_assets.media_shards.formats import MediaSetHeader
from platform_assets.media_shards.formats.parquet import arrow_schema
from platform_assets.media_shards.stage import write_media_shards
from platform_assets.media_shards.stats import DURATION_EDGES, IMAGE_SIDE_EDGES, ordered

MODALITIES = ("image", "pdf", "audio")


@dg.asset(
    retry_policy=TRANSIENT_RETRY,  # transient faults re-run the step (defs/stage_asset.py)
    deps=["dataset_splits"],
    check_specs=MEDIA_CHECKS,
    group_name="media",
    kinds={"parquet", "webdataset"},
    code_version="1",
    description="Image, PDF-page and audio documents of dataset_splits per (split, source) as WebDataset tars "
                "(key = document id) and Parquet readable by `datasets` (Image/Audio features embedded), each "
                "format with index.json (samples, bytes, sha256 per shard); text documents go to packed_shards.",
)
def media_shards(context: dg.AssetExecutionContext, pipeline: PipelineResource) -> dg.MaterializeResult:
    ctx = stage_context(pipeline, "media_shards")
    cfg, storage, rel = ctx.cfg, ctx.storage, ctx.rel
    settings = cfg.media_shards
    # uris relative to each source's directory: the shard set (and its DVC version) must not depend on
    # where the corpus is checked out
    bases = {name: source_directory(cfg, name) for name in cfg.source_names()}
    result = run_stage("media_shards", lambda: write_media_shards(
        storage, ctx.input_dir("dataset_splits"), rel, settings, cfg.io, bases))
    c = result.counts
    context.log.info(f"{c.samples} media samples in {len(result.sets)} sets ({dict(c.modalities)}); "
                     f"{c.text_documents} text documents left to packed_shards, {sum(c.excluded.values())} excluded")
    sets = pa.Table.from_pylist([{"split": s.split, "source": s.source, "samples": s.samples, "shards": s.shards,
                                  "payload_bytes": s.payload_bytes,
                                  **{m: s.modalities.get(m, 0) for m in MODALITIES}} for s in result.sets])
    widths, heights = ordered(c.image_widths, IMAGE_SIDE_EDGES), ordered(c.image_heights, IMAGE_SIDE_EDGES)
    durations = ordered(c.audio_durations, DURATION_EDGES, " s")
    metadata = {
        "dagster/column_schema": column_schema(arrow_schema(MediaSetHeader(settings.audio_features == "whisper"))),
        "per_split_and_source": arrow_table(sets),
        "samples_per_modality": dg.MetadataValue.md(bar_chart_markdown(
            "samples per modality", list(MODALITIES), [c.modalities.get(m, 0) for m in MODALITIES])),
        "bytes_per_format": dg.MetadataValue.md(bar_chart_markdown(
            "shard bytes per format", list(result.format_bytes), list(result.format_bytes.values()))),
        "image_sizes": dg.MetadataValue.md(bar_chart_markdown(
            "images and pages by width / height (px)", [f"width {w}" for w in widths[0]]
            + [f"height {h}" for h in heights[0]], widths[1] + heights[1])),
        "audio_durations": dg.MetadataValue.md(bar_chart_markdown("audio clips by duration", *durations)),
        "shard_max_bytes": settings.shard_max_bytes,
        "shard_max_samples": settings.shard_max_samples,
    }
    return stage_result(ctx, result, metadata, evaluate_media_checks(storage, rel))
