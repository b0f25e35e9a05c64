"""LSH shape and index, union-find clusters, exact hashing, settings validation."""

import numpy as np
import pyarrow as pa
import pytest
from pydantic import ValidationError

from platform_assets.dedup.clusters import UnionFind, cluster_size_histogram, removed_per_source
from platform_assets.dedup.exact import first_of_each_hash, normalized_utf8, text_hashes
from platform_assets.dedup.keep_policy import priority_order
from platform_assets.dedup.lsh_index import LshIndex, collision_probability, optimal_shape
from platform_assets.dedup.minhash import MinHasher
from platform_assets.dedup.settings import DedupSettings, ExactSettings, NearSettings


def test_default_lsh_shape_favours_recall_at_the_threshold():
    s = NearSettings()
    bands, rows = optimal_shape(s.effective_lsh_threshold(), s.num_perm, s.lsh_weights)
    assert bands * rows <= s.num_perm
    assert collision_probability(0.8, bands, rows) > 0.98
    assert collision_probability(0.4, bands, rows) < 0.05
    # tuned for 0.8 itself, datasketch's shape would miss most pairs at 0.8
    b8, r8 = optimal_shape(0.8, 128)
    assert collision_probability(0.8, b8, r8) < 0.5
    assert NearSettings(verify="none").effective_lsh_threshold() == 0.8


def test_lsh_index_returns_colliding_keys_only():
    s = NearSettings(bands=16, rows=8)
    mh = MinHasher(128, 1)
    idx = LshIndex(s, mh)
    rng = np.random.default_rng(0)
    a = rng.integers(0, 2**32, 128, dtype=np.uint64).astype(np.uint32)
    b = a.copy()
    b[8:] = rng.integers(0, 2**32, 120, dtype=np.uint64).astype(np.uint32)  # shares band 0 only
    c = rng.integers(0, 2**32, 128, dtype=np.uint64).astype(np.uint32)
    idx.insert_many(["a", "c"], np.stack([a, c]))
    assert idx.query(b) == ["a"] and idx.size == 2
    idx.insert("b", b)
    assert sorted(idx.query(a)) == ["a", "b"]


def test_union_find_root_is_best_priority_member():
    uf = UnionFind(np.array([5, 3, 9, 0, 7]))
    uf.union(0, 1)
    uf.union(2, 0)
    assert uf.find(2) == 1
    uf.union(4, 3)
    uf.union(4, 2)
    assert uf.roots().tolist() == [3, 3, 3, 3, 3]


def test_union_find_long_chains_stay_cheap():
    n = 200_000
    uf = UnionFind(np.arange(n))
    uf.union_many(np.arange(1, n), np.arange(0, n - 1))
    assert (uf.roots() == 0).all()


def test_cluster_histogram_and_per_source():
    dups = pa.table({"cluster_id": ["a", "a", "b"], "removed_id": ["x", "y", "z"]})
    assert cluster_size_histogram(dups).to_pylist() == [
        {"cluster_size": 2, "clusters": 1},
        {"cluster_size": 3, "clusters": 1},
    ]
    decisions = pa.table(
        {"source": ["s1", "s1", "s2", "s2"], "rule": [None, "exact_duplicate", "near_duplicate", None]}
    )
    rows = {r["source"]: r for r in removed_per_source(decisions).to_pylist()}
    assert rows["s1"] == {
        "source": "s1",
        "documents": 2,
        "removed_exact": 1,
        "removed_near": 0,
        "removed": 1,
        "removal_rate": 0.5,
    }
    assert rows["s2"]["removed_near"] == 1


def test_exact_normalisation_and_grouping():
    texts = ["Hello  World", "hello world", "\u00a0hello\tworld\n", "hello worlds", "", "e\u0301", "\u00e9"]
    buf, spans = normalized_utf8(texts, ExactSettings())
    assert [buf[a:b].decode() for a, b in spans] == ["hello world"] * 3 + ["hello worlds", "", "é", "é"]
    h = text_hashes(texts, ExactSettings())
    assert h.type == pa.binary(16) and len(set(h.to_pylist())) == 4
    strict = text_hashes(
        texts, ExactSettings(lowercase=False, collapse_whitespace=False, unicode_form="none")
    )
    assert len(set(strict.to_pylist())) == 7
    rank = np.array([4, 2, 0, 1, 3, 5, 6])
    assert first_of_each_hash(h, rank).tolist() == [0, 0, 0, 1, 3, 5, 5]


def test_priority_order_nulls_last_and_ties_by_id():
    values = pa.array([None, 2.0, 1.0, 2.0], pa.float64())
    ids = pa.array(["a", "d", "b", "c"])
    sources = pa.array(["s"] * 4)
    assert priority_order(values, ids, sources, "oldest").tolist() == [2, 3, 1, 0]
    assert priority_order(values, ids, sources, "highest_quality").tolist() == [3, 1, 2, 0]


def test_settings_are_strict():
    with pytest.raises(ValidationError):
        DedupSettings.model_validate({"near": {"treshold": 0.8}})
    with pytest.raises(ValidationError, match="both"):
        NearSettings(bands=10)
    with pytest.raises(ValidationError, match="exceeds"):
        NearSettings(bands=20, rows=10)
    s = DedupSettings.model_validate(
        {"keep": "longest", "near": {"threshold": 0.7, "shingles": {"unit": "char", "size": 7}}}
    )
    assert s.near.shingles.size == 7 and s.near.effective_lsh_threshold() == pytest.approx(0.5)


def test_redis_storage_config_reaches_datasketch(monkeypatch):
    import platform_assets.dedup.lsh_index as lsh_index

    seen = {}
    expected_shape = optimal_shape(0.6, 128, (0.5, 0.5))

    class FakeLSH:
        def __init__(self, **kwargs):
            seen.update(kwargs)

    monkeypatch.setattr(lsh_index, "MinHashLSH", FakeLSH)
    s = NearSettings.model_validate(
        {"storage": {"type": "redis", "redis": {"host": "cache", "port": 6380}, "basename": "corpus-v1"}}
    )
    lsh_index.LshIndex(s, MinHasher(128, 1))
    assert seen["storage_config"] == {
        "type": "redis",
        "redis": {"host": "cache", "port": 6380},
        "basename": b"corpus-v1",
    }
    assert seen["params"] == expected_shape


def test_oldest_policy_ranks_sub_second_timestamps_of_any_unit():
    import pyarrow as pa

    from platform_assets.dedup.keep_policy import priority_values

    for unit in ("s", "ms", "us", "ns"):
        ts = pa.array([1_700_000_000_500, 1_700_000_000_001], pa.int64()).cast(pa.timestamp("ms", tz="UTC"))
        batch = pa.table({"ingested_at": ts.cast(pa.timestamp(unit, tz="UTC"), safe=False)})
        values = priority_values(batch, "oldest").to_pylist()
        if unit == "s":
            assert values[0] == values[1]  # the unit itself drops the milliseconds
        else:
            assert values[1] < values[0]  # 1 ms after the second beats 500 ms after it
    dates = pa.table({"ingested_at": pa.array([19_000, 18_000], pa.date32())})
    assert priority_values(dates, "oldest").to_pylist() == [19_000 * 86_400e6, 18_000 * 86_400e6]
