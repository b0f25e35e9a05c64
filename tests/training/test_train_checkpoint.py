"""Atomic checkpoints: complete ones are found, torn ones ignored, old ones pruned."""

import json

import pytest
import torch

from training.checkpoint import (
    LATEST_POINTER,
    CheckpointError,
    find_latest_checkpoint,
    list_checkpoints,
    read_checkpoint,
    read_latest_pointer,
    save_checkpoint,
)
from training.metrics import MetricsLogger, read_records, truncate_after


def _save(root, step, keep_last=3):
    return save_checkpoint(root, step, {"model": {"w": torch.full((4,), float(step))}},
                           {"dataset_version": "v1", "loader": {"consumed_samples": step * 8}}, keep_last)


def test_save_writes_files_meta_and_latest(tmp_path):
    path = _save(tmp_path, 5)
    assert path.name == "step-00000005"
    assert sorted(p.name for p in path.iterdir()) == ["meta.json", "model.pt"]
    meta = json.loads((path / "meta.json").read_text())
    assert meta["step"] == 5 and meta["dataset_version"] == "v1" and meta["files"]["model.pt"] > 0
    assert (tmp_path / LATEST_POINTER).read_text() == "step-00000005\n"
    ckpt = find_latest_checkpoint(tmp_path)
    assert ckpt.step == 5 and ckpt.meta["loader"] == {"consumed_samples": 40}
    assert torch.equal(ckpt.load("model")["w"], torch.full((4,), 5.0))
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temp left behind


def test_keep_last_prunes_the_oldest(tmp_path):
    for step in (1, 2, 3, 4):
        _save(tmp_path, step, keep_last=2)
    assert [c.step for c in list_checkpoints(tmp_path)] == [3, 4]
    assert sorted(p.name for p in tmp_path.iterdir()) == [LATEST_POINTER, "step-00000003", "step-00000004"]


def test_torn_checkpoints_are_ignored_and_the_newest_complete_one_wins(tmp_path):
    _save(tmp_path, 2)
    # A writer killed mid-save leaves its temp dir; one killed before meta.json leaves no record;
    # a truncated file no longer matches the recorded size.
    torn_tmp = tmp_path / ".tmp-step-00000003-999"
    torn_tmp.mkdir()
    (torn_tmp / "model.pt").write_bytes(b"partial")
    (tmp_path / "step-00000004").mkdir()
    (tmp_path / "step-00000004" / "model.pt").write_bytes(b"no meta")
    truncated = _save(tmp_path, 5)
    (truncated / "model.pt").write_bytes(b"short")
    assert find_latest_checkpoint(tmp_path).step == 2
    with pytest.raises(CheckpointError, match="model.pt is 5 bytes, the checkpoint recorded"):
        read_checkpoint(truncated)
    with pytest.raises(CheckpointError, match="no readable meta.json"):
        read_checkpoint(tmp_path / "step-00000004")
    # `latest` names the truncated one: readers outside the job are told it is not usable
    assert read_latest_pointer(tmp_path) is None
    _save(tmp_path, 6)
    assert not torn_tmp.exists()  # the next save clears what crashed writers left


def test_a_complete_checkpoint_newer_than_latest_is_found(tmp_path):
    """Crash between the directory rename and the pointer update: the scan still finds it."""
    _save(tmp_path, 1)
    _save(tmp_path, 2)
    (tmp_path / LATEST_POINTER).write_text("step-00000001\n")
    assert find_latest_checkpoint(tmp_path).step == 2
    assert read_latest_pointer(tmp_path).name == "step-00000001"


def test_saving_the_same_step_again_replaces_it(tmp_path):
    _save(tmp_path, 3)
    save_checkpoint(tmp_path, 3, {"model": {"w": torch.zeros(2)}}, {"dataset_version": "v2"}, 3)
    ckpt = find_latest_checkpoint(tmp_path)
    assert ckpt.meta["dataset_version"] == "v2" and ckpt.load("model")["w"].shape == (2,)


def test_metrics_truncate_after_drops_later_steps_and_torn_lines(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps({"step": s, "loss": 1.0 / s}) + "\n" for s in (1, 2, 3, 4)) + '{"step": 5, "lo')
    assert [r["step"] for r in read_records(path)] == [1, 2, 3, 4]
    truncate_after(path, 2)
    assert [r["step"] for r in read_records(path)] == [1, 2]
    assert path.read_text().endswith("\n")


def test_metrics_logger_writes_strict_json_and_calls_back(tmp_path, capsys):
    seen = []
    logger = MetricsLogger(tmp_path / "m.jsonl", resume_step=0, max_steps=9, dataset_version="v3",
                           callbacks=[seen.append])
    logger.log({"kind": "train", "step": 1, "loss": 2.5, "lr": 1e-3, "grad_norm": float("inf"),
                "tokens_per_s": 1000.0, "data_wait_fraction": 0.25, "tokens_seen": 4096})
    logger.close()
    line = (tmp_path / "m.jsonl").read_text()
    assert "Infinity" not in line and json.loads(line)["grad_norm"] is None  # a skipped fp16 step
    assert seen == [json.loads(line)] and seen[0]["dataset_version"] == "v3"
    assert capsys.readouterr().out == (
        "step 1/9 | loss 2.5000 | lr 1.000e-03 | grad norm n/a | 1,000 tok/s | data wait 25.0% | tokens 4,096\n"
    )
