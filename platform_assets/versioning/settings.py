"""Config of the dataset_version stage: the `versioning:` key of the pipeline config."""

from __future__ import annotations

from platform_assets.contracts import StrictModel


class DvcRemote(StrictModel):
    name: str = "local"
    url: str = "../data/dvc-remote"
    """A directory (relative to the pipeline config) or s3://bucket/prefix. Written to the DVC repo's
    `.dvc/config.local`, so a user's remote never lands in the committed `.dvc/config`."""
    endpoint_url: str | None = None
    """For MinIO or a local S3 server; credentials come from the standard AWS environment."""


class VersioningSettings(StrictModel):
    dvc_repo: str = ".."
    """The DVC (and git) repository the shard set lives in, relative to the pipeline config. The
    storage root must be a local directory inside it: DVC versions workspace files."""
    dvc_executable: str | None = None
    """Default: $PLATFORM_DVC, then the repository's `.venv-dvc/bin/dvc` (DVC lives in its own
    virtualenv: its hydra pin of antlr4 4.9 breaks Dagster's asset selection), then `dvc` on PATH."""
    remote: DvcRemote = DvcRemote()
    push: bool = True
    """`dvc push` after recording the version; off for a machine with no remote."""
