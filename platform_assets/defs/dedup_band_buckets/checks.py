"""Gate on dedup_band_buckets (blocking: the global pass must never pair documents by a broken bucket).

One evaluation per run, over every bucket the run materialized. Dagster 1.13 takes one
AssetCheckResult per check per step (a second one fails the step: "returned an output ... multiple
times"), and records a check's partition only when the run has a single partition key and the spec a
`partitions_def` (a preview): in a range run (the CLI's, a single-run backfill's) it records one
unpartitioned evaluation and leaves the planned per-partition rows PLANNED. So the spec is unpartitioned,
and its metadata names each failing bucket.
"""

from __future__ import annotations

import dagster as dg

from platform_assets.dedup.bucket_audit import SharedKeysAudit

ASSET = "dedup_band_buckets"

BAND_BUCKET_CHECKS = [
    dg.AssetCheckSpec("shared_keys_are_shared", asset=ASSET, blocking=True,
                      description="In every bucket the run materialized: each key is held by two or more "
                                  "distinct documents, each document number lies within the numbering its "
                                  "_bucket_of.json records, keys are numbered 0..K-1, and the rows and keys "
                                  "written are those the materialization reports."),
]


def shared_keys_check(audits: list[SharedKeysAudit]) -> dg.AssetCheckResult:
    failing = [a for a in audits if not a.passed]
    return dg.AssetCheckResult(
        check_name="shared_keys_are_shared",
        passed=bool(audits) and not failing,
        metadata={
            "buckets_checked": ", ".join(a.bucket for a in audits),
            "pairs": sum(a.pairs for a in audits),
            "keys": sum(a.keys for a in audits),
            "keys_held_by_one_document": sum(a.keys_held_by_one_document for a in audits),
            "documents_out_of_range": sum(a.documents_out_of_range for a in audits),
            "failed_buckets": ", ".join(a.bucket for a in failing),
            "problems": "; ".join(f"{a.bucket}: {', '.join(a.problems)}" for a in failing) or "none",
        },
    )
