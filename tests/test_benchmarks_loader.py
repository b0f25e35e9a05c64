"""Smoke test of benchmarks/loader_throughput.py: the input build (GPT-2 tokens packed and written by
packed_shards' writer in all three formats), one benchmark end to end through the harness, and every
peer's pipeline delivering [8, 2048] int64 batches; the real-corpus runs are in benchmarks/RESULTS.md."""

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

pytestmark = pytest.mark.skipif(not lt.TOKENIZER_DEFAULT.is_file(),
                                reason=f"GPT-2 tokenizer {lt.TOKENIZER_DEFAULT} not present")
WORDS = ["alpha", "beta", "gamma", "delta", "loader", "shard", "token", "packed", "the", "of", "and"]
TOKENS = 60_000  # ~29 samples of 2048


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("corpus")
    rng = random.Random(0)
    for kind, n in (("text", 120), ("code", 80)):
        with open(root / f"{kind}_000.jsonl", "w") as f:
            for i in range(n):
                body = " ".join(rng.choice(WORDS) for _ in range(rng.randint(100, 500)))
                if kind == "code":
                    body = f"def f{i}(x):\n    return x  # {body}\n"
                f.write(json.dumps({"id": f"{kind}-{i}", "text": body}) + "\n")
    return root


@pytest.fixture(scope="module")
def built(corpus, tmp_path_factory):
    cache = tmp_path_factory.mktemp("cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LOADER_BENCH_TOKENS", str(TOKENS))
        mp.setenv("LOADER_BENCH_BATCHES", "6")
        mp.setenv("LOADER_BENCH_CACHE", str(cache))
        spec = lt.prepare(corpus, tmp_path_factory.mktemp("run"))
        yield spec, cache


def test_build_writes_the_same_samples_in_every_format(built):
    import pyarrow.parquet as pq

    from training.data.shard_index import read_flat_index

    spec, _ = built
    assert set(spec["samples"]) == {"code", "text"} and spec["tokens"] == spec["total_samples"] * 2048
    assert spec["total_samples"] >= 10 and spec["tokens"] <= TOKENS + 2 * 2048  # each source stops at its share
    index = read_flat_index(spec["flat"])
    assert [(s.source, s.samples) for s in index.split_sets("train")] == sorted(spec["samples"].items())
    assert index.seq_len == 2048 and index.token_dtype == "uint16" and not index.has_loss_mask
    flat_tokens = np.concatenate([np.fromfile(Path(spec["flat"]) / sh.tokens.path, dtype="<u2")
                                  for s in index.sets for sh in s.shards])
    parquet = np.concatenate([np.stack(pq.read_table(p)["input_ids"].to_numpy(zero_copy_only=False))
                              for p in spec["parquet"]]).reshape(-1)
    assert np.array_equal(flat_tokens, parquet)
    assert np.array_equal(flat_tokens, np.fromfile(spec["stream"], dtype="<u2"))
    assert len(spec["tars"]) == 2  # one shard per source at this size


def test_memmap_benchmark_end_to_end(corpus, built, tmp_path, monkeypatch):
    _, cache = built
    monkeypatch.setenv("LOADER_BENCH_TOKENS", str(TOKENS))
    monkeypatch.setenv("LOADER_BENCH_BATCHES", "6")
    monkeypatch.setenv("LOADER_BENCH_CACHE", str(cache))  # the build above is reused, not redone
    result = _run("loader_throughput_memmap", corpus, tmp_path / "work")
    fig = _figures(result)
    for metric in ("tokens/s, 0 workers", "tokens/s, 2 workers", "peak RSS"):
        assert fig[metric]["ours"] > 0 and fig[metric]["peer"] > 0, metric
    assert fig["batches timed"]["ours"] == fig["batches timed"]["peer"] == 12
    assert [t["metric"] for t in result["targets"]] == ["tokens/s, 0 workers", "tokens/s, 2 workers"]


@pytest.mark.parametrize("side", ["run_ours", "run_webdataset", "run_datasets", "run_memmap"])
def test_every_side_delivers_8_by_2048_int64_batches(built, tmp_path, side):
    spec, _ = built
    pytest.importorskip({"run_webdataset": "webdataset", "run_datasets": "datasets"}.get(side, "numpy"))
    out = getattr(lt, side)({**spec, "batches": 3}, tmp_path).work()  # _timed raises on another shape
    assert sorted(out["runs"]) == ["0", "2"]
    assert all(r["batches"] == 3 and r["tokens_per_s"] > 0 for r in out["runs"].values())


def test_a_corpus_too_small_for_one_batch_is_refused(tmp_path, monkeypatch):
    (tmp_path / "text_000.jsonl").write_text(json.dumps({"text": "too short"}) + "\n")
    monkeypatch.setenv("LOADER_BENCH_TOKENS", "1000")
    with pytest.raises(lt.BenchmarkError, match="only 0 samples of 2048 tokens"):
        lt.prepare(tmp_path, tmp_path / "run")
