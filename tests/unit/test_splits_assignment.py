"""Seeded-hash splits: ratios, stability as the corpus grows, stratification."""

import numpy as np
import pyarrow as pa
import pytest
from pydantic import ValidationError

from platform_assets.splits.assignment import assign_splits, id_unit_interval, split_counts, with_splits
from platform_assets.splits.settings import SplitSettings


def _ids(n, prefix="doc"):
    return [f"{prefix}-{i}" for i in range(n)]


def test_ratios_are_met_within_binomial_noise():
    n = 20_000
    settings = SplitSettings(ratios={"train": 0.8, "validation": 0.1, "test": 0.1})
    counts = split_counts(assign_splits(pa.table({"id": _ids(n)}), settings))
    assert sum(counts.values()) == n
    for name, ratio in (("train", 0.8), ("validation", 0.1), ("test", 0.1)):
        sd = (n * ratio * (1 - ratio)) ** 0.5
        assert abs(counts[name] - n * ratio) < 4 * sd


def test_adding_documents_never_moves_existing_ones():
    settings = SplitSettings(seed=3, ratios={"train": 0.5, "validation": 0.25, "test": 0.25})
    small = pa.table({"id": _ids(1000)})
    grown = pa.table({"id": _ids(5000, "new") + _ids(1000)[::-1]})  # more docs, other order
    before = dict(zip(small["id"].to_pylist(), assign_splits(small, settings).to_pylist(), strict=True))
    after = dict(zip(grown["id"].to_pylist(), assign_splits(grown, settings).to_pylist(), strict=True))
    assert all(after[i] == s for i, s in before.items())


def test_seed_reshuffles():
    ids = pa.table({"id": _ids(2000)})
    a = assign_splits(ids, SplitSettings(seed=1, ratios={"train": 0.5, "validation": 0.5, "test": 0.0}))
    b = assign_splits(ids, SplitSettings(seed=2, ratios={"train": 0.5, "validation": 0.5, "test": 0.0}))
    assert 0.4 < np.mean(np.array(a.to_pylist()) != np.array(b.to_pylist())) < 0.6
    u = id_unit_interval(ids["id"], 1)
    assert u.min() >= 0 and u.max() < 1 and abs(u.mean() - 0.5) < 0.02


def test_stratified_shares_hold_in_every_stratum():
    n_per = {"en": 1000, "de": 203, "sw": 37}
    ids, lang = [], []
    for k, n in n_per.items():
        ids += _ids(n, k)
        lang += [k] * n
    table = pa.table({"id": ids, "lang": lang})
    settings = SplitSettings(stratify_by="lang", ratios={"train": 0.9, "validation": 0.05, "test": 0.05})
    splits = np.array(assign_splits(table, settings).to_pylist())
    for k, n in n_per.items():
        mine = splits[np.array(lang) == k]
        for name, r in (("train", 0.9), ("validation", 0.05), ("test", 0.05)):
            assert abs((mine == name).sum() - r * n) <= 1, (k, name)
    # the 37-document language gets its 2 validation documents; unstratified it gets 0..5 by luck
    assert (splits[np.array(lang) == "sw"] == "validation").sum() == 2


def test_stratified_is_stable_given_the_prior_assignment_and_input_order_free():
    settings = SplitSettings(stratify_by="source", ratios={"train": 0.8, "validation": 0.1, "test": 0.1})
    first = pa.table({"id": _ids(300), "source": ["a", "b", "c"] * 100})
    first = with_splits(first, settings)
    grown = pa.table({"id": _ids(300) + _ids(200, "new"), "source": ["a", "b", "c"] * 100 + ["a", "b"] * 100})
    grown_splits = assign_splits(grown, settings, prior=first.select(["id", "split"]))
    assert grown_splits.to_pylist()[:300] == first["split"].to_pylist()
    shuffled = grown.take(pa.array(np.random.default_rng(0).permutation(500)))
    again = assign_splits(shuffled, settings, prior=first.select(["id", "split"]))
    assert dict(zip(shuffled["id"].to_pylist(), again.to_pylist(), strict=True)) == dict(
        zip(grown["id"].to_pylist(), grown_splits.to_pylist(), strict=True)
    )
    # and the grown strata still meet the ratios within one document
    sp = np.array(grown_splits.to_pylist())
    src = np.array(grown["source"].to_pylist())
    for s in "abc":
        n = (src == s).sum()
        assert abs((sp[src == s] == "validation").sum() - 0.1 * n) <= 1


def test_with_splits_replaces_column_and_ratios_are_validated():
    t = with_splits(pa.table({"id": _ids(10), "split": ["x"] * 10}), SplitSettings())
    assert t.column_names == ["id", "split"] and set(t["split"].to_pylist()) <= {
        "train",
        "validation",
        "test",
    }
    with pytest.raises(ValidationError, match="sum to 1"):
        SplitSettings(ratios={"train": 0.9, "validation": 0.2, "test": 0.0})
    with pytest.raises(ValidationError):
        SplitSettings.model_validate({"ratio": {}})
