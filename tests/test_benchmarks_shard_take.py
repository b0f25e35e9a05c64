"""Smoke test of benchmarks/shard_take.py: the generated input in three formats, and each of the three
benchmarks end to end through the harness on a small input (the sides must read the same tokens); the
full-size figures are in benchmarks/RESULTS.md."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from benchmark_runs import figures as _figures  # noqa: E402
from benchmark_runs import run as _run  # noqa: E402

from benchmarks import shard_take  # noqa: E402


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    cache = tmp_path_factory.mktemp("cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SHARD_TAKE_SAMPLES", "2100")  # three shards, the last one partial
        mp.setenv("SHARD_TAKE_BATCHES", "4")
        mp.setenv("SHARD_TAKE_CACHE", str(cache))
        yield cache


def test_the_input_holds_the_same_samples_in_every_format(cache, tmp_path):
    import numpy as np
    import pyarrow.parquet as pq

    from training.data.shard_index import read_shard_index
    from training.data.shard_reader import SplitReader

    spec = shard_take.prepare(tmp_path, tmp_path)
    root = Path(spec["root"])
    assert spec["samples"] == 2100 and spec["batches"] == 4 and spec["bytes"] > 3 * 2100 * 2048 * 2
    flat = SplitReader(read_shard_index(root / "flat"), "train")
    rows = np.array([0, 1023, 1024, 2099])
    tokens = flat.read(np.zeros(4, np.int64), rows).tokens
    assert tokens.shape == (4, 2048)
    parquet = sorted((root / "parquet" / "train" / "gen").glob("*.parquet"))
    assert len(parquet) == 3
    for r, want in zip(rows.tolist(), tokens, strict=True):
        got = pq.read_table(parquet[r // 1024], columns=["input_ids"])["input_ids"][r % 1024].values.to_numpy()
        assert np.array_equal(got, want)
    assert shard_take.prepare(tmp_path, tmp_path)["root"] == spec["root"]  # the cached build is reused


@pytest.mark.parametrize("name", ["shard_take_lance", "shard_take_parquet", "shard_take_lance_reader"])
def test_benchmark_runs_and_the_sides_read_the_same_tokens(cache, tmp_path, name):
    result = _run(name, tmp_path, tmp_path / "work")  # the corpus is not read: the input is generated
    rows = _figures(result)
    assert rows["sum of the tokens read"]["ours"] == rows["sum of the tokens read"]["peer"] > 0
    assert rows["samples/s"]["ours"] > 0 and rows["samples/s"]["peer"] > 0
    assert rows["samples/s"]["ratio"] == pytest.approx(rows["samples/s"]["ours"] / rows["samples/s"]["peer"], rel=1e-3)
