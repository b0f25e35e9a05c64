"""Smoke test of benchmarks/remote_loader.py on a tiny corpus: the input in both formats holds the same
tokens, and the benchmark runs end to end through the harness (two moto servers, both sides, both worker
counts) within its cache budget; the real-corpus run is in benchmarks/RESULTS.md."""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import numpy as np
import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from benchmark_runs import figures as _figures  # noqa: E402
from benchmark_runs import run as _run  # noqa: E402

from benchmarks import loader_throughput as lt  # noqa: E402
from benchmarks import remote_loader as rl  # noqa: E402

pytestmark = [pytest.mark.s3, pytest.mark.skipif(not lt.TOKENIZER_DEFAULT.is_file(),
                                                 reason=f"GPT-2 tokenizer {lt.TOKENIZER_DEFAULT} not present")]
pytest.importorskip("litdata")
pytest.importorskip("moto")
WORDS = ["alpha", "beta", "gamma", "delta", "loader", "shard", "token", "remote", "the", "of", "and"]
ENV = {"REMOTE_BENCH_TOKENS": "160000", "REMOTE_BENCH_BATCHES": "3", "REMOTE_BENCH_SHARD_SAMPLES": "4",
       # ~40 samples in ~11 shards: what 2 workers may be reading at once (5 messages of 7 micro-batches of 8) is
       # about the whole set here, so the cache is all of it (the real run: 10%, benchmarks/RESULTS.md)
       "REMOTE_BENCH_CACHE_FRACTION": "1.0"}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("corpus")
    rng = random.Random(0)
    for kind, n in (("text", 500), ("code", 300)):
        with open(root / f"{kind}_000.jsonl", "w") as f:
            for i in range(n):
                f.write(json.dumps({"id": f"{kind}-{i}", "text": " ".join(rng.choice(WORDS)
                                                                          for _ in range(rng.randint(100, 500)))})
                        + "\n")
    return root


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("input")


def test_both_formats_hold_the_same_tokens(corpus, cache, tmp_path, monkeypatch):
    from litdata import StreamingDataset, TokensLoader

    from training.data.shard_index import read_flat_index

    for k, v in {**ENV, "REMOTE_BENCH_CACHE": str(cache)}.items():
        monkeypatch.setenv(k, v)
    spec = rl.prepare(corpus, tmp_path)
    index = read_flat_index(spec["flat"])
    flat = np.concatenate([np.fromfile(Path(spec["flat"]) / sh.tokens.path, dtype="<u2")
                           for s in index.sets for sh in s.shards]).reshape(-1, 2048)
    ds = StreamingDataset(spec["litdata"], item_loader=TokensLoader(block_size=2048))
    assert len(ds) == len(flat) == spec["total_samples"] and spec["shards"] >= 10
    assert all(np.array_equal(ds[i].numpy(), flat[i]) for i in range(len(flat)))
    assert spec["cache_bytes"] == int(spec["data_bytes"])


def test_benchmark_end_to_end(corpus, cache, tmp_path, monkeypatch):
    for k, v in {**ENV, "REMOTE_BENCH_CACHE": str(cache)}.items():
        monkeypatch.setenv(k, v)
    spec = rl.prepare(corpus, tmp_path / "spec")  # the build above, reused
    result = _run("remote_loader_litdata", corpus, tmp_path / "work")
    fig = _figures(result)
    for metric in ("tokens/s, 0 workers", "tokens/s, 2 workers"):
        assert fig[metric]["ours"] > 0 and fig[metric]["peer"] > 0, metric
    for metric in ("cache dir after, 0 workers", "cache dir after, 2 workers"):
        assert 0 < fig[metric]["ours"] * 2**20 <= spec["cache_bytes"], metric
    assert fig["batches timed"]["ours"] == fig["batches timed"]["peer"] == 6
