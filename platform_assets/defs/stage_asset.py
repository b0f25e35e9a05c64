"""The skeleton every stage asset shares, written once: open the config and storage, run the stage
with its errors mapped to `dg.Failure` the same way everywhere, and report the StageResult (where,
how much, what shape, a preview, its data version) with the stage's own figures added.

An asset module then holds only what is particular to its stage: the call and its metadata.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import dagster as dg

from platform_assets.config import ConfigError, PipelineConfig
from platform_assets.contracts import StageResult
from platform_assets.defs.metadata import markdown_preview, output_metadata
from platform_assets.defs.progress_log import run_log_progress
from platform_assets.defs.resources import PipelineResource
from platform_assets.heap import release_freed_heap
from platform_assets.ingest.readers.huggingface import DatasetLoadError
from platform_assets.layout import asset_dir
from platform_assets.output_lock import ConcurrentCommitError
from platform_assets.schema import SchemaVersionError
from platform_assets.stage_caches import release_other_stages
from platform_assets.storage import Storage, StorageFullError, manifest_version
from platform_assets.versioning.dvc_repo import DvcError

R = TypeVar("R", bound=StageResult)

# Errors that describe the input or the config, not a bug: the run fails with the message alone (no
# stack trace in the UI). Anything else (a ConservationError, an AssertionError) keeps its traceback.
USER_ERRORS: tuple[type[Exception], ...] = (ConfigError, SchemaVersionError, DatasetLoadError, DvcError, ValueError,
                                            OSError, ConcurrentCommitError)

# Every stage asset re-runs its whole step after a transient fault (an S3 endpoint restarting, a
# connection reset, a `dvc push` cut off, a DataLoader worker killed): outputs are staged and committed
# atomically, so a retry starts from the previous output and writes the same bytes. Waits of 2, 6 and
# 14 s, each +-2 s of jitter (steps failing together do not return together): an outage of up to
# ~16-28 s is ridden out on top of the S3 client's own retries (storage.s3.max_attempts). A definition
# property rather than pipeline config: Dagster fixes it when it loads the code, before any config is
# read. Deterministic failures (config, schema, bad input, missing files, a full disk) carry
# allow_retries=False and fail at once; an unexpected exception (a bug) is retried like Dagster's own
# default would, at most 3 times.
TRANSIENT_RETRY = dg.RetryPolicy(max_retries=3, delay=2, backoff=dg.Backoff.EXPONENTIAL, jitter=dg.Jitter.PLUS_MINUS)

# OSErrors that say something about the path or the machine, not the moment: waiting does not help
# (a full disk is freed by a person or a cleanup, not in seconds)
_PERMANENT_OS_ERRORS: tuple[type[OSError], ...] = (FileNotFoundError, PermissionError, IsADirectoryError,
                                                   NotADirectoryError, FileExistsError, StorageFullError)


def is_transient(err: BaseException) -> bool:
    """Whether running the same step again, with the same input and config, may succeed."""
    if isinstance(err, DvcError):
        return err.transient  # set for the commands that talk to the remote (push, pull, status -c)
    if isinstance(err, ConcurrentCommitError):
        return True  # another run committed the output first; run again, this step builds on its version
    if isinstance(err, _PERMANENT_OS_ERRORS):
        return False
    return isinstance(err, OSError)  # network errors (pyarrow's S3 client raises OSError), I/O errors


@dataclass(frozen=True)
class StageContext:
    """What a stage asset works with: the loaded config, its storage, and its own output directory."""

    cfg: PipelineConfig
    storage: Storage
    rel: str

    def input_dir(self, asset: str, partition: str | None = None) -> str:
        return asset_dir(asset, partition)


def stage_context(pipeline: PipelineResource, asset: str, partition: str | None = None) -> StageContext:
    # In one process (the CLI's main job runs every stage so), what the stage before kept: its caches
    # (a model, tables), and the pages glibc keeps of what it freed: the tokenizer stage's sample
    # encode (Rust, per-thread arenas) left 431 MB resident after it returned, 88 MB once trimmed.
    release_other_stages(asset)
    release_freed_heap()
    cfg = pipeline.config()
    return StageContext(cfg, pipeline.storage(cfg), asset_dir(asset, partition))


@contextmanager
def failures_as_dagster(asset: str) -> Iterator[None]:
    """Map USER_ERRORS to `dg.Failure` naming the asset, retried by TRANSIENT_RETRY only where the
    error is transient; let every other exception through."""
    try:
        yield
    except dg.Failure:
        raise
    except USER_ERRORS as err:
        transient = is_transient(err)
        raise dg.Failure(description=f"{asset}: {err}", allow_retries=transient,
                         metadata={"error": type(err).__name__, "transient": transient}) from None


def run_stage(asset: str, stage: Callable[[], R]) -> R:
    """Call the stage with its errors mapped and its progress reported into the run's log."""
    with failures_as_dagster(asset), run_log_progress(asset):
        return stage()


def stage_result(
    ctx: StageContext,
    result: StageResult,
    metadata: dict[str, Any] | None = None,
    checks: Iterable[dg.AssetCheckResult] = (),
    preview: list[str] | None = None,
) -> dg.MaterializeResult:
    """The materialization of a committed stage output: the shared figures (uri, rows, bytes, files,
    manifest, column schema, exclusions uri, preview) first, then the stage's `metadata`."""
    out: dict[str, Any] = {"uri": dg.MetadataValue.path(ctx.storage.uri(result.rel))}
    if result.schema is not None:
        out = output_metadata(ctx.storage, result.rel, result.files, result.schema, result.rows)
    if result.exclusions:
        out["exclusions_uri"] = dg.MetadataValue.path(ctx.storage.uri(result.exclusions_path()))
    out.update(result.metadata)  # the stage's own figures
    out.update(metadata or {})  # what only the asset adds: tables, charts, markdown, config values
    if preview and result.parts:
        out["preview"] = dg.MetadataValue.md(
            markdown_preview(ctx.storage, f"{result.rel}/{result.parts[0]}", preview))
    return dg.MaterializeResult(
        metadata=out,
        data_version=dg.DataVersion(manifest_version(result.files)),
        check_results=list(checks),
    )
