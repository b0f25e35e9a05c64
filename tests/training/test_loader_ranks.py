"""Rank sharding: ranks get disjoint contiguous blocks of every global batch, together exactly the epoch's
used samples, in equal counts; a run saved on 2 ranks resumes on 1 (same global batch) in the same
global order."""

from __future__ import annotations

import numpy as np
import pytest
from loader_runs import sample_ids, take
from shard_fixtures import build_sets

from training.data import LoaderConfig, PackedLoader
from training.data.batch_plan import BatchPlan, BatchPlanError
from training.data.shard_reader import SOURCE_SHIFT

GB = 8


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    return build_sets(tmp_path_factory.mktemp("shards"), {"a": [25, 9], "b": [14], "c": [19]}, seq_len=16, seed=4)


def _cfg(shards, micro: int, **kw) -> LoaderConfig:
    return LoaderConfig(str(shards.flat), global_batch_size=GB, micro_batch_size=micro, seed=11, **kw)


def _global_ids(loader: PackedLoader, epoch: int, n: int) -> list[int]:
    src, idx = loader.order.samples(epoch, np.arange(n))
    return ((src << SOURCE_SHIFT) | idx).tolist()


def test_two_ranks_split_every_step_without_gap_or_overlap(shards):
    ranks = [PackedLoader(_cfg(shards, 2, num_workers=w), rank=r, world_size=2) for r, w in ((0, 0), (1, 2))]
    runs = [take(loader) for loader in ranks]
    assert ranks[0].steps_per_epoch == 67 // GB == 8 and ranks[0].accumulation_steps == 2
    assert len(runs[0]) == len(runs[1]) == 8 * 2  # equal micro-batch counts per rank
    ids = [sample_ids(run) for run in runs]
    assert not set(ids[0]) & set(ids[1])
    used = _global_ids(ranks[0], 0, 8 * GB)
    assert sorted(ids[0] + ids[1]) == sorted(used) and len(set(used)) == len(used)
    for t in range(8):  # step t: rank 0 has the first half of the global batch, rank 1 the second
        assert ids[0][4 * t: 4 * t + 4] == used[GB * t: GB * t + 4]
        assert ids[1][4 * t: 4 * t + 4] == used[GB * t + 4: GB * (t + 1)]


def test_two_ranks_then_one_rank_continues_the_same_global_order(shards):
    single = PackedLoader(_cfg(shards, 4))
    want = sample_ids(take(single)) + sample_ids(take(single))  # 1 rank, 2 micro-batches per step, 2 epochs

    ranks = [PackedLoader(_cfg(shards, 2), rank=r, world_size=2) for r in (0, 1)]
    t = 3
    parts = [take(loader, t * ranks[0].accumulation_steps) for loader in ranks]  # 3 optimizer steps
    got = []
    for step in range(t):
        for part in parts:
            got += sample_ids(part[2 * step: 2 * step + 2])
    state = ranks[0].state_dict()
    assert state == ranks[1].state_dict() and state["consumed_samples"] == t * GB

    resumed = PackedLoader(_cfg(shards, 4))  # world 1, micro batch 4: accumulation 2
    resumed.load_state_dict(state)
    got += sample_ids(take(resumed)) + sample_ids(take(resumed))
    assert got == want


def test_a_mid_step_state_needs_the_same_world_size(shards):
    two = PackedLoader(_cfg(shards, 2), rank=0, world_size=2)
    take(two, 1)  # half of step 0's accumulation
    state = two.state_dict()
    assert state["consumed_samples"] == 4
    with pytest.raises(ValueError, match=r"4 samples into optimizer step 0: resume it with the world_size and "
                                         r"micro_batch_size it was saved with \(2, 2\), not \(1, 4\)"):
        PackedLoader(_cfg(shards, 4)).load_state_dict(state)
    same = PackedLoader(_cfg(shards, 2), rank=1, world_size=2)
    same.load_state_dict(state)  # the same layout resumes mid-step
    assert same.state_dict()["consumed_samples"] == 4


def test_batch_sizes_that_do_not_divide_are_refused(shards):
    with pytest.raises(BatchPlanError, match="global_batch_size 8 is not a multiple of micro_batch_size 3 x "
                                             "world_size 1 = 3"):
        PackedLoader(_cfg(shards, 3))
    with pytest.raises(BatchPlanError, match="micro_batch_size 2 x world_size 3 = 6"):
        PackedLoader(_cfg(shards, 2), rank=0, world_size=3)
    with pytest.raises(BatchPlanError, match=r"rank must lie in \[0, world_size=2\), got 2"):
        PackedLoader(_cfg(shards, 1), rank=2, world_size=2)


def test_batch_plan_positions():
    plan = BatchPlan(global_batch_size=12, micro_batch_size=2, world_size=3, rank=2, steps_per_epoch=5)
    assert plan.accumulation_steps == 2 and plan.micro_batches_per_epoch == 10
    assert plan.positions(0).tolist() == [8, 9] and plan.positions(1).tolist() == [10, 11]
    assert plan.positions(2).tolist() == [20, 21] and plan.positions(9).tolist() == [58, 59]
