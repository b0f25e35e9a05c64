"""The leak check passes on a clean split and fails on planted exact and near-duplicate leaks."""

import random

import pyarrow as pa
import pytest

from platform_assets.dedup.settings import ExactSettings, NearSettings
from platform_assets.splits.leakage import LeakageChecker, check_leakage
from platform_assets.splits.settings import LeakCheckSettings

VOCAB = [f"tok{i}" for i in range(3000)]


def _doc(rng):
    return " ".join(rng.choice(VOCAB) for _ in range(250))


def _edit(rng, text, n):
    w = text.split(" ")
    for _ in range(n):
        w[rng.randrange(len(w))] = "changed"
    return " ".join(w)


@pytest.fixture(scope="module")
def clean():
    rng = random.Random(0)
    texts = [_doc(rng) for _ in range(60)]
    splits = ["train"] * 50 + ["validation"] * 5 + ["test"] * 5
    return texts, splits


def _table(texts, splits):
    return pa.table(
        {
            "id": [f"d{i}" for i in range(len(texts))],
            "text": pa.array(texts, pa.large_string()),
            "split": splits,
        }
    )


@pytest.mark.parametrize("verify", ["exact", "estimated"])
def test_clean_split_passes(clean, verify):
    texts, splits = clean
    near_dup_inside_train = [_edit(random.Random(1), texts[0], 2)]  # duplicates within train are fine
    report = check_leakage(
        _table(texts + near_dup_inside_train, splits + ["train"]),
        NearSettings(verify=verify),
        ExactSettings(),
    )
    assert report.ok, report.summary()
    assert report.counts["documents"] == 61


def test_planted_exact_leak_fails(clean):
    texts, splits = clean
    leaked = texts + ["  " + texts[3].upper(), texts[52]]  # a train doc in test; a validation doc in test
    report = check_leakage(_table(leaked, splits + ["test", "test"]), NearSettings(), ExactSettings())
    assert not report.ok
    pairs = {(r["id"], r["split"], r["other_id"], r["other_split"]) for r in report.exact_pairs.to_pylist()}
    assert pairs == {("d3", "train", "d60", "test"), ("d52", "validation", "d61", "test")}
    assert report.counts["exact_leaking_groups"] == 2
    near = {(r["train_id"], r["other_id"]) for r in report.near_pairs.to_pylist()}
    assert near == {("d3", "d60")}  # an exact copy is also a near duplicate of train


def test_planted_near_leak_fails_and_names_the_pair(clean):
    texts, splits = clean
    rng = random.Random(2)
    leaked = texts + [_edit(rng, texts[7], 3), _doc(rng)]  # J ~ 0.89 to d7; and a fresh doc
    report = check_leakage(
        _table(leaked, splits + ["validation", "validation"]), NearSettings(), ExactSettings()
    )
    assert not report.ok and report.exact_pairs.num_rows == 0
    rows = report.near_pairs.to_pylist()
    assert [(r["train_id"], r["other_id"], r["other_split"]) for r in rows] == [("d7", "d60", "validation")]
    assert rows[0]["similarity"] >= 0.8
    assert report.counts["near_leaking_documents"] == 1
    assert "near-duplicates of train" in report.summary()


def test_below_threshold_overlap_is_not_a_leak(clean):
    texts, splits = clean
    half = " ".join(texts[9].split(" ")[:125]) + " " + _doc(random.Random(3))  # J ~ 0.33
    report = check_leakage(_table(texts + [half], splits + ["test"]), NearSettings(), ExactSettings())
    assert report.ok


def test_checks_can_be_switched_off_and_bad_splits_rejected(clean):
    texts, splits = clean
    leaked = _table(texts + [texts[0]], splits + ["test"])
    assert check_leakage(
        leaked, NearSettings(), ExactSettings(), LeakCheckSettings(exact=False, near=False)
    ).ok
    checker = LeakageChecker(NearSettings(), ExactSettings())
    checker.add_batch(_table(texts[:2], ["train", "dev"]))
    with pytest.raises(ValueError, match="outside"):
        checker.finish()


def test_hashes_in_two_splits_are_those_arrow_groups_with_two_distinct_splits():
    """The leaking exact keys from sorted (hash, split) rows are the groups Arrow's group-by counts
    two or more distinct splits in, on a sliced array too (its buffer starts before the slice)."""
    import numpy as np
    import pyarrow.compute as pc

    from platform_assets.splits.leakage import _hashes_in_two_splits

    rng = np.random.default_rng(11)
    pool = rng.integers(0, 256, size=(60, 16), dtype=np.uint8)
    pool[:, :8] = 0  # equal first words: the second word decides
    rows = pool[rng.integers(0, 60, size=500)]
    hashes = pa.array([r.tobytes() for r in rows], pa.binary(16)).slice(23, 400)
    splits = rng.choice(np.array([0, 0, 0, 0, 0, 1, 2], np.int8), size=400)
    got = _hashes_in_two_splits(hashes, splits)
    g = pa.table({"h": hashes, "r": splits}).group_by("h", use_threads=False).aggregate([("r", "count_distinct")])
    expected = g.filter(pc.greater(g["r_count_distinct"], 1))["h"]
    assert 0 < len(expected) < len(g)  # some groups leak, some do not
    assert sorted(got.to_pylist()) == sorted(expected.to_pylist())
