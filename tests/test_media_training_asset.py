"""training_run through Dagster for the media model families: a run config naming `whisper` or `llava`
trains on the dataset version's media shard set (its own DVC md5 names the checkpoints) with the token
shards' tokenizer, under torchrun through Pipes, reports the modality mix it trained on, and a second
materialization resumes the finished run."""

import sys
from pathlib import Path

import dagster as dg
import pytest
import yaml
from dvc_project import init_dvc_project

from platform_assets.defs.dataset_version.assets import dataset_version
from platform_assets.defs.packed_shards.assets import packed_shards
from platform_assets.defs.resources import PipelineResource
from platform_assets.defs.tokenized_documents.assets import tokenized_documents
from platform_assets.defs.tokenizer.assets import tokenizer
from platform_assets.defs.training_run.assets import training_run
from platform_assets.training_launch.command import MEDIA_MODEL_TYPES

sys.path.insert(0, str(Path(__file__).parent / "training"))
from media_runs import write_media_shard_set  # noqa: E402

MODELS = {
    "whisper": {"model_type": "whisper", "overrides": {
        "d_model": 32, "encoder_layers": 1, "decoder_layers": 1, "encoder_attention_heads": 2,
        "decoder_attention_heads": 2, "encoder_ffn_dim": 64, "decoder_ffn_dim": 64}},
    "llava": {"model_type": "llava", "overrides": {
        "vision_config": {"model_type": "clip_vision_model", "patch_size": 8, "hidden_size": 32,
                          "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2},
        "text_config": {"model_type": "llama", "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1,
                        "num_attention_heads": 2, "num_key_value_heads": 2}}},
}


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    """dataset_splits + media_shards written by the platform's writers (images, pages, audio with texts),
    then tokenizer -> tokenized_documents -> packed_shards -> dataset_version through Dagster. Built once
    for both families (~4-6 s each time): each trains into a checkpoint directory of its own, and
    `trained` lists the families that ran on it."""
    tmp_path = tmp_path_factory.mktemp("media_training")
    root = tmp_path / "project"
    init_dvc_project(root, outputs=("packed_shards", "media_shards"))
    write_media_shard_set(root / "data" / "platform", images=16, pages=4, clips=12, validation=4,
                          text_documents=40)
    (root / "configs" / "pipeline.yaml").write_text(yaml.safe_dump({
        "storage": {"root": "../data/platform"},
        "sources": [{"name": "photos", "format": "jsonl", "path": "."}],
        "tokenizer": {"source": "train", "vocab_size": 400, "min_frequency": 1},
        "packing": {"seq_len": 32, "samples_per_shard": 16},
        "versioning": {"dvc_repo": "..", "remote": {"name": "store", "url": str(tmp_path / "remote")}},
        "training": {"run_config": "run.yaml", "checkpoint_root": "../data/checkpoints"},
    }))
    pipeline = PipelineResource(config_path=str(root / "configs" / "pipeline.yaml"))
    built = dg.materialize([tokenizer, tokenized_documents, packed_shards, dataset_version],
                           resources={"pipeline": pipeline})
    assert built.success
    version = built.asset_materializations_for_node("dataset_version")[0].metadata
    return root, pipeline, version["media_dvc_md5"].value, []


def _write_run_config(root: Path, family: str) -> None:
    (root / "configs" / "run.yaml").write_text(yaml.safe_dump({
        "model": MODELS[family],
        "data": {"global_batch_size": 4, "micro_batch_size": 2,
                 "media": {"max_text_tokens": 96, "image": {"size": 32, "augment": {"hflip_probability": 0.5}}},
                 # tokenizer_path comes from the platform (the token shards' tokenizer/)
                 },
        "validation": {"eval_interval": 3, "eval_batches": 1},
        "optimizer": {"lr": 0.01}, "checkpoint": {"interval": 3}, "max_steps": 6, "log_interval": 1,
        "cpu_threads": 1, "precision": "fp32",
    }))


def _meta(result) -> dict:
    return {k: v.value for k, v in result.asset_materializations_for_node("training_run")[0].metadata.items()}


@pytest.mark.slow
@pytest.mark.parametrize("family", ["whisper", "llava"])
def test_media_models_train_through_the_training_run_asset_and_resume(project, family):
    root, pipeline, media_md5, trained = project
    trained.append(family)  # before the run: a failed one may still leave its directory
    _write_run_config(root, family)
    resources = {"pipeline": pipeline, "pipes_subprocess_client": dg.PipesSubprocessClient()}
    result = dg.materialize([training_run], resources=resources)
    meta = _meta(result)
    assert meta["steps"] == 6 and meta["dataset_version"] == media_md5  # the media set's version, not the tokens'
    seen = meta["modalities_seen"]
    if family == "whisper":
        assert seen == {"audio": 24, "image": 0, "pdf": 0}  # 6 steps x 4 samples, audio only
    else:
        assert seen["audio"] == 0 and seen["image"] + seen["pdf"] == 24 and seen["image"] > 0
    assert 0.0 < meta["decode_fraction"] <= 1.0 and meta["samples_per_s"] > 0
    assert {e.check_name: e.passed for e in result.get_asset_check_evaluations()}["loss_decreased"] is True
    ckpts = root / "data" / "checkpoints"
    # one directory per (media version, model type): a Whisper and a LLaVA run on one set keep their own
    assert sorted(p.name for p in ckpts.iterdir()) == sorted(f"{media_md5.removesuffix('.dir')}-{f}" for f in trained)
    again = _meta(dg.materialize([training_run], resources=resources))
    assert again["resumed_from_step"] == 6 and again["steps"] == 6 and again["modalities_seen"] == seen


def test_the_launcher_knows_the_training_jobs_media_model_types():
    from training.model_families import FAMILY_OF_MODEL_TYPE

    assert MEDIA_MODEL_TYPES == FAMILY_OF_MODEL_TYPE  # the Dagster side reads the YAML without importing torch


def test_a_media_model_on_a_version_without_media_shards_fails_without_retries(tmp_path):
    from platform_assets.training_launch.command import LaunchError, run_extras
    from platform_assets.training_launch.settings import TrainingLaunchSettings

    run = tmp_path / "run.yaml"
    run.write_text(yaml.safe_dump({"model": MODELS["whisper"]}))
    record = {"md5": "abc.dir", "shards_uri": str(tmp_path / "packed"), "media": None}
    with pytest.raises(LaunchError, match="no media shard set"):
        run_extras(TrainingLaunchSettings(), run, record, tmp_path / "ckpt")
    text = tmp_path / "text.yaml"
    text.write_text(yaml.safe_dump({"model": {"model_type": "llama"}}))
    extras = run_extras(TrainingLaunchSettings(), text, record, tmp_path / "ckpt")
    assert extras["data_dir"].endswith("packed/flat") and "tokenizer_path" not in extras
