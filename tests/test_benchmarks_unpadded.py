"""Smoke test of benchmarks/unpadded_shards.py: both sides through the harness (fresh child processes) on
a small generated corpus; the real-corpus run is in benchmarks/RESULTS.md."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from benchmark_runs import figures as _figures  # noqa: E402
from benchmark_runs import run as _run  # noqa: E402
from test_benchmarks_packing import _write_corpus  # noqa: E402

from benchmarks import packing_efficiency  # noqa: E402

pytestmark = pytest.mark.skipif(not packing_efficiency.TOKENIZER.is_file(),
                                reason=f"GPT-2 tokenizer {packing_efficiency.TOKENIZER} not present")


def test_unpadded_shards_both_sides(tmp_path: Path, monkeypatch):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    _write_corpus(corpus)
    monkeypatch.setenv("PACKING_BENCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("UNPADDED_BENCH_READ_BATCHES", "5")
    fig = _figures(_run("unpadded_shards", corpus, tmp_path / "work"))
    samples, tokens = fig["samples"]["ours"], fig["non-padding tokens"]["ours"]
    assert fig["samples"]["peer"] == samples > 100 and fig["non-padding tokens"]["peer"] == tokens
    assert fig["micro-batches read"]["ours"] == fig["micro-batches read"]["peer"] == 5
    mb = 1e6  # the harness's MB
    # padded: every sample's 2048 positions (uint16); unpadded: its tokens; both + seqlens, seqptr (+ offsets)
    assert fig["bytes on disk"]["peer"] * mb > samples * 2048 * 2
    assert tokens * 2 < fig["bytes on disk"]["ours"] * mb < samples * 2048 * 2
    filtered = fig["bytes on disk, overlong=filter"]
    assert 0 < filtered["ours"] < filtered["peer"] < fig["bytes on disk"]["peer"]  # overlong documents dropped
