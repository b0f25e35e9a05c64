"""Mixture weights: the schedule keeps every source within one sample of weight*n after every prefix of
n samples (floor(w*n) <= count <= ceil(w*n), checked in exact integer arithmetic over all prefixes), and a
source drawn more often than it has samples wraps into a new permutation."""

from __future__ import annotations

from collections import Counter
from fractions import Fraction

import numpy as np
import pytest
from loader_runs import sample_ids, take
from shard_fixtures import build_sets

from training.data import LoaderConfig, PackedLoader
from training.data.global_order import GlobalOrder
from training.data.mixture import Mixture, MixtureError, blend, edf_sources
from training.data.shard_reader import SOURCE_SHIFT


def assert_quota_on_every_prefix(sources: np.ndarray, numerators, denominator: int) -> None:
    n = np.arange(1, len(sources) + 1, dtype=object)  # python ints: p*n exact for any denominator
    for s, p in enumerate(numerators):
        count = np.cumsum(sources == s).astype(object)
        low, high = (p * n) // denominator, -((-p * n) // denominator)
        bad = np.flatnonzero((count < low) | (count > high))
        assert len(bad) == 0, (s, int(bad[0]) + 1, count[bad[0]], p * (bad[0] + 1) / denominator)


@pytest.mark.parametrize("weights", [
    (0.5, 0.3, 0.2),
    (0.04, 0.81, 0.15),  # Megatron's greedy drifts to 1.24 here
    (0.008, 0.008, 0.0, 0.002, 0.82, 0.0, 0.162),  # and its w*(n+1) variant to 1.17 on mixtures like this
    (1.0,),
    (1 / 3, 1 / 3, 1 / 3),
])
def test_quota_holds_on_every_prefix(weights):
    names = [f"s{i}" for i in range(len(weights))]
    mix = Mixture.from_weights(names, [10] * len(weights), dict(zip(names, weights, strict=True)), "train")
    assert [float(mix.weight(s)) for s in range(len(weights))] == pytest.approx(np.array(weights) / sum(weights))
    src = edf_sources(mix.numerators, mix.denominator, 5000)
    assert_quota_on_every_prefix(src, mix.numerators, mix.denominator)


def test_quota_holds_for_random_mixtures_with_large_denominators():
    rng = np.random.default_rng(0)
    for _ in range(40):
        k = int(rng.integers(2, 13))
        sizes = rng.integers(0, 5000, size=k) * rng.integers(0, 2, size=k)  # zeros: sources left out
        sizes[0] += 1
        mix = Mixture.from_weights([f"s{i}" for i in range(k)], sizes.tolist(), None, "train")
        src = edf_sources(mix.numerators, mix.denominator, 3000)
        assert_quota_on_every_prefix(src, mix.numerators, mix.denominator)
        assert not set(np.flatnonzero(sizes == 0)) & set(src.tolist())  # weight 0: never drawn


def test_periodic_schedule_is_tiled_exactly():
    # 5/10, 3/10, 2/10 repeats every 10 positions; the same weights over a denominator larger than the
    # length are computed position by position: both must agree
    tiled = edf_sources((5, 3, 2), 10, 997)
    scale = 1000
    direct = edf_sources((5 * scale, 3 * scale, 2 * scale), 10 * scale, 997)
    assert np.array_equal(tiled, direct)
    assert Counter(tiled[:10].tolist()) == {0: 5, 1: 3, 2: 2}


@pytest.mark.parametrize(("sizes", "weights", "length"), [
    ([1, 1, 1], {"s0": 0.5, "s1": 0.3, "s2": 0.2}, 997),  # period 10, tiled, a partial last period
    ([1, 1, 1], {"s0": 0.5, "s1": 0.3, "s2": 0.2}, 7),  # shorter than one period
    ([7, 5, 3], None, 1000),  # period 15
    ([700_001, 500, 3], None, 2000),  # period longer than the epoch
])
def test_blend_ordinals_and_counts(sizes, weights, length):
    mix = Mixture.from_weights(["s0", "s1", "s2"], sizes, weights, "train")
    b = blend(mix, length)
    assert len(b.source) == min(length, mix.denominator)  # one period is stored
    source, ordinal = b.at(np.arange(length))
    assert np.array_equal(source, edf_sources(mix.numerators, mix.denominator, length))
    for s in range(3):  # ordinal: earlier positions of the same source
        assert ordinal[source == s].tolist() == list(range(int(np.count_nonzero(source == s))))
    assert b.counts.tolist() == np.bincount(source, minlength=3).tolist()


def test_global_order_is_the_same_one_micro_batch_at_a_time_or_in_bulk():
    # micro-batches take a per-position path, length-bucketing windows a grouped one: they must agree
    mix = Mixture.from_weights(["a", "b", "c"], [40, 30, 6], {"a": 0.5, "b": 0.3, "c": 0.2}, "train")
    order = GlobalOrder(np.array([40, 30, 6]), mix, seed=3, length=200)
    for epoch in (0, 3):
        src, idx = order.samples(epoch, np.arange(200))
        parts = [order.samples(epoch, np.arange(a, a + 8)) for a in range(0, 200, 8)]
        assert np.array_equal(src, np.concatenate([p[0] for p in parts]))
        assert np.array_equal(idx, np.concatenate([p[1] for p in parts]))
        assert (idx < np.array([40, 30, 6])[src]).all()


def test_weights_as_written_are_exact_fractions():
    mix = Mixture.from_weights(["a", "b", "c"], [1, 1, 1], {"a": 0.5, "b": 0.3, "c": 0.2}, "train")
    assert mix.as_state() == {"a": "1/2", "b": "3/10", "c": "1/5"} and mix.denominator == 10
    mix = Mixture.from_weights(["a", "b"], [1, 1], {"a": 2, "b": 1}, "train")
    assert (mix.weight(0), mix.weight(1)) == (Fraction(2, 3), Fraction(1, 3))


@pytest.mark.parametrize(("weights", "message"), [
    ({"a": 1, "b": 1, "x": 1}, r"weights name source\(s\) \['x'\] that split 'train' does not have"),
    ({"a": 1}, r"every source of split 'train' a weight \(0 leaves one out\); missing: \['b', 'c'\]"),
    ({"a": 1, "b": -0.5, "c": 1}, r"weights\['b'\]: expected a finite number >= 0, got -0.5"),
    ({"a": 1, "b": float("nan"), "c": 1}, r"weights\['b'\]: expected a finite number >= 0, got nan"),
    ({"a": 1, "b": "1", "c": 1}, r"weights\['b'\]: expected a finite number >= 0, got '1'"),
    ({"a": 0, "b": 0, "c": 0}, "sum to 0"),
    ({"a": 1, "b": 1, "c": 1}, "source 'c' has weight 1 but no samples in split 'train'"),
])
def test_bad_weights_are_refused_by_name(weights, message):
    with pytest.raises(MixtureError, match=message):
        Mixture.from_weights(["a", "b", "c"], [5, 5, 0], weights, "train")


# -- through the loader ----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    # a: 40, b: 30, c: 6 samples. With 0.5/0.3/0.2 over 80 samples an epoch, c is drawn 16 times: 2.7 passes
    return build_sets(tmp_path_factory.mktemp("shards"), {"a": [25, 15], "b": [30], "c": [6]}, seq_len=8, seed=5)


def test_loader_follows_the_weights_and_wraps_a_small_source(shards):
    weights = {"a": 0.5, "b": 0.3, "c": 0.2}
    loader = PackedLoader(LoaderConfig(str(shards.flat), global_batch_size=8, micro_batch_size=4, seed=9,
                                       weights=weights, samples_per_epoch=80, num_workers=1))
    ids = np.array(sample_ids(take(loader)) + sample_ids(take(loader)), dtype=np.int64)  # 2 epochs
    src, idx = ids >> SOURCE_SHIFT, ids & ((1 << SOURCE_SHIFT) - 1)
    for epoch in range(2):
        assert_quota_on_every_prefix(src[80 * epoch: 80 * (epoch + 1)], (5, 3, 2), 10)
    # c: 16 draws an epoch, 32 in two = passes of 6, each a permutation of all 6, each in a new order
    c = idx[src == 2]
    passes = [c[i: i + 6].tolist() for i in range(0, 30, 6)]
    assert all(sorted(p) == list(range(6)) for p in passes)
    assert len({tuple(p) for p in passes}) == len(passes)
    # b: 24 draws an epoch out of 30: epoch 1 finishes pass 0 (6 unseen samples) before any repeat
    b = idx[src == 1]
    assert sorted(b[:30].tolist()) == list(range(30)) and len(set(b[24:30]) & set(b[:24])) == 0


def test_default_weights_visit_every_sample_once_per_epoch(tmp_path):
    shards = build_sets(tmp_path, {"a": [21, 11], "b": [16]}, seq_len=8, seed=6)  # 48 samples = 6 steps of 8
    loader = PackedLoader(LoaderConfig(str(shards.flat), global_batch_size=8, micro_batch_size=2))
    assert loader.mixture.as_state() == {"a": "2/3", "b": "1/3"}
    first, second = sample_ids(take(loader)), sample_ids(take(loader))
    assert sorted(first) == sorted(second) == sorted(shards.samples)
    assert first != second  # a new permutation of every source each epoch


def test_a_zero_weight_leaves_a_source_out(shards):
    loader = PackedLoader(LoaderConfig(str(shards.flat), global_batch_size=8, weights={"a": 1, "b": 0, "c": 1}))
    ids = np.array(sample_ids(take(loader)))
    assert loader.samples_per_epoch == 46  # a and c only
    assert set((ids >> SOURCE_SHIFT).tolist()) == {0, 2}
