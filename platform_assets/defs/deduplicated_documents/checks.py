"""Quality gates on deduplicated_documents (all blocking: dataset_splits must not see a bad dedup)."""

from __future__ import annotations

import dagster as dg
import numpy as np

from platform_assets.contracts import IOSettings
from platform_assets.dedup.batch_slices import text_row_slices
from platform_assets.dedup.exact import key_words
from platform_assets.dedup.keys import MEDIA_KEY_COLUMNS, exact_keys
from platform_assets.dedup.settings import DedupSettings
from platform_assets.dedup.stage import DedupStageResult
from platform_assets.ingest.validation import duplicate_ids
from platform_assets.parquet_parts import TableSource, output_schema
from platform_assets.storage import Storage

ASSET = "deduplicated_documents"

DEDUP_CHECKS = [
    dg.AssetCheckSpec("ids_unique", asset=ASSET, blocking=True,
                      description="No document id appears twice across all sources."),
    dg.AssetCheckSpec("no_exact_duplicates_remain", asset=ASSET, blocking=True,
                      description="No two kept documents have the same normalised text."),
    dg.AssetCheckSpec("removal_rate_within_bounds", asset=ASSET, blocking=True,
                      description="Removed documents are at most `dedup.max_removed_fraction` of the input."),
]


def exact_duplicate_groups(storage: Storage, rel: str, settings: DedupSettings, io: IOSettings) -> int:
    """Groups of kept documents sharing an exact key: the text's for text, the media bytes' for media
    (two different images with one caption are two documents), as dedup keys them (dedup/keys.py).
    Texts are read in batches of ~`io.batch_bytes`, only their keys kept (with a fixed 8,192 rows the check
    added 343 MB of peak RSS on the 16x pipeline_scaling input, against 44 MB at 1x)."""
    schema = output_schema(storage, rel)
    names = schema.names if schema is not None else []
    columns = ["text", *(["modality"] if "modality" in names else []), *(MEDIA_KEY_COLUMNS if "media" in names else ())]
    # read and keyed per `dedup.slice_bytes` of text: the text and its copies stay per slice, not per batch
    key_io = io.model_copy(update={"batch_bytes": min(io.batch_bytes, settings.slice_bytes)})
    # each key's 16 bytes as two uint64 words, sorted: equal neighbours are the duplicates. Arrow's
    # count_distinct of the keys held a hash table of them all: +55 MB at pipeline_scaling's 1x, +109
    # at 16x (336k documents), where the check was the stage's peak
    # copies, not views of the batches' buffers: those are released
    keys = [key_words(exact_keys(piece, settings.exact)).copy()
            for b in TableSource(storage, rel, key_io).batches(columns)
            for piece in text_row_slices(b, settings.slice_bytes)]
    if not keys:
        return 0
    ordered = np.sort(np.concatenate(keys).view([("high", "<u8"), ("low", "<u8")]).ravel())
    del keys
    return int((ordered[1:] == ordered[:-1]).sum())


def evaluate_dedup_checks(storage: Storage, rel: str, stage: DedupStageResult,
                          settings: DedupSettings, io: IOSettings) -> list[dg.AssetCheckResult]:
    # the costlier check first, while the heap holds least: in the other order, pipeline_scaling's 16x
    # (336k documents) peaked at 389 MB in-process in this check (1x 340), 378-380 in this one
    exact_left = exact_duplicate_groups(storage, rel, settings, io)
    dups = duplicate_ids(storage, rel)
    removed = stage.rows_in - (stage.rows_out - stage.carried_over)
    fraction = removed / stage.rows_in if stage.rows_in else 0.0
    return [
        dg.AssetCheckResult(check_name="ids_unique", passed=dups.duplicates == 0,
                            metadata={"rows": dups.rows, "distinct_ids": dups.distinct}),
        dg.AssetCheckResult(check_name="no_exact_duplicates_remain", passed=exact_left == 0,
                            metadata={"duplicate_texts": exact_left}),
        dg.AssetCheckResult(check_name="removal_rate_within_bounds", passed=fraction <= settings.max_removed_fraction,
                            metadata={"removed": removed, "input": stage.rows_in, "fraction": round(fraction, 6),
                                      "bound": settings.max_removed_fraction}),
    ]
