"""Exact resumption: a run interrupted anywhere and resumed from its state_dict (in a fresh loader) hands
out exactly the micro-batches of an uninterrupted run, for any number of workers; resuming costs O(1)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest
from loader_runs import assert_same_batches, epochs, sample_ids, take
from shard_fixtures import ShardArrays, build_sets, write_flat

import training.data.loader as loader_module
from training.data import LoaderConfig, PackedLoader
from training.data.batch_transfer import group_size
from training.data.shard_reader import SOURCE_SHIFT

# 3 sources, 52 train samples over 5 shards (one empty), masks on: GB 8 -> 6 steps (4 samples dropped)
SIZES = {"a": [20, 13], "b": [7], "c": [0, 12]}


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    return build_sets(tmp_path_factory.mktemp("shards"), SIZES, seq_len=24, seed=1, with_mask=True)


def _cfg(shards, **kw) -> LoaderConfig:
    base = {"data_dir": str(shards.flat), "global_batch_size": 8, "micro_batch_size": 2, "seed": 7}
    return LoaderConfig(**{**base, **kw})


@pytest.fixture(scope="module")
def reference(shards):
    """Two uninterrupted epochs, in process."""
    return epochs(PackedLoader(_cfg(shards)), 2)


@pytest.mark.parametrize("num_workers", [0, 1, 2])
@pytest.mark.parametrize("stop_at", [5, 12, 24, 31])  # mid-step, step boundary, epoch end, in epoch 1
def test_resume_matches_an_uninterrupted_run(shards, reference, num_workers, stop_at):
    first = PackedLoader(_cfg(shards, num_workers=num_workers))
    assert first.steps_per_epoch == 6 and first.accumulation_steps == 4
    got = take(first) if stop_at >= 24 else []  # epoch 0 whole, then into epoch 1
    got += take(first, stop_at - len(got))  # workers prefetch past this point; the state must not count it
    state = json.loads(json.dumps(first.state_dict()))  # plain JSON
    assert (state["epoch"], state["consumed_samples"]) == divmod(stop_at * 2, 48)

    resumed = PackedLoader(_cfg(shards, num_workers=num_workers))
    resumed.load_state_dict(state)
    assert resumed.epoch == stop_at // 24
    while len(got) < len(reference):  # to the end of epoch 1, across the epoch boundary when stopped in 0
        got += take(resumed)
    assert_same_batches(got, reference)
    assert resumed.epoch == 2 and resumed.state_dict()["consumed_samples"] == 0


def test_same_sequence_for_0_and_2_workers(shards, reference):
    two = epochs(PackedLoader(_cfg(shards, num_workers=2)), 2)
    assert_same_batches(two, reference)
    ids = sample_ids(reference)
    assert len(ids) == 96 and len(set(ids[:48])) == 48  # one epoch never repeats a sample here


@pytest.mark.parametrize("group", [1, 3])
def test_workers_sending_groups_of_micro_batches_keep_the_sequence(shards, reference, monkeypatch, group):
    # seq_len 24 fits 16 micro-batches in a message, more than a worker gets here: force small groups so
    # that each of the 2 workers sends several, resumed inside a group and across the epoch boundary
    monkeypatch.setattr(loader_module, "group_size", lambda micro_batch_size, seq_len: group)
    first = PackedLoader(_cfg(shards, num_workers=2))
    got = take(first, 7)
    resumed = PackedLoader(_cfg(shards, num_workers=2))
    resumed.load_state_dict(first.state_dict())
    got += take(resumed) + take(resumed)
    assert_same_batches(got, reference)


def test_padded_resume_with_workers(tmp_path):
    shards = build_sets(tmp_path, {"a": [30], "b": [18]}, seq_len=32, seed=2, one_segment=True)
    cfg = LoaderConfig(str(shards.flat), global_batch_size=4, micro_batch_size=2, collate="padded", num_workers=2)
    want = epochs(PackedLoader(cfg), 2)
    first = PackedLoader(cfg)
    got = take(first, 9)
    resumed = PackedLoader(cfg)
    resumed.load_state_dict(first.state_dict())
    got += take(resumed) + take(resumed)
    assert_same_batches(got, want)


def test_messages_hold_about_4_mib_of_micro_batches():
    assert group_size(8, 2048) == 7  # counted at 36 bytes a position (padded adds attention_mask): 590 KB
    assert group_size(1, 2048) == 16  # capped
    assert group_size(32, 8192) == 1  # 9 MB: one per message


def test_state_is_what_was_handed_out_and_epoch_advances_with_the_last_batch(shards):
    loader = PackedLoader(_cfg(shards, num_workers=2))
    it = iter(loader)
    for _ in range(3):
        next(it)
    assert loader.state_dict()["consumed_samples"] == 6 and loader.epoch == 0
    for _ in range(21):
        next(it)
    assert loader.epoch == 1 and loader.state_dict()["consumed_samples"] == 0
    with pytest.raises(StopIteration):
        next(it)


def test_a_superseded_iterator_refuses_to_continue(shards):
    loader = PackedLoader(_cfg(shards))
    old = iter(loader)
    next(old)
    new = iter(loader)
    assert next(new)["sample_ids"].tolist() == sample_ids(take(PackedLoader(_cfg(shards)), 2))[2:4]
    with pytest.raises(RuntimeError, match="superseded"):
        next(old)


def test_state_from_other_settings_or_data_is_refused(shards, tmp_path):
    state = PackedLoader(_cfg(shards)).state_dict()
    with pytest.raises(ValueError, match="seed=7, this loader has 8"):
        PackedLoader(_cfg(shards, seed=8)).load_state_dict(state)
    with pytest.raises(ValueError, match="global_batch_size=8, this loader has 16"):
        PackedLoader(_cfg(shards, global_batch_size=16)).load_state_dict(state)
    with pytest.raises(ValueError, match="mixture="):
        PackedLoader(_cfg(shards, weights={"a": 1, "b": 1, "c": 1})).load_state_dict(state)
    other = build_sets(tmp_path, SIZES, seq_len=24, seed=2, with_mask=True)  # same shape, other tokens
    with pytest.raises(ValueError, match="index_sha256="):
        PackedLoader(_cfg(other)).load_state_dict(state)
    with pytest.raises(ValueError, match="consumed_samples: expected an int in \\[0, 48\\]"):
        PackedLoader(_cfg(shards)).load_state_dict({**state, "consumed_samples": 50})
    with pytest.raises(ValueError, match="not a PackedLoader state"):
        PackedLoader(_cfg(shards)).load_state_dict({"epoch": 0})


# -- resume cost ----------------------------------------------------------------------------------------
N_LARGE = 600_000  # per source: 1.2 M samples, seq_len 4 (13 MB of files)


@pytest.fixture(scope="module")
def large(tmp_path_factory) -> Path:
    seq_len = 4
    sets = {}
    for s, source in enumerate(("a", "b")):
        ids = np.arange(N_LARGE, dtype=np.int64)
        tokens = (np.stack([ids * 4 + j for j in range(seq_len)], axis=1) + s) % 50000 + 2
        sets[("train", source)] = [ShardArrays(tokens, np.full(N_LARGE, seq_len, np.int32),
                                               np.arange(N_LARGE + 1, dtype=np.int64))]
    return write_flat(tmp_path_factory.mktemp("large"), sets, seq_len)


def _resume_cost(flat: Path, consumed: int) -> tuple[float, int, int, list[int]]:
    cfg = LoaderConfig(str(flat), global_batch_size=8, micro_batch_size=4, seed=3)
    loader = PackedLoader(cfg, rank=1, world_size=2)
    state = {**loader.state_dict(), "consumed_samples": consumed}
    t0 = time.perf_counter()
    loader.load_state_dict(state)
    batch = next(iter(loader))
    seconds = time.perf_counter() - t0
    return seconds, loader.reader.samples_read, loader.order.permutations.computed, batch["sample_ids"].tolist()


def test_resume_is_a_seek_not_a_replay(large):
    t0, read0, perms0, ids0 = _resume_cost(large, 0)
    t1, read1, perms1, ids1 = _resume_cost(large, 1_000_000)
    # the work done to deliver the first batch after the seek: the batch's 4 samples, one permutation per
    # source the batch draws from; never the 10^6 samples before it
    assert read0 == read1 == 4
    assert perms0 <= 2 and perms1 <= 2
    assert t1 < 0.5 and t1 < 10 * t0 + 0.05  # generous: a replay of 10^6 samples would take seconds
    # the sought batch is the one the global order places there: rank 1's half of step 125,000
    loader = PackedLoader(LoaderConfig(str(large), global_batch_size=8, micro_batch_size=4, seed=3))
    src, idx = loader.order.samples(0, np.arange(1_000_004, 1_000_008))
    assert ids1 == ((src << SOURCE_SHIFT) | idx).tolist()
    assert ids0 != ids1
