"""Gates on dedup_signatures (blocking: dedup must never decide on keys that miss a document)."""

from __future__ import annotations

import dagster as dg

from platform_assets.contracts import IOSettings
from platform_assets.dedup.signature_partition import ids_digest
from platform_assets.parquet_parts import TableSource
from platform_assets.storage import Storage

ASSET = "dedup_signatures"

SIGNATURE_CHECKS = [
    dg.AssetCheckSpec("signatures_cover_cleaned", asset=ASSET, blocking=True,
                      description="One row of keys per cleaned document of the partition: the same number "
                                  "of rows and the same ids in the same order."),
]


def evaluate_signature_checks(storage: Storage, cleaned_rel: str, keys_rel: str,
                              io: IOSettings) -> list[dg.AssetCheckResult]:
    cleaned_rows, cleaned_ids = ids_digest(TableSource(storage, cleaned_rel, io).batches(["id"]))
    keys_rows, keys_ids = ids_digest(TableSource(storage, keys_rel, io).batches(["id"]))
    return [dg.AssetCheckResult(
        check_name="signatures_cover_cleaned",
        passed=(cleaned_rows, cleaned_ids) == (keys_rows, keys_ids),
        metadata={"cleaned_rows": cleaned_rows, "signature_rows": keys_rows, "ids_equal": cleaned_ids == keys_ids},
    )]
