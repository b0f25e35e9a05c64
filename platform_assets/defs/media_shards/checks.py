"""Quality gates on media_shards: every shard matches its index, and every format holds the same samples."""

from pathlib import PurePosixPath

import dagster as dg

from platform_assets.media_shards.index import format_dirs, sample_ids, verify_media_shards
from platform_assets.storage import Storage

ASSET = "media_shards"

MEDIA_CHECKS = [
    dg.AssetCheckSpec("media_shards_verified", asset=ASSET, blocking=True,
                      description="Every shard file of every format has the size, sha256 and sample count its "
                                  "index.json records, the index's sums add up and no file is unlisted."),
    dg.AssetCheckSpec("media_formats_agree", asset=ASSET, blocking=True,
                      description="Every format holds the same document ids in the same shards, in the same order "
                                  "(read from the files, not from the indexes)."),
]


def evaluate_media_checks(storage: Storage, rel: str) -> list[dg.AssetCheckResult]:
    problems = verify_media_shards(storage, rel)
    dirs = format_dirs(storage, rel)
    ids = {PurePosixPath(d).name: sample_ids(storage.path(d), storage.fs) for d in dirs} if not problems else {}
    reference = next(iter(ids.values()), [])
    disagree = sorted(fmt for fmt, got in ids.items() if got != reference)
    return [
        dg.AssetCheckResult(check_name="media_shards_verified", passed=not problems,
                            metadata={"formats": ", ".join(PurePosixPath(d).name for d in dirs) or "none",
                                      "problems": "\n".join(problems[:20]) or "none"}),
        # unverified shards are not compared: their ids could not be trusted
        dg.AssetCheckResult(check_name="media_formats_agree", passed=bool(ids) and not disagree,
                            metadata={"samples": len(reference), "disagreeing_formats": ", ".join(disagree) or "none",
                                      "compared": "yes" if ids else "no: the shards did not verify"}),
    ]
