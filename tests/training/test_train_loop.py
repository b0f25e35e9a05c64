"""The training loop: it learns, its metrics are right, and the loss is one global-batch mean."""

import json

import pytest
import torch
from train_runs import (
    eval_losses,
    run_config,
    sample_ids,
    sample_token_counts,
    train_in_process,
    train_losses,
    write_config,
)

from training.checkpoint import find_latest_checkpoint, list_checkpoints
from training.config import RunConfigError
from training.metrics import read_records
from training.schedule import WarmupCosine
from training.train import main

SCHEDULE = WarmupCosine(warmup_steps=2, decay_steps=10, min_ratio=0.1)  # run_config's


def test_the_model_learns_the_progressions(reference):
    losses = train_losses(reference)
    assert losses[10] < losses[1] - 0.2
    evals = eval_losses(reference)
    assert sorted(evals) == [4, 8, 10]
    assert evals[10] < evals[4]


def test_metric_records_are_exact(flat, reference):
    records = [r for r in read_records(reference / "metrics.jsonl") if r["kind"] == "train"]
    assert [r["step"] for r in records] == list(range(1, 11))
    tokens = sample_token_counts(flat)
    ids = sample_ids(reference)
    seen = 0
    for r in records:
        seen += sum(tokens[i] for i in ids[r["step"]])
        assert r["tokens_seen"] == seen  # global non-padding tokens, counted from the shard files
        assert r["lr"] == pytest.approx(3e-3 * SCHEDULE(r["step"] - 1))  # the lr the step trained with
        assert 0.0 <= r["data_wait_fraction"] < 1.0
        assert r["tokens_per_s"] > 0 and r["step_time_s"] > 0 and r["grad_norm"] > 0
        assert r["dataset_version"] == "fixture-v1"
    # 28 samples = 7 steps per epoch: steps 8.. are in epoch 1, each epoch a permutation of all samples
    assert [r["epoch"] for r in records] == [0] * 7 + [1] * 3
    assert sorted(i for s in range(1, 8) for i in ids[s]) == sorted(tokens)


def test_checkpoints_kept_and_their_contents(reference):
    assert [c.step for c in list_checkpoints(reference)] == [9, 10]  # keep_last 2
    ckpt = find_latest_checkpoint(reference)
    assert (reference / "latest").read_text() == "step-00000010\n"
    meta = ckpt.meta
    assert meta["dataset_version"] == "fixture-v1" and meta["world_size"] == 1
    assert meta["loader"]["epoch"] == 1 and meta["loader"]["consumed_samples"] == 12  # 3 steps into epoch 1
    assert meta["tokens_seen"] == read_records(reference / "metrics.jsonl")[-2]["tokens_seen"]
    assert meta["config"]["max_steps"] == 10
    optim = ckpt.load("optim")
    assert optim["scheduler"]["last_epoch"] == 10
    assert optim["scaler"] == {}  # fp32: the GradScaler is disabled and has no state
    rng = ckpt.load("rng")
    assert rng["world_size"] == 1 and set(rng["ranks"][0]) == {"python", "numpy", "torch", "cuda"}


@pytest.mark.parametrize("micro_batch_size", [2, 4])
def test_loss_does_not_depend_on_the_accumulation_split(flat, reference, tmp_path, micro_batch_size):
    """4 micro-batches of 1 (the reference), 2 of 2, 1 of 4: the same global-batch mean and updates."""
    train_in_process(run_config(flat, tmp_path / "ckpt", max_steps=4, data__micro_batch_size=micro_batch_size))
    assert sample_ids(tmp_path / "ckpt") == {s: sample_ids(reference)[s] for s in range(1, 5)}
    for step, loss in train_losses(tmp_path / "ckpt").items():
        assert loss == pytest.approx(train_losses(reference)[step], rel=1e-5)


def test_gradient_checkpointing_changes_memory_not_results(flat, reference, tmp_path):
    train_in_process(run_config(flat, tmp_path / "ckpt", max_steps=3, gradient_checkpointing=True))
    for step, loss in train_losses(tmp_path / "ckpt").items():
        assert loss == pytest.approx(train_losses(reference)[step], rel=1e-6)


def test_resume_applies_this_runs_optimizer_settings(flat, tmp_path):
    ckpt = tmp_path / "ckpt"
    train_in_process(run_config(flat, ckpt, max_steps=3))
    train_in_process(run_config(flat, ckpt, max_steps=5, optimizer__lr=1e-3, optimizer__weight_decay=0.2))
    lrs = {r["step"]: r["lr"] for r in read_records(ckpt / "metrics.jsonl") if r["kind"] == "train"}
    assert lrs[3] == pytest.approx(3e-3 * SCHEDULE(2))
    assert lrs[4] == pytest.approx(1e-3 * SCHEDULE(3))  # the new peak lr, on the same schedule position
    groups = find_latest_checkpoint(ckpt).load("optim")["optimizer"]["param_groups"]
    assert [g["weight_decay"] for g in groups] == [0.2, 0.0]


def test_command_line_entry_point(flat, tmp_path, capsys):
    config = write_config(tmp_path / "run.yaml", run_config(flat, tmp_path / "ckpt"))
    assert main(["--config", str(config), "--set", "max_steps=2", "--set", "validation.eval_interval=0"]) == 0
    assert sorted(train_losses(tmp_path / "ckpt")) == [1, 2]
    assert "step 2/2 | loss" in capsys.readouterr().out
    bad = tmp_path / "bad.yaml"
    bad.write_text(json.dumps({**run_config(flat, tmp_path / "ckpt"), "max_stepz": 3}))
    assert main(["--config", str(bad)]) == 2
    assert "max_stepz: unknown key" in capsys.readouterr().err


def test_data_errors_name_the_run_config_section(flat, tmp_path):
    # 8 validation samples cannot fill a global batch of 16 (the 28 training samples can)
    with pytest.raises(RunConfigError, match=r"^validation \(split 'validation' of .*\): samples_per_epoch 8 <"):
        train_in_process(run_config(flat, tmp_path / "ckpt", data__global_batch_size=16))
    with pytest.raises(RunConfigError, match=r"^data \(split 'train' of .*absent\): .*not found"):
        train_in_process(run_config(tmp_path / "absent", tmp_path / "ckpt"))
    assert not (tmp_path / "ckpt").exists()  # nothing written before the data was checked


def test_bf16_autocast_on_cpu_stays_close_to_fp32(flat, reference, tmp_path):
    train_in_process(run_config(flat, tmp_path / "ckpt", max_steps=3, precision="bf16"))
    for step, loss in train_losses(tmp_path / "ckpt").items():
        # bf16 keeps 8 bits of mantissa: ~0.4% per rounding, a few roundings deep
        assert loss == pytest.approx(train_losses(reference)[step], rel=2e-2)
        assert loss != train_losses(reference)[step]  # autocast really ran in bf16


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_bf16_run(flat, tmp_path):
    result = train_in_process(run_config(flat, tmp_path / "ckpt", max_steps=3, precision="auto", deterministic=False))
    assert result.step == 3 and result.loss is not None and result.loss < 10
    assert find_latest_checkpoint(tmp_path / "ckpt").load("model")["lm_head.weight"].dtype == torch.float32
    peaks = [r["cuda_peak_allocated_gib"] for r in read_records(tmp_path / "ckpt" / "metrics.jsonl")
             if r["kind"] == "train"]
    assert peaks and 0 < peaks[0] <= peaks[-1]  # a high-water mark: it never goes down


@pytest.mark.slow
def test_compiled_model_trains_like_the_eager_one(flat, reference, tmp_path):
    """torch.compile through dynamo and AOTAutograd (forward with the packed mask, backward, eval).
    The aot_eager backend: inductor's C++ code generation takes ~100 s on 2 CPU cores for this model."""
    train_in_process(run_config(flat, tmp_path / "ckpt", max_steps=4, compile=True, compile_backend="aot_eager",
                                deterministic=False))
    for step, loss in train_losses(tmp_path / "ckpt").items():
        assert loss == pytest.approx(train_losses(reference)[step], rel=1e-5)
    assert eval_losses(tmp_path / "ckpt")[4] == pytest.approx(eval_losses(reference)[4], rel=1e-5)
