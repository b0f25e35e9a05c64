"""Config of the training_run stage: the `training:` key of the pipeline config."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field

from platform_assets.contracts import StrictModel


class TrainingLaunchSettings(StrictModel):
    run_config: str = "training_sample.yaml"
    """The training job's own config (training/config.py), relative to the pipeline config. The asset
    fills in what the platform knows: data.data_dir, dataset_version, checkpoint.dir."""
    more_run_configs: list[str] = []
    """Further run configs the main job (`python -m platform_assets run`) trains after `run_config`, each
    as its own training_run materialization (e.g. a Whisper and a LLaVA model on the media shards). In
    the UI, a materialization trains `run_config` unless the launchpad's `run_config` names another."""
    nproc_per_node: Annotated[int, Field(gt=0)] = 1
    """torchrun processes (one per GPU; on CPU each is a gloo rank)."""
    nnodes: Annotated[int, Field(gt=0)] = 1
    rdzv_endpoint: str | None = None
    """host:port of the rendezvous for multi-node runs (torchrun's c10d backend); None = one node."""
    checkpoint_root: str = "../data/checkpoints"
    """Checkpoints go to `<checkpoint_root>/<dataset md5>/`: re-materializing resumes the latest
    checkpoint of the same dataset version, and a new version starts a new directory."""
    max_steps: Annotated[int, Field(gt=0)] | None = None
    """Overrides the run config's max_steps."""
    overrides: dict[str, Any] = {}
    """More dotted-key overrides of the run config, e.g. `{optimizer.lr: 1e-3}`."""
    torchrun: str | None = None
    """Default: the `torchrun` installed beside the running Python."""
