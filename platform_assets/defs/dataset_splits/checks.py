"""Quality gates on dataset_splits: no leakage (blocking), ratios as configured, unique ids."""

from __future__ import annotations

import math

import dagster as dg

from platform_assets.config import PipelineConfig
from platform_assets.ingest.validation import duplicate_ids
from platform_assets.splits.stage import SplitStageResult, check_split_leakage
from platform_assets.storage import Storage

ASSET = "dataset_splits"

SPLIT_CHECKS = [
    dg.AssetCheckSpec("no_split_leakage", asset=ASSET, blocking=True,
                      description="No exact duplicate in two splits (dedup's keys: text, or media bytes), no "
                                  "validation/test document a near duplicate (same MinHash-LSH and threshold as "
                                  "dedup) of a train document, and no two images in different splits within "
                                  "dedup.images.max_distance bits of phash."),
    dg.AssetCheckSpec("ids_unique", asset=ASSET, blocking=True, description="Every document is in one split once."),
    dg.AssetCheckSpec("split_ratios_within_tolerance", asset=ASSET,
                      description="Each split's share is within 4 binomial standard deviations (+1) of its ratio."),
]


def ratio_deviations(counts: dict[str, int], ratios: dict[str, float]) -> dict[str, tuple[int, float, float]]:
    """Per split: (count, expected, allowed deviation). A hash split is binomial: 4 sigma is a
    1-in-16,000 event, so a failure means a broken assignment, not bad luck."""
    n = sum(counts.values())
    return {name: (counts.get(name, 0), r * n, 4 * math.sqrt(n * r * (1 - r)) + 1) for name, r in ratios.items()}


def evaluate_split_checks(storage: Storage, rel: str, stage: SplitStageResult,
                          cfg: PipelineConfig) -> list[dg.AssetCheckResult]:
    leaks = check_split_leakage(storage, rel, cfg.dedup, cfg.splits, cfg.io)
    dups = duplicate_ids(storage, rel)
    deviations = ratio_deviations(stage.counts, cfg.splits.ratios.model_dump())
    examples = []
    for name, table in (("exact", leaks.exact_pairs), ("near", leaks.near_pairs), ("image", leaks.image_pairs)):
        for row in table.slice(0, 10).to_pylist():
            examples.append(f"{name}: " + ", ".join(f"{k}={v}" for k, v in row.items()))
    return [
        dg.AssetCheckResult(check_name="no_split_leakage", passed=leaks.ok,
                            metadata={"summary": leaks.summary(), **{k: int(v) for k, v in leaks.counts.items()},
                                      "examples": "\n".join(examples) or "none"}),
        dg.AssetCheckResult(check_name="ids_unique", passed=dups.duplicates == 0,
                            metadata={"rows": dups.rows, "distinct_ids": dups.distinct}),
        dg.AssetCheckResult(
            check_name="split_ratios_within_tolerance", severity=dg.AssetCheckSeverity.WARN,
            passed=all(abs(c - e) <= tol for c, e, tol in deviations.values()),
            metadata={name: f"{c} (expected {e:.1f} +- {tol:.1f})" for name, (c, e, tol) in deviations.items()},
        ),
    ]
