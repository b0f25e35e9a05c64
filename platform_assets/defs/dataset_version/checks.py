"""Quality gates on dataset_version: the shards (token and media) match their index, and the remote holds them."""

from pathlib import Path

import dagster as dg

from platform_assets.media_shards.index import verify_format_dir
from platform_assets.packing.shard_index import verify_shards
from platform_assets.versioning.dvc_repo import DatasetVersion, DvcRepo
from platform_assets.versioning.settings import VersioningSettings

ASSET = "dataset_version"

VERSION_CHECKS = [
    dg.AssetCheckSpec("shards_match_index", asset=ASSET, blocking=True,
                      description="Every shard file of every format has the size and sha256 its index.json records "
                                  "(packed shards, and media shards where versioned)."),
    dg.AssetCheckSpec("remote_has_version", asset=ASSET, blocking=True,
                      description="`dvc status --cloud` finds nothing of this version missing from the remote "
                                  "(skipped as passed when versioning.push is off)."),
]


def evaluate_version_checks(repo: DvcRepo, version: DatasetVersion, shards_dir: Path, settings: VersioningSettings,
                            media: tuple[DatasetVersion, Path] | None = None) -> list[dg.AssetCheckResult]:
    problems = []
    formats = sorted(p.parent for p in shards_dir.glob("*/index.json"))
    for fmt_dir in formats:
        problems += [f"{fmt_dir.name}: {p}" for p in verify_shards(fmt_dir)]
    media_formats = sorted(p.parent for p in media[1].glob("*/index.json")) if media else []
    for fmt_dir in media_formats:
        problems += [f"media {fmt_dir.name}: {p}" for p in verify_format_dir(str(fmt_dir))]
    missing = repo.missing_in_remote(version, settings.remote.name) if settings.push else []
    if media and settings.push:
        missing += [f"media: {m}" for m in repo.missing_in_remote(media[0], settings.remote.name)]
    return [
        dg.AssetCheckResult(check_name="shards_match_index", passed=bool(formats) and not problems,
                            metadata={"formats": ", ".join(f.name for f in formats) or "none",
                                      "media_formats": ", ".join(f.name for f in media_formats) or "none",
                                      "problems": "\n".join(problems[:20]) or "none"}),
        dg.AssetCheckResult(check_name="remote_has_version", passed=not missing,
                            metadata={"remote": settings.remote.name if settings.push else "push disabled",
                                      "missing": "\n".join(missing[:20]) or "none"}),
    ]
