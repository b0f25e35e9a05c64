"""Two ranks under torchrun (gloo on CPU): disjoint, complete rank shards of the global order; an
elastic resume on one rank; SIGTERM to one rank stops both after the same step."""

import os
import signal
import time
from pathlib import Path

import pytest
from train_runs import (
    eval_losses,
    latest_step,
    launch_torchrun,
    run_config,
    sample_ids,
    train_in_process,
    train_losses,
    write_config,
)

pytestmark = pytest.mark.slow  # each torchrun start is two processes importing torch on a shared CPU (~10 s)


def _worker_pid(torchrun_pid: int, rank: int) -> int | None:
    """The torchrun worker whose environment says RANK=<rank> (workers are the agent's children)."""
    children = Path(f"/proc/{torchrun_pid}/task/{torchrun_pid}/children").read_text().split()
    for pid in children:
        try:
            env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"RANK={rank}".encode() in env:
            return int(pid)
    return None


def test_two_ranks_split_each_step_and_one_rank_resumes_the_same_order(flat, reference, tmp_path):
    ckpt = tmp_path / "ckpt"
    config = write_config(tmp_path / "run.yaml", run_config(flat, ckpt, max_steps=6))
    proc = launch_torchrun(2, ["-m", "training.train", "--config", str(config)])
    out, _ = proc.communicate(timeout=240)
    assert proc.returncode == 0, out
    rank0, rank1, single = sample_ids(ckpt, 0), sample_ids(ckpt, 1), sample_ids(reference)
    assert sorted(rank0) == sorted(rank1) == list(range(1, 7))
    for step in range(1, 7):
        # rank r takes block r of the step's global batch: disjoint, and together the whole batch in order
        assert len(rank0[step]) == len(rank1[step]) == 2
        assert not set(rank0[step]) & set(rank1[step])
        assert rank0[step] + rank1[step] == single[step]
    for step, loss in train_losses(ckpt).items():  # one global-batch mean, whatever the split over ranks
        assert loss == pytest.approx(train_losses(reference)[step], rel=1e-5)
    assert eval_losses(ckpt)[4] == pytest.approx(eval_losses(reference)[4], rel=1e-5)

    # Elastic: the 2-rank checkpoint of step 6 resumed by one process continues the same global order.
    resumed = train_in_process(run_config(flat, ckpt, max_steps=10))
    assert resumed.resumed_from == 6
    after = sample_ids(ckpt, 0)
    assert [after[s] for s in range(7, 11)] == [single[s] for s in range(7, 11)]
    for step in range(7, 11):
        assert train_losses(ckpt)[step] == pytest.approx(train_losses(reference)[step], rel=1e-4)


def test_sigterm_to_one_rank_stops_every_rank_after_the_same_step(flat, tmp_path):
    ckpt = tmp_path / "ckpt"
    config = write_config(tmp_path / "run.yaml", run_config(flat, ckpt, max_steps=100_000))
    proc = launch_torchrun(2, ["-m", "training.train", "--config", str(config)])
    deadline = time.monotonic() + 180
    while len(sample_ids(ckpt, 1)) < 2:
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[0]
        time.sleep(0.05)
    worker = _worker_pid(proc.pid, 1)
    assert worker is not None
    os.kill(worker, signal.SIGTERM)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, out  # both workers exited 0, so torchrun did too
    last0, last1 = max(sample_ids(ckpt, 0)), max(sample_ids(ckpt, 1))
    assert last0 == last1 == latest_step(ckpt)
    assert "[rank 1] WARNING SIGTERM received" in out
    assert "[rank 0] WARNING stopped by another rank" in out
