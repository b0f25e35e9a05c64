"""dataset_version: the packed shard set (and the media shard set, where built) recorded with DVC and
pushed to the configured remote."""

import json
from pathlib import Path

import dagster as dg

from platform_assets.contracts import MANIFEST_FILE
from platform_assets.defs.dataset_version.checks import VERSION_CHECKS, evaluate_version_checks
from platform_assets.defs.resources import PipelineResource
from platform_assets.defs.stage_asset import TRANSIENT_RETRY, failures_as_dagster, stage_context
from platform_assets.versioning.card_facts import LeakCheck, gather_card_facts
from platform_assets.versioning.dataset_card import CARD_FILE, card_for_ui, render_dataset_card
from platform_assets.versioning.dvc_repo import DvcRepo
from platform_assets.versioning.record import VERSION_FILE, media_record, version_record

SHARDS = "packed_shards"
MEDIA = "media_shards"
LEAK_CHECK = dg.AssetCheckKey(dg.AssetKey("dataset_splits"), "no_split_leakage")


def latest_leak_check(instance: dg.DagsterInstance) -> LeakCheck | None:
    """The split leak check's latest result: the instance keeps it, the splits output does not."""
    record = instance.get_latest_asset_check_evaluation_record(LEAK_CHECK)
    evaluation = record.evaluation if record is not None else None
    if evaluation is None:
        return None
    summary = evaluation.metadata.get("summary")
    return LeakCheck(evaluation.passed, str(summary.value) if summary is not None else "")


@dg.asset(
    retry_policy=TRANSIENT_RETRY,  # transient faults re-run the step (defs/stage_asset.py)
    deps=[SHARDS, MEDIA],
    check_specs=VERSION_CHECKS,
    group_name="release",
    kinds={"dvc"},
    # DVC's repository lock does not wait: a second `dvc` command on the repo fails at once.
    pool="dvc",
    code_version="1",
    description=(
        "The packed shard set as a DVC version: `dvc commit` of its dvc.yaml stage (or `dvc add`), then "
        "`dvc push`. The DVC md5 is this asset's data version; training runs name it. The media shard set, "
        "where media_shards has an output, is recorded and pushed the same way as a version of its own "
        "(`media_dvc_md5`, and `media` in version.json). README.md beside version.json is the version's "
        "dataset card (Hugging Face format)."
    ),
)
def dataset_version(context: dg.AssetExecutionContext, pipeline: PipelineResource) -> dg.MaterializeResult:
    ctx = stage_context(pipeline, "dataset_version")
    cfg, storage = ctx.cfg, ctx.storage
    if not storage.is_local:
        raise dg.Failure(f"dataset_version needs a local storage root inside the DVC repository (DVC versions its "
                         f"workspace); storage.root is {cfg.storage_root}. Push to S3 with versioning.remote instead.",
                         allow_retries=False)
    settings = cfg.versioning
    shards_dir = Path(cfg.storage_root) / ctx.input_dir(SHARDS)
    media_dir = Path(cfg.storage_root) / ctx.input_dir(MEDIA)
    media_version = None
    with failures_as_dagster("dataset_version"):
        repo = DvcRepo(cfg.resolve(settings.dvc_repo), settings.dvc_executable)
        repo.ensure_initialized()
        remote_url = repo.configure_remote(settings.remote, cfg.config_dir)
        version = repo.record(shards_dir)
        # a committed media_shards output (a corpus without media has one too: indexes with no sets)
        if (media_dir / MANIFEST_FILE).is_file():
            media_version = repo.record(media_dir)
        if settings.push:
            version = repo.push(version, settings.remote.name)
            if media_version is not None:
                media_version = repo.push(media_version, settings.remote.name)
    context.log.info(f"dataset version {version.md5} ({version.recorded_in}, pushed={version.pushed})"
                     + (f"; media {media_version.md5}" if media_version else ""))
    media = media_record(media_version, storage.uri(ctx.input_dir(MEDIA))) if media_version else None
    record = version_record(version, storage.uri(ctx.input_dir(SHARDS)), remote_url if settings.push else None,
                            media)
    facts = gather_card_facts(storage, record, sources=cfg.sources, cleaning=cfg.cleaning, dedup=cfg.dedup,
                              splits=cfg.splits, card_dir=repo.relative(Path(cfg.storage_root) / ctx.rel),
                              leak_check=latest_leak_check(context.instance), gates=cfg.cleaning_gates)
    card = render_dataset_card(facts)
    # version.json and its card are committed as one directory: written one after the other, a kill
    # between the two left a card describing the previous version beside the new version.json
    with storage.staged_dir(ctx.rel) as staged:
        staged.write_bytes(VERSION_FILE, json.dumps(record, indent=1, sort_keys=True).encode())
        staged.write_bytes(CARD_FILE, card.encode())
    totals = record["totals"]
    metadata = {
        "dvc_md5": version.md5,
        "shards_uri": dg.MetadataValue.path(record["shards_uri"]),
        "recorded_in": version.recorded_in,
        "dvc_stage": version.stage or "none (dvc add)",
        "git_revision": version.git_revision or "not a git repository",
        "git_dirty": bool(version.git_dirty),
        "remote": remote_url if settings.push else "not pushed (versioning.push is off)",
        "files": version.files,
        "bytes": version.bytes,
        **{f"{k}": v for k, v in totals.items()},
        "media_dvc_md5": media_version.md5 if media_version else "none (no media_shards output)",
        "dataset_card": dg.MetadataValue.md(card_for_ui(card)),
        "dataset_card_uri": dg.MetadataValue.path(storage.uri(f"{ctx.rel}/{CARD_FILE}")),
    }
    if media is not None:
        metadata.update(media_files=media_version.files, media_bytes=media_version.bytes,
                        media_samples=media["totals"].get("samples", 0))
    if version.git_dirty:
        context.log.warning(f"commit {version.recorded_in} to pin this version in git (the working tree differs "
                            "from HEAD)")
    return dg.MaterializeResult(
        metadata=metadata,
        data_version=dg.DataVersion(version.md5),
        check_results=evaluate_version_checks(repo, version, shards_dir, settings,
                                              (media_version, media_dir) if media_version else None),
    )
