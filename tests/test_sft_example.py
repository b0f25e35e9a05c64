"""The README's SFT example, run as the README says: `scripts/make_base_model.py` writes the base checkpoint,
then `python -m platform_assets run --config configs/sft_example.yaml` (the real CLI, a fresh Dagster
instance) cleans the sample's conversations with the `sft` recipe, tokenizes them with the base model's
own tokenizer and template, packs and versions them, and fine-tunes the base model through the
training_run asset. Everything is written under tmp_path, laid out like the checkout (a git repository
whose data/ is git-ignored), with the two example configs copied unchanged."""

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest
import torch
import yaml
from transformers import AutoModelForCausalLM, AutoTokenizer

from training.config import load_run_config
from training.data.loader import PackedLoader
from training.metrics import read_records
from training.model_families import CAUSAL_LM, loss_sum
from training.run_loaders import loader_config

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
CONFIGS = ("sft_example.yaml", "training_sft_example.yaml")


@pytest.fixture(scope="module")
def example(tmp_path_factory):
    """The example's commands in a copy of the checkout's layout; returns (root, the run's stdout, instance)."""
    root = tmp_path_factory.mktemp("sft")
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    (root / ".gitignore").write_text("/data/\n")  # as in the checkout: DVC cannot add under data/ with git
    (root / "configs").mkdir()
    for name in CONFIGS:
        shutil.copy(REPO / "configs" / name, root / "configs" / name)
    home = root / "dagster_home"
    home.mkdir()
    shutil.copy(REPO / "dagster_home" / "dagster.yaml", home / "dagster.yaml")
    env = {**os.environ, "DAGSTER_HOME": str(home), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    for args in (["-m", "platform_assets", "sample", "--out", str(root / "data" / "sample")],
                 [str(REPO / "scripts" / "make_base_model.py"), str(root / "data" / "base_model")]):
        subprocess.run([sys.executable, *args], cwd=REPO, env=env, check=True, capture_output=True)
    res = subprocess.run([sys.executable, "-m", "platform_assets", "run", "--config",
                          str(root / "configs" / "sft_example.yaml")],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert "WARNING" not in res.stdout + res.stderr, res.stdout + res.stderr
    with dg.DagsterInstance.from_config(str(home)) as instance:
        yield root, res.stdout, instance


def _metadata(instance: dg.DagsterInstance, asset: str) -> dict:
    event = instance.get_latest_materialization_event(dg.AssetKey(asset))
    assert event is not None, f"{asset} was not materialized"
    return {k: v.value for k, v in event.asset_materialization.metadata.items()}


def test_the_base_model_script_writes_the_same_bytes_twice(example, tmp_path):
    root, _, _ = example
    again = tmp_path / "base_model"
    subprocess.run([sys.executable, str(REPO / "scripts" / "make_base_model.py"), str(again)], cwd=REPO,
                   check=True, capture_output=True)
    first = {p.name: p.read_bytes() for p in sorted((root / "data" / "base_model").iterdir())}
    assert {p.name: p.read_bytes() for p in sorted(again.iterdir())} == first
    assert {"config.json", "model.safetensors", "tokenizer.json", "chat_template.jinja"} <= set(first)
    assert "{% generation %}" not in first["chat_template.jinja"].decode()  # the own-template masking is used


def test_the_sft_source_is_cleaned_with_its_recipe(example):
    root, stdout, instance = example
    cleaned = _metadata(instance, "cleaned_documents")
    assert cleaned["source"] == "sft" and cleaned["recipe"] == "sft"
    line = next(line.split() for line in stdout.splitlines() if line.startswith("sft "))
    assert line[1] == "ok" and int(line[4]) > 0, stdout  # source, status, raw, quarantined, cleaned
    assert not (root / "data" / "platform").exists()  # the example's own storage root only


def test_the_tokenizer_is_the_base_models_with_its_own_template(example):
    root, _, _ = example
    base = AutoTokenizer.from_pretrained(root / "data" / "base_model", local_files_only=True)
    shards = root / "data" / "sft_example" / "packed_shards" / "_all"
    used = AutoTokenizer.from_pretrained(shards / "tokenizer", local_files_only=True)
    assert len(used) == len(base) == 4096  # no token added: the vocabulary is the model's
    assert used.chat_template == base.chat_template


def test_the_shards_are_versioned_in_the_storage_roots_own_dvc_repository(example):
    root, _, _ = example
    storage = root / "data" / "sft_example"
    # dvc add in a DVC repository without git (the checkout's data/ is git-ignored): no git revision to pin
    assert (storage / "packed_shards" / "_all.dvc").is_file() and (storage / ".dvc" / "config").is_file()
    record = json.loads((storage / "dataset_version" / "_all" / "version.json").read_text())
    assert record["recorded_in"] == "packed_shards/_all.dvc" and record["pushed"] is True
    assert record["git_revision"] is None and record["git_dirty"] is None
    assert not (root / ".dvc").exists()  # the enclosing git repository is left alone


def _first_batch_loss(model, run_config: Path, data_dir: str, ckpt: Path) -> float:
    """The mean loss over the loss tokens of the run's first optimizer step's samples, computed directly."""
    cfg = load_run_config(run_config, {"data.data_dir": data_dir, "checkpoint.dir": str(ckpt),
                                       "dataset_version": "example"})
    loader = PackedLoader(loader_config(cfg), rank=0, world_size=1)
    total, tokens = 0.0, 0
    with torch.no_grad():
        batches = iter(loader)
        for _ in range(loader.accumulation_steps):
            batch = next(batches)
            total += float(loss_sum(CAUSAL_LM, model.eval(), batch, "sdpa").double())
            tokens += int(batch["num_loss_tokens"])
    assert tokens > 0  # the assistant turns carry the loss
    return total / tokens


def test_the_run_fine_tunes_the_base_weights(example):
    root, stdout, instance = example
    meta = _metadata(instance, "training_run")
    run_config = root / "configs" / "training_sft_example.yaml"
    assert meta["steps"] == yaml.safe_load(run_config.read_text())["max_steps"] == 30
    assert math.isfinite(meta["final_loss"]), meta["final_loss"]
    ckpt = Path(meta["checkpoint"]).parent
    losses = {r["step"]: r["loss"] for r in read_records(ckpt / "metrics.jsonl") if r["kind"] == "train"}
    data_dir = str(root / "data" / "sft_example" / "packed_shards" / "_all" / "flat")
    # LoRA's B = 0: the first step's loss is the base model's on the same samples; fresh weights (any
    # other seed) would give another loss
    base = AutoModelForCausalLM.from_pretrained(root / "data" / "base_model", local_files_only=True)
    assert losses[1] == pytest.approx(_first_batch_loss(base, run_config, data_dir, ckpt), rel=1e-4)
    torch.manual_seed(0)
    fresh = AutoModelForCausalLM.from_config(base.config)
    assert abs(losses[1] - _first_batch_loss(fresh, run_config, data_dir, ckpt)) > 1e-3
    assert all(math.isfinite(v) for v in losses.values()) and losses[30] < losses[1], losses
    summary = next(line.split() for line in stdout.splitlines() if line.startswith("training "))
    assert summary[1:4] == ["ok", "steps", "30,"], stdout
