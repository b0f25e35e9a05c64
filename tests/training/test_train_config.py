"""The run config (strict, clear errors), the model built from it, the lr schedule and precision."""

import json
import math

import pytest
import torch
import yaml

from training.config import RunConfigError, load_run_config, parse_override, parse_run_config
from training.model import ModelConfigError, ShardSetInfo, build_model_config
from training.precision import resolve_precision
from training.schedule import WarmupCosine

MINIMAL = {
    "data": {"data_dir": "shards/flat"},
    "model": {"model_type": "llama", "overrides": {"hidden_size": 64, "num_attention_heads": 4}},
    "checkpoint": {"dir": "ckpt"},
    "dataset_version": "md5-abc",
    "max_steps": 10,
}
SHARDS = ShardSetInfo(seq_len=4096, vocab_size=50257, pad_id=50256, eos_id=50256, bos_id=None)


def _with(**changes) -> dict:
    raw = json.loads(json.dumps(MINIMAL))
    for dotted, value in changes.items():
        *parents, leaf = dotted.split("__")
        node = raw
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    return raw


def test_yaml_file_paths_resolve_against_the_file(tmp_path):
    path = tmp_path / "conf" / "run.yaml"
    path.parent.mkdir()
    path.write_text(yaml.safe_dump(MINIMAL))
    cfg = load_run_config(path)
    assert cfg.data.data_dir == str(tmp_path / "conf" / "shards" / "flat")
    assert cfg.checkpoint.dir == str(tmp_path / "conf" / "ckpt")
    assert cfg.metrics_path == tmp_path / "conf" / "ckpt" / "metrics.jsonl"
    assert cfg.data.global_batch_size == 8 and cfg.precision == "auto"


def test_json_file_is_accepted(tmp_path):
    path = tmp_path / "run.json"
    path.write_text(json.dumps(MINIMAL))
    assert load_run_config(path).dataset_version == "md5-abc"


def test_unknown_and_invalid_keys_are_named(tmp_path):
    raw = _with(optimizer__lrr=1e-3, data__global_batch_size=0)
    with pytest.raises(RunConfigError) as err:
        parse_run_config(raw, tmp_path)
    assert "optimizer.lrr: unknown key" in str(err.value)
    assert "data.global_batch_size: Input should be greater than 0" in str(err.value)


def test_missing_required_key_and_wrong_choice_are_named(tmp_path):
    raw = _with(precision="fp8")
    del raw["dataset_version"]
    with pytest.raises(RunConfigError) as err:
        parse_run_config(raw, tmp_path)
    assert "dataset_version: Field required" in str(err.value)
    assert "precision: Input should be 'auto', 'bf16', 'fp16' or 'fp32'" in str(err.value)


def test_batch_sizes_must_divide(tmp_path):
    with pytest.raises(RunConfigError, match=r"global_batch_size \(10\) must be a multiple of .*batch_size \(4\)"):
        parse_run_config(_with(data__global_batch_size=10, data__micro_batch_size=4), tmp_path)


def test_model_needs_exactly_one_source(tmp_path):
    with pytest.raises(RunConfigError, match="model: Value error, set exactly one of model_type and model_path"):
        parse_run_config(_with(model__model_path="cfgdir"), tmp_path)


def test_dotted_overrides_are_validated_like_the_file(tmp_path):
    cfg = parse_run_config(MINIMAL, tmp_path, {"max_steps": 99, "optimizer.lr": 1e-3, "checkpoint.dir": "/abs/c"})
    assert (cfg.max_steps, cfg.optimizer.lr, cfg.checkpoint.dir) == (99, 1e-3, "/abs/c")
    with pytest.raises(RunConfigError, match="max_steps: Input should be greater than 0"):
        parse_run_config(MINIMAL, tmp_path, {"max_steps": -1})
    with pytest.raises(RunConfigError, match="'dataset_version.x': dataset_version is not a mapping"):
        parse_run_config(MINIMAL, tmp_path, {"dataset_version.x": 1})


def test_command_line_override_parsing():
    assert parse_override("optimizer.lr=0.001") == ("optimizer.lr", 0.001)
    assert parse_override("data.weights={a: 1, b: 3}") == ("data.weights", {"a": 1, "b": 3})
    with pytest.raises(RunConfigError, match="expected key=value"):
        parse_override("optimizer.lr")


def test_unreadable_and_non_mapping_files(tmp_path):
    with pytest.raises(RunConfigError, match="cannot read run config"):
        load_run_config(tmp_path / "absent.yaml")
    (tmp_path / "list.yaml").write_text("- 1\n- 2\n")
    with pytest.raises(RunConfigError, match="top level must be a mapping, got list"):
        load_run_config(tmp_path / "list.yaml")


def test_model_config_takes_vocab_and_context_from_the_shards(tmp_path):
    cfg = parse_run_config(MINIMAL, tmp_path)
    model_config = build_model_config(cfg.model, SHARDS)
    assert model_config.vocab_size == 50257
    assert model_config.max_position_embeddings == 4096  # llama's default 2048 would be too short
    assert (model_config.pad_token_id, model_config.eos_token_id) == (50256, 50256)
    assert model_config.hidden_size == 64 and model_config.head_dim == 16
    assert model_config.use_cache is False


def test_model_override_typo_is_an_error_with_a_suggestion(tmp_path):
    cfg = parse_run_config(_with(model__overrides={"hidden_sise": 64}), tmp_path)
    with pytest.raises(ModelConfigError, match=r"not fields of LlamaConfig: hidden_sise \(did you mean hidden_size"):
        build_model_config(cfg.model, SHARDS)


def test_model_too_small_for_the_shards_is_refused(tmp_path):
    cfg = parse_run_config(_with(model__overrides={"vocab_size": 1000}), tmp_path)
    with pytest.raises(ModelConfigError, match="vocab_size 1000 is smaller than the shards' vocab_size 50257"):
        build_model_config(cfg.model, SHARDS)
    cfg = parse_run_config(_with(model__model_type="gpt2", model__overrides={"n_positions": 1024}), tmp_path)
    with pytest.raises(ModelConfigError, match="n_positions = 1024 is shorter than the shards' seq_len 4096"):
        build_model_config(cfg.model, SHARDS)


def test_unknown_model_type(tmp_path):
    cfg = parse_run_config(_with(model__model_type="llamma"), tmp_path)
    with pytest.raises(ModelConfigError, match="unknown transformers model type 'llamma'"):
        build_model_config(cfg.model, SHARDS)


def test_model_path_reads_a_local_config_json_and_applies_overrides(tmp_path):
    saved = tmp_path / "saved"
    saved.mkdir()
    (saved / "config.json").write_text(json.dumps({"model_type": "gpt2", "n_embd": 96, "n_head": 4, "n_layer": 3}))
    raw = _with(model={"model_path": "saved", "overrides": {"n_layer": 2}})
    model_config = build_model_config(parse_run_config(raw, tmp_path).model, SHARDS)
    assert (type(model_config).__name__, model_config.n_embd, model_config.n_layer) == ("GPT2Config", 96, 2)
    assert model_config.n_positions == 4096


def test_warmup_then_cosine_to_the_floor():
    sched = WarmupCosine(warmup_steps=4, decay_steps=14, min_ratio=0.1)
    assert [sched(s) for s in range(4)] == [0.25, 0.5, 0.75, 1.0]
    assert sched(4) == 1.0
    assert sched(9) == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 0.5)))
    assert sched(14) == pytest.approx(0.1) and sched(1000) == pytest.approx(0.1)
    with pytest.raises(ValueError, match="decay_steps \\(4\\) must be greater than warmup_steps \\(4\\)"):
        WarmupCosine(warmup_steps=4, decay_steps=4, min_ratio=0.0)


def test_precision_on_cpu():
    cpu = torch.device("cpu")
    assert resolve_precision("auto", cpu).name == "fp32"
    assert resolve_precision("bf16", cpu).autocast_dtype == torch.bfloat16
    assert resolve_precision("bf16", cpu).loss_scaling is False
    with pytest.raises(ValueError, match="fp16 needs a CUDA device"):
        resolve_precision("fp16", cpu)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_precision_on_cuda():
    plan = resolve_precision("auto", torch.device("cuda", 0))
    assert plan.name == ("bf16" if torch.cuda.is_bf16_supported() else "fp16")
    assert resolve_precision("fp16", torch.device("cuda", 0)).loss_scaling is True
