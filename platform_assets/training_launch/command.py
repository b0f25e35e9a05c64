"""The torchrun command line and the Pipes extras of a training run (no Dagster here)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import yaml

from platform_assets.training_launch.settings import TrainingLaunchSettings

PIPES_ENTRY = "training.pipes_entry"
# Model types that train on the media shard set (training/model_families.py FAMILY_OF_MODEL_TYPE; a test
# keeps the two in step): read here from the run config's YAML, so the Dagster process does not import
# torch and transformers to decide which shard set to hand over.
MEDIA_MODEL_TYPES = {"whisper": "speech_seq2seq", "llava": "vision_language"}
MEDIA_FORMAT = "webdataset"  # O(1) random access by member offsets (training/data/media_reader.py)
DIE_WITH_PARENT = "platform_assets.training_launch.die_with_parent"


def torchrun_command(settings: TrainingLaunchSettings, die_with: int | None = None) -> list[str]:
    """torchrun running the Pipes entry point; `die_with`: a pid (the Dagster run's) whose death sends
    torchrun SIGTERM (see die_with_parent.py), so a killed run leaves no training behind."""
    torchrun = settings.torchrun or str(Path(sys.executable).parent / "torchrun")
    guard = [sys.executable, "-m", DIE_WITH_PARENT, str(die_with)] if die_with is not None else []
    cmd = [*guard, torchrun, "--nproc-per-node", str(settings.nproc_per_node), "--nnodes", str(settings.nnodes)]
    if settings.nnodes == 1 and settings.rdzv_endpoint is None:
        cmd.append("--standalone")  # a local rendezvous on a free port: two runs on one box never collide
    else:
        cmd += ["--rdzv-backend", "c10d", "--rdzv-endpoint", settings.rdzv_endpoint or ""]
    return [*cmd, "-m", PIPES_ENTRY]


def checkpoint_dir(root: Path, dataset_md5: str, media_model_type: str | None = None) -> Path:
    """One directory per dataset version: `3f2a...dir` -> `<root>/3f2a...`; a media model's per (version,
    model type), `<root>/3f2a...-whisper`: a Whisper and a LLaVA run on one media set resume their own."""
    name = dataset_md5.removesuffix(".dir")
    return root / (f"{name}-{media_model_type}" if media_model_type else name)


class LaunchError(ValueError):
    """The run config asks for data the dataset version does not have (the message says which)."""


def model_type_of(run_config: Path) -> str | None:
    """The run config's model type (model.model_type, or model_type in model.model_path's config.json)."""
    try:
        raw: Any = yaml.safe_load(run_config.read_text())
    except (OSError, yaml.YAMLError):
        return None  # the training job reports an unreadable config with the key at fault
    model = raw.get("model") if isinstance(raw, dict) else None
    if not isinstance(model, dict):
        return None
    if isinstance(model.get("model_type"), str):
        return model["model_type"]
    if isinstance(model.get("model_path"), str):
        try:
            saved = json.loads((run_config.parent / model["model_path"] / "config.json").read_text())
        except (OSError, ValueError):
            return None
        return saved.get("model_type") if isinstance(saved, dict) else None
    return None


def run_extras(settings: TrainingLaunchSettings, run_config: Path, version_record: dict,
               checkpoint_root: Path) -> dict[str, object]:
    """What the Pipes entry point receives: the run config plus what only the platform knows. A speech or
    vision-language model trains on the version's media shard set (its own DVC md5 names the checkpoints)
    with the tokenizer of the token shards; a causal LM on the flat token shards."""
    media = version_record.get("media")
    model_type = model_type_of(run_config)
    media_model = model_type if model_type in MEDIA_MODEL_TYPES else None
    if media_model:
        if not media or MEDIA_FORMAT not in (media.get("formats") or []):
            raise LaunchError(f"{run_config} trains a media model but dataset version {version_record['md5']} has "
                              f"no media shard set in the {MEDIA_FORMAT} format: materialize media_shards with "
                              f"media_shards.formats including {MEDIA_FORMAT}, then dataset_version")
        version, data_dir = media["md5"], f"{media['shards_uri']}/{MEDIA_FORMAT}"
    else:
        version, data_dir = version_record["md5"], f"{version_record['shards_uri']}/flat"
    extras: dict[str, object] = {
        "config": str(run_config),
        "dataset_version": version,
        "data_dir": data_dir,
        "checkpoint_dir": str(checkpoint_dir(checkpoint_root, version, media_model)),
    }
    if media_model:
        extras["tokenizer_path"] = f"{version_record['shards_uri']}/tokenizer"
    if settings.max_steps is not None:
        extras["max_steps"] = settings.max_steps
    if settings.overrides:
        extras["overrides"] = json.loads(json.dumps(settings.overrides))
    return extras
