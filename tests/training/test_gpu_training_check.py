"""benchmarks/gpu_training_check.py runs on a lent GPU machine only (CI has none); what it builds is
checked here: its shard set is one training's loader reads, its run configs are valid run configs."""

import json
from pathlib import Path

import numpy as np
import pytest

from benchmarks import gpu_training_check as check
from training.config import parse_override, parse_run_config
from training.data.shard_index import read_flat_index


def test_the_synthetic_shard_set_is_a_valid_flat_set(tmp_path):
    flat = check.write_shards(tmp_path, train_samples=600)
    index = read_flat_index(flat)
    train = [s for s in index.sets if s.split == "train"]
    assert sorted(s.source for s in train) == ["code", "prose"]
    assert sum(shard.samples for s in train for shard in s.shards) == 600
    assert index.seq_len == check.SEQ_LEN
    seqlens = np.concatenate([np.fromfile(flat / shard.seqlens.path, dtype="<i4")
                              for s in train for shard in s.shards])
    assert seqlens.min() > 8 and seqlens.max() <= check.SEQ_LEN  # documents, each cut to its sample's room


@pytest.mark.parametrize("over", [{}, {"model.attn_implementation": "flash_attention_2"},
                                  {"optimizer.name": "adamw_8bit"}, {"compile": True}])
def test_the_run_configs_are_valid(tmp_path, over):
    raw = check.run_config(Path("/data/flat"), tmp_path / "ckpt", check.MODEL_125M, 60)
    # the values as the script hands them to `--set` (JSON, which training's parse_override reads as YAML)
    sets = dict(parse_override(f"{key}={json.dumps(value)}") for key, value in over.items())
    cfg = parse_run_config(raw, tmp_path, sets)
    assert cfg.max_steps == 60 and cfg.precision == "auto"
    assert cfg.data.global_batch_size == 32 and cfg.data.micro_batch_size == 8
    assert cfg.model.overrides["hidden_size"] == 768
    for dotted, value in over.items():
        node = cfg
        for part in dotted.split("."):
            node = getattr(node, part)
        assert node == value


def test_runs_selects_a_subset_and_refuses_unknown_names():
    assert check.selected_runs("adamw_8bit, sdpa_bf16_torchrun") == {"adamw_8bit", "sdpa_bf16_torchrun"}
    with pytest.raises(SystemExit, match="unknown run.*'adamw8bit'"):
        check.selected_runs("adamw8bit")
    with pytest.raises(SystemExit, match="unknown run"):
        check.selected_runs(" , ")
