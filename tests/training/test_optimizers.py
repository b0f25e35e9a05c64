"""optimizer.name (adamw, adafactor, the bitsandbytes 8-bit AdamWs) and the packed-sequence length figures
of each logged step (seq_len_avg/min/max over all ranks, rank_tokens_min/max)."""

import json
import sys

import numpy as np
import pytest
import torch
from train_runs import (
    eval_losses,
    launch_torchrun,
    run_config,
    sample_ids,
    train_in_process,
    train_losses,
    write_config,
)

from training.checkpoint import CheckpointError, find_latest_checkpoint
from training.config import OptimizerSettings, RunConfigError
from training.metrics import read_records
from training.optimizers import build_optimizer, check_optimizer_device
from training.seq_stats import combine_seq_figures, local_seq_figures

SEQ_FIELDS = ("seq_count", "seq_len_avg", "seq_len_min", "seq_len_max", "rank_tokens_min", "rank_tokens_max")


# ------------------------------------------------------------------ optimizers


def test_adafactor_trains_and_resumes_exactly(flat, tmp_path):
    full = tmp_path / "full"
    train_in_process(run_config(flat, full, optimizer__name="adafactor"))
    losses = train_losses(full)
    assert sorted(losses) == list(range(1, 11))
    # 4.53 -> 4.18 (AdamW's reference run: 4.53 -> 4.22)
    assert np.mean([losses[s] for s in (8, 9, 10)]) < np.mean([losses[s] for s in (1, 2, 3)]) - 0.2
    evals = eval_losses(full)
    assert evals[10] < evals[4]
    # Adafactor's own state, with the config's lr (schedule-driven) and the two weight-decay groups
    optim = find_latest_checkpoint(full).load("optim")["optimizer"]
    groups = optim["param_groups"]
    assert [g["weight_decay"] for g in groups] == [0.01, 0.0]
    assert all("betas" not in g and g["relative_step"] is False and g["scale_parameter"] is False for g in groups)
    assert groups[0]["lr"] == pytest.approx(3e-3 * 0.1)  # decay_steps 10: the cosine's floor at step 10
    assert any("exp_avg_sq_row" in s for s in optim["state"].values())  # factored second moment

    # 5 steps (checkpoint at 3 and 5), then a resumed run to 10: the same losses to the last bit
    part = tmp_path / "part"
    train_in_process(run_config(flat, part, optimizer__name="adafactor", max_steps=5))
    resumed = train_in_process(run_config(flat, part, optimizer__name="adafactor"))
    assert resumed.resumed_from == 5 and resumed.step == 10
    assert train_losses(part) == losses
    final, expected = find_latest_checkpoint(part).load("model"), find_latest_checkpoint(full).load("model")
    assert all(torch.equal(final[k], expected[k]) for k in expected)


@pytest.mark.parametrize("name", ["adamw_8bit", "paged_adamw_8bit"])
def test_8bit_adamw_on_cpu_is_refused_before_training(flat, tmp_path, name):
    ckpt = tmp_path / "ckpt"
    with pytest.raises(RunConfigError, match=rf"optimizer.name '{name}' needs a CUDA device .* this run is on cpu"):
        train_in_process(run_config(flat, ckpt, optimizer__name=name))
    assert not (ckpt / "metrics.jsonl").exists() and not (ckpt / "latest").exists()  # no step, no checkpoint


def test_8bit_adamw_without_bitsandbytes_names_the_missing_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "bitsandbytes.optim", None)  # import fails, installed or not
    with pytest.raises(RunConfigError, match=r"optimizer.name 'adamw_8bit' needs bitsandbytes.*platform-assets\[gpu\]"):
        check_optimizer_device(OptimizerSettings(name="adamw_8bit"), torch.device("cuda"))


def test_unknown_optimizer_name_is_a_config_error(flat, tmp_path):
    with pytest.raises(RunConfigError, match="optimizer.name: Input should be 'adamw', 'adafactor'"):
        train_in_process(run_config(flat, tmp_path / "ckpt", optimizer__name="sgd"))


def test_adamw_keeps_its_groups_and_hyperparameters():
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.LayerNorm(4))
    groups = [{"params": [model[0].weight], "weight_decay": 0.1},
              {"params": [model[0].bias, *model[1].parameters()], "weight_decay": 0.0}]
    opt = build_optimizer(OptimizerSettings(lr=1e-3, betas=(0.8, 0.9), eps=1e-6), groups, torch.device("cpu"))
    assert isinstance(opt, torch.optim.AdamW)
    assert [(g["weight_decay"], g["betas"], g["eps"], g["lr"]) for g in opt.param_groups] == [
        (0.1, (0.8, 0.9), 1e-6, 1e-3), (0.0, (0.8, 0.9), 1e-6, 1e-3)]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("name", ["adamw_8bit", "paged_adamw_8bit"])
def test_8bit_adamw_trains_and_resumes_on_cuda(flat, tmp_path, name):
    pytest.importorskip("bitsandbytes", reason="needs bitsandbytes (the gpu extra)")
    over = {"optimizer__name": name, "deterministic": False, "precision": "auto",
            "model__overrides__hidden_size": 64, "model__overrides__intermediate_size": 128}
    ckpt = tmp_path / "ckpt"
    train_in_process(run_config(flat, ckpt, max_steps=5, **over))
    resumed = train_in_process(run_config(flat, ckpt, **over))
    assert resumed.resumed_from == 5 and resumed.step == 10
    losses = train_losses(ckpt)
    assert np.mean([losses[s] for s in (8, 9, 10)]) < np.mean([losses[s] for s in (1, 2, 3)])
    groups = find_latest_checkpoint(ckpt).load("optim")["optimizer"]["param_groups"]
    assert [g["weight_decay"] for g in groups] == [0.01, 0.0]


# ------------------------------------------------------------------ sequence-length figures


def _segment_lengths(flat) -> dict[int, list[int]]:
    """Every train sample's document lengths, by sample id (source index << 40 | index in the set),
    straight from the shard files."""
    index = json.loads((flat / "index.json").read_text())
    out: dict[int, list[int]] = {}
    for source_index, shard_set in enumerate(s for s in index["sets"] if s["split"] == "train"):
        i = 0
        for shard in shard_set["shards"]:
            seqlens = np.fromfile(flat / shard["files"]["seqlens"]["path"], dtype="<i4")
            seqptr = np.fromfile(flat / shard["files"]["seqptr"]["path"], dtype="<i8")
            for a, b in zip(seqptr[:-1], seqptr[1:], strict=True):
                out[(source_index << 40) | i] = [int(n) for n in seqlens[a:b]]
                i += 1
    return out


def _expected(lengths: dict[int, list[int]], ranks: list[list[int]]) -> dict:
    """The step's figures from each rank's sample ids."""
    docs = [n for ids in ranks for i in ids for n in lengths[i]]
    per_rank = [sum(n for i in ids for n in lengths[i]) for ids in ranks]
    return {"seq_count": len(docs), "seq_len_avg": pytest.approx(sum(docs) / len(docs)),
            "seq_len_min": min(docs), "seq_len_max": max(docs),
            "rank_tokens_min": min(per_rank), "rank_tokens_max": max(per_rank)}


def _seq_figures(ckpt) -> dict[int, dict]:
    return {r["step"]: {k: r[k] for k in SEQ_FIELDS}
            for r in read_records(ckpt / "metrics.jsonl") if r["kind"] == "train"}


def test_sequence_length_figures_of_each_step(flat, reference):
    lengths = _segment_lengths(flat)
    figures, ids = _seq_figures(reference), sample_ids(reference)
    assert sorted(figures) == list(range(1, 11))
    assert any(len(lengths[i]) > 1 for s in ids for i in ids[s])  # packed rows of several documents
    for step, got in figures.items():
        assert got == _expected(lengths, [ids[step]])
        assert got["rank_tokens_min"] == got["rank_tokens_max"]  # one rank


def test_local_figures_of_a_known_batch_and_media_batches():
    batches = [{"cu_seqlens": torch.tensor([0, 5, 12, 32], dtype=torch.int32), "num_tokens": torch.tensor(32)},
               {"cu_seqlens": torch.tensor([0, 20], dtype=torch.int32), "num_tokens": torch.tensor(20)}]
    assert local_seq_figures(batches) == [4.0, 52.0, 5.0, 20.0, 52.0]
    empty = [{"cu_seqlens": torch.zeros(1, dtype=torch.int32), "num_tokens": torch.tensor(0)}]
    assert combine_seq_figures([local_seq_figures(batches), local_seq_figures(empty)]) == {
        "seq_count": 4, "seq_len_avg": 13.0, "seq_len_min": 5, "seq_len_max": 20,
        "rank_tokens_min": 0, "rank_tokens_max": 52}
    assert local_seq_figures([{"pixel_values": torch.zeros(1), "num_tokens": torch.tensor(3)}]) is None


@pytest.mark.slow  # a torchrun start: two processes importing torch (~10 s)
def test_two_ranks_figures_cover_both_ranks(flat, reference, tmp_path):
    ckpt = tmp_path / "ckpt"
    proc = launch_torchrun(2, ["-m", "training.train", "--config",
                               str(write_config(tmp_path / "run.yaml", run_config(flat, ckpt, max_steps=4)))])
    out, _ = proc.communicate(timeout=240)
    assert proc.returncode == 0, out
    lengths = _segment_lengths(flat)
    rank0, rank1 = sample_ids(ckpt, 0), sample_ids(ckpt, 1)
    figures, single = _seq_figures(ckpt), _seq_figures(reference)
    assert sorted(figures) == [1, 2, 3, 4]
    for step, got in figures.items():
        assert got == _expected(lengths, [rank0[step], rank1[step]])
        # the global batch is the single process's: the same documents, only split over two ranks
        assert {k: got[k] for k in SEQ_FIELDS[:4]} == {k: single[step][k] for k in SEQ_FIELDS[:4]}
        assert got["rank_tokens_min"] + got["rank_tokens_max"] == single[step]["rank_tokens_max"]
    assert any(f["rank_tokens_min"] < f["rank_tokens_max"] for f in figures.values())  # imbalance is seen


def test_resuming_with_another_optimizer_is_refused(flat, tmp_path):
    ckpt = tmp_path / "ckpt"
    train_in_process(run_config(flat, ckpt, max_steps=1))
    with pytest.raises(CheckpointError, match="holds 'adamw' optimizer state and this run's optimizer.name is 'adaf"):
        train_in_process(run_config(flat, ckpt, max_steps=2, optimizer__name="adafactor"))
