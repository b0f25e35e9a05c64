"""Resume: a killed run continues bit-identically; SIGTERM saves and exits 0; what resume must refuse."""

import random
import signal
import time

import pytest
import torch
from train_runs import (
    KILL_AT_STEP,
    eval_losses,
    latest_step,
    launch,
    run_config,
    sample_ids,
    train_in_process,
    train_losses,
    write_config,
)

from training.checkpoint import CheckpointError, find_latest_checkpoint
from training.resume import DatasetVersionMismatch


def test_sigkill_at_a_random_step_then_resume_is_bit_identical(flat, reference, tmp_path):
    kill_at = random.Random(20240611).randint(4, 9)  # after the first checkpoint (step 3)
    ckpt = tmp_path / "ckpt"
    config = write_config(tmp_path / "run.yaml", run_config(flat, ckpt))
    proc = launch(["-c", KILL_AT_STEP, str(config), str(kill_at)])
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == -signal.SIGKILL, out
    assert max(train_losses(ckpt)) == kill_at  # it really got that far before dying
    assert latest_step(ckpt) == 3 * ((kill_at - 1) // 3)  # the newest checkpoint before the kill

    resumed = train_in_process(run_config(flat, ckpt))
    assert resumed.resumed_from == 3 * ((kill_at - 1) // 3)
    assert resumed.step == 10
    # Same data order, same losses to the last bit, same evals, same final weights.
    assert sample_ids(ckpt) == sample_ids(reference)
    assert train_losses(ckpt) == train_losses(reference)
    assert eval_losses(ckpt) == eval_losses(reference)
    final, expected = find_latest_checkpoint(ckpt).load("model"), find_latest_checkpoint(reference).load("model")
    assert all(torch.equal(final[k], expected[k]) for k in expected)


def test_sigterm_finishes_the_step_saves_and_exits_zero(flat, reference, tmp_path):
    ckpt = tmp_path / "ckpt"
    raw = run_config(flat, ckpt, max_steps=100_000)
    proc = launch(["-m", "training.train", "--config", str(write_config(tmp_path / "run.yaml", raw))])
    deadline = time.monotonic() + 120
    while len(train_losses(ckpt)) < 2:  # the handler is installed before the first step
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[0]
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out
    assert "SIGTERM received" in out
    stopped_at = max(train_losses(ckpt))
    assert 2 <= stopped_at < 100_000
    assert latest_step(ckpt) == stopped_at  # the checkpoint holds the last finished step
    # and continuing from it gives the uninterrupted run
    more = train_in_process(run_config(flat, ckpt, max_steps=stopped_at + 2))
    assert more.resumed_from == stopped_at
    steps = range(1, min(stopped_at + 2, 10) + 1)
    assert [train_losses(ckpt)[s] for s in steps] == [train_losses(reference)[s] for s in steps]
    assert [sample_ids(ckpt)[s] for s in steps] == [sample_ids(reference)[s] for s in steps]


def test_torn_checkpoint_is_ignored_on_resume(flat, reference, tmp_path):
    ckpt = tmp_path / "ckpt"
    train_in_process(run_config(flat, ckpt, max_steps=4))  # checkpoints at 3 and 4
    # A save killed before its rename, and a step directory whose meta.json never got written.
    (ckpt / ".tmp-step-00000005-4242").mkdir()
    (ckpt / ".tmp-step-00000005-4242" / "model.pt").write_bytes(b"torn")
    (ckpt / "step-00000006").mkdir()
    (ckpt / "step-00000006" / "model.pt").write_bytes(b"torn")
    result = train_in_process(run_config(flat, ckpt, max_steps=6))
    assert result.resumed_from == 4
    assert train_losses(ckpt) == {s: loss for s, loss in train_losses(reference).items() if s <= 6}
    assert not (ckpt / ".tmp-step-00000005-4242").exists()


def test_checkpoint_of_another_dataset_version_is_refused(flat, tmp_path):
    ckpt = tmp_path / "ckpt"
    train_in_process(run_config(flat, ckpt, max_steps=2))
    with pytest.raises(DatasetVersionMismatch, match="dataset_version 'fixture-v1', this run is configured for 'v2'"):
        train_in_process(run_config(flat, ckpt, max_steps=4, dataset_version="v2"))
    assert latest_step(ckpt) == 2  # nothing was trained or written

    allowed = train_in_process(run_config(flat, ckpt, max_steps=3, dataset_version="v2",
                                          checkpoint__allow_dataset_change=True))
    assert allowed.resumed_from == 2
    ids = sample_ids(ckpt)
    assert ids[3] == ids[1]  # weights continue, the new data starts at its first sample
    assert find_latest_checkpoint(ckpt).meta["dataset_version"] == "v2"


def test_a_fresh_start_into_a_directory_with_checkpoints_is_refused(flat, tmp_path):
    ckpt = tmp_path / "ckpt"
    train_in_process(run_config(flat, ckpt, max_steps=1))
    with pytest.raises(CheckpointError, match=r"holds checkpoints \(newest: step 1\) and checkpoint.resume is false"):
        train_in_process(run_config(flat, ckpt, max_steps=2, checkpoint__resume=False))
