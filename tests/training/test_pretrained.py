"""Runs that start from local pretrained weights (model.init: pretrained) and LoRA runs (model.lora)."""

import logging

import pytest
import torch
from safetensors.torch import load_file, save_file
from train_runs import REPO, VOCAB, eval_losses, run_config, sample_ids, train_in_process, train_losses
from transformers import AutoModelForCausalLM, LlamaConfig

from training.checkpoint import find_latest_checkpoint
from training.config import RunConfigError, parse_run_config
from training.data.loader import PackedLoader
from training.model import ModelConfigError, ShardSetInfo, build_model
from training.model_families import CAUSAL_LM, loss_sum
from training.pretrained import build_causal_lm
from training.run_loaders import loader_config

TINY = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 64}


def _shards(flat) -> ShardSetInfo:
    return ShardSetInfo.from_index(PackedLoader(loader_config(parse_run_config(run_config(flat, flat), REPO)),
                                                rank=0, world_size=1).index)


@pytest.fixture(scope="module")
def pretrained_dir(flat, reference, tmp_path_factory):
    """The reference run's final weights (10 trained steps), as a save_pretrained directory (safetensors)."""
    cfg = parse_run_config(run_config(flat, reference), REPO)
    model = build_model(cfg.model, _shards(flat), seed=0)
    model.load_state_dict(find_latest_checkpoint(reference).load("model"))
    path = tmp_path_factory.mktemp("pretrained") / "tiny-llama"
    model.save_pretrained(path)
    assert (path / "model.safetensors").exists()
    return path


def pretrained_config(flat, ckpt, path, **top):
    raw = run_config(flat, ckpt, **top)
    raw["model"] = {"model_path": str(path), "init": "pretrained"}
    return raw


def first_batch_loss(flat, ckpt, model) -> float:
    """The loss of the run's first optimizer step's samples (mean over its loss tokens), computed directly."""
    cfg = parse_run_config(run_config(flat, ckpt), REPO)
    loader = PackedLoader(loader_config(cfg), rank=0, world_size=1)
    total, tokens = 0.0, 0
    with torch.no_grad():
        batches = iter(loader)
        for _ in range(loader.accumulation_steps):
            batch = next(batches)
            total += float(loss_sum(CAUSAL_LM, model.eval(), batch, "sdpa").double())
            tokens += int(batch["num_loss_tokens"])
    return total / tokens


def test_a_pretrained_run_starts_from_the_saved_weights(flat, reference, pretrained_dir, tmp_path):
    ckpt = tmp_path / "ckpt"
    result = train_in_process(pretrained_config(flat, ckpt, pretrained_dir, max_steps=2))
    assert result.step == 2
    cfg = parse_run_config(run_config(flat, ckpt), REPO)
    saved = build_model(cfg.model, _shards(flat), seed=0)
    saved.load_state_dict(find_latest_checkpoint(reference).load("model"))
    expected = first_batch_loss(flat, ckpt, saved)
    first = train_losses(ckpt)[1]
    assert first == pytest.approx(expected, rel=1e-6)
    # a fresh init (the reference's first step: same seed, same first batch) is clearly worse (4.56 vs 4.15)
    fresh = train_losses(reference)[1]
    assert first < fresh - 0.2, (first, fresh)
    assert sample_ids(ckpt)[1] == sample_ids(reference)[1]


def test_lora_trains_only_the_adapters_and_resumes_exactly(flat, reference, pretrained_dir, tmp_path, caplog):
    lora = {"r": 4, "alpha": 8, "target_modules": "all-linear"}
    whole = tmp_path / "whole"
    raw = pretrained_config(flat, whole, pretrained_dir)
    raw["model"]["lora"] = lora
    raw["optimizer"]["lr"] = 1e-2
    with caplog.at_level(logging.INFO, logger="training"):
        result = train_in_process(raw)
    assert result.step == 10

    cfg = parse_run_config(raw, REPO)
    start = build_causal_lm(cfg.model, _shards(flat), seed=cfg.seed).state_dict()
    end = find_latest_checkpoint(whole).load("model")
    assert set(start) == set(end)
    changed = {k for k in start if not torch.equal(start[k], end[k])}
    assert changed and all("lora_" in k for k in changed), sorted(changed)
    assert {k for k in start if "lora_B" in k} <= changed  # every adapter trained (B starts at 0)
    base = [k for k in start if "lora_" not in k]
    assert base and all(torch.equal(start[k], end[k]) for k in base)  # bit-identical base weights
    # B starts at 0: the first step's loss is the base model's; training lowers it (per-step losses are
    # of different batches and too noisy to compare: the first batch and the validation split are not)
    model = build_causal_lm(cfg.model, _shards(flat), seed=cfg.seed)
    before = first_batch_loss(flat, whole, model)
    assert train_losses(whole)[1] == pytest.approx(before, rel=1e-6)
    model.load_state_dict(end)
    assert first_batch_loss(flat, whole, model) < before - 0.02
    assert eval_losses(whole)[10] < eval_losses(reference)[10]  # the base model's (the reference's last) eval
    adapter = whole / "adapter"
    assert (adapter / "adapter_config.json").exists() and (adapter / "adapter_model.safetensors").exists()
    assert sorted(p.name for p in whole.iterdir() if "adapter" in p.name) == ["adapter"]  # no partial copies
    # the start-up log line gives both counts
    total = sum(t.numel() for k, t in start.items())
    trainable = sum(t.numel() for k, t in start.items() if "lora_" in k)
    assert f"{total:,} parameters, {trainable:,} trainable" in caplog.text

    # Stop after step 4 (checkpoint at 3), then resume to 10: the same samples and losses to the bit.
    part = tmp_path / "part"
    raw_part = pretrained_config(flat, part, pretrained_dir, max_steps=4)
    raw_part["model"]["lora"] = lora
    raw_part["optimizer"]["lr"] = 1e-2
    train_in_process(raw_part)
    raw_part["max_steps"] = 10
    resumed = train_in_process(raw_part)
    assert resumed.resumed_from == 4 and resumed.step == 10
    assert sample_ids(part) == sample_ids(whole)
    assert train_losses(part) == train_losses(whole)
    final = find_latest_checkpoint(part).load("model")
    assert all(torch.equal(final[k], end[k]) for k in end)


def test_pretrained_without_model_path_is_refused(flat, tmp_path):
    raw = run_config(flat, tmp_path / "ckpt")
    raw["model"]["init"] = "pretrained"
    with pytest.raises(RunConfigError, match=r"model\.init is pretrained but model\.model_path is not set"):
        parse_run_config(raw, REPO)


def test_a_model_with_a_smaller_vocabulary_than_the_shards_is_refused(flat, tmp_path):
    small = tmp_path / "small"
    config = LlamaConfig(vocab_size=VOCAB - 16, pad_token_id=0, eos_token_id=1, max_position_embeddings=64, **TINY)
    AutoModelForCausalLM.from_config(config).save_pretrained(small)
    with pytest.raises(ModelConfigError, match=rf"vocab_size {VOCAB - 16} is smaller than the shard index's "
                                               rf"vocab_size {VOCAB}"):
        train_in_process(pretrained_config(flat, tmp_path / "ckpt", small))


def test_a_model_with_a_shorter_context_than_the_shards_is_refused(flat, tmp_path):
    cfg = parse_run_config(run_config(flat, tmp_path / "ckpt"), REPO)
    model = build_model(cfg.model, _shards(flat), seed=0)
    model.config.max_position_embeddings = 16
    short = tmp_path / "short"
    model.save_pretrained(short)
    with pytest.raises(ModelConfigError, match=r"seq_len 32 exceeds the model's max_position_embeddings 16"):
        train_in_process(pretrained_config(flat, tmp_path / "ckpt", short))


def test_a_checkpoint_missing_a_weight_is_refused(flat, pretrained_dir, tmp_path):
    partial = tmp_path / "partial"
    partial.mkdir()
    (partial / "config.json").write_text((pretrained_dir / "config.json").read_text())
    weights = load_file(pretrained_dir / "model.safetensors")
    del weights["model.layers.1.mlp.up_proj.weight"]
    save_file(weights, partial / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ModelConfigError, match=r"missing \['model\.layers\.1\.mlp\.up_proj\.weight'\]"):
        train_in_process(pretrained_config(flat, tmp_path / "ckpt", partial))


def test_overrides_of_a_pretrained_model_are_limited_to_dropout(flat, pretrained_dir, tmp_path):
    raw = pretrained_config(flat, tmp_path / "ckpt", pretrained_dir)
    raw["model"]["overrides"] = {"hidden_size": 64, "attention_dropout": 0.1}
    with pytest.raises(ModelConfigError, match=r"model\.overrides: hidden_size cannot be overridden"):
        train_in_process(raw)
    raw["model"]["overrides"] = {"attention_dropuot": 0.1}
    with pytest.raises(ModelConfigError, match=r"model\.overrides: not fields of LlamaConfig: attention_dropuot"):
        train_in_process(raw)
    raw["model"]["overrides"] = {"attention_dropout": 0.1}
    shards = _shards(flat)
    model = build_causal_lm(parse_run_config(raw, REPO).model, shards, seed=0)
    assert model.config.attention_dropout == 0.1


def test_lora_on_missing_modules_is_refused(flat, tmp_path):
    raw = run_config(flat, tmp_path / "ckpt")
    raw["model"]["lora"] = {"target_modules": ["qkv_proj"]}
    with pytest.raises(ModelConfigError, match=r"model\.lora\.target_modules"):
        train_in_process(raw)

