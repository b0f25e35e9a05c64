"""Smoke test of benchmarks/packing_efficiency.py: both sides through the harness (fresh child
processes) on a small generated corpus, the length cache, and the group_texts layout it reports for
the peer; the real-corpus run is in benchmarks/RESULTS.md."""

from __future__ import annotations

import json
import os
import random
import sys
from pathlib import Path

import numpy as np
import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from benchmark_runs import figures as _figures  # noqa: E402
from benchmark_runs import run as _run  # noqa: E402

from benchmarks import packing_efficiency  # noqa: E402

pytestmark = pytest.mark.skipif(not packing_efficiency.TOKENIZER.is_file(),
                                reason=f"GPT-2 tokenizer {packing_efficiency.TOKENIZER} not present")

WORDS = ["packing", "sequence", "token", "document", "the", "of", "a", "shard", "índice", "データ", "x=1;", "\n"]


def _write_corpus(root: Path) -> list[int]:
    """Two JSONL files of documents from a few words to ~4,000 tokens; returns the word counts."""
    rng = random.Random(5)
    counts = []
    for name, n_docs in (("code_000.jsonl", 40), ("text_000.jsonl", 60)):
        with open(root / name, "w", encoding="utf-8") as f:
            for i in range(n_docs):
                n = rng.choice([3, 40, 300, 900, 1500, 2600])
                counts.append(n)
                f.write(json.dumps({"id": f"{name}-{i}", "text": " ".join(rng.choice(WORDS) for _ in range(n))}) + "\n")
            f.write("\n")  # blank lines are skipped
    return counts


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("corpus")
    _write_corpus(root)
    return root


def test_packing_efficiency_both_sides(corpus: Path, tmp_path: Path, monkeypatch):
    monkeypatch.setenv("PACKING_BENCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PACKING_BENCH_SCALE_DOCS", "3000")
    result = _run("packing_efficiency", corpus, tmp_path / "work")
    spec, fig = result["spec"], _figures(result)
    assert spec["docs"] == 100 and not spec["cached"]
    lengths = np.fromfile(spec["lengths"], np.int64)
    assert lengths.size == 100 and int(lengths.sum()) == spec["tokens"] == fig["input tokens"]["ours"]
    assert fig["documents"]["ours"] == fig["documents"]["peer"] == 100
    tokens = np.fromfile(spec["tokens_file"], np.uint16)
    ends = np.cumsum(lengths)
    assert tokens.size == ends[-1] and np.all(tokens[ends - 1] == 50256)  # every document ends with EOS
    for strategy in packing_efficiency.STRATEGIES:
        for mode in ("", ", overlong=filter"):
            row = fig[f"efficiency, {strategy}{mode}"]
            assert 0 < row["ours"] <= 100 and row["peer"] == 100.0, (strategy, mode)
        assert fig[f"time on the corpus, {strategy}"]["ours"] > 0
        ours = result["records"]["ours"][0]["runs"][f"{strategy}/scaled"]
        assert ours["docs"] == 3000 and 0 < ours["efficiency"] <= 1  # 30 shuffled copies of 100 documents
    assert fig["efficiency, best_fit_decreasing"]["ours"] > fig["efficiency, none"]["ours"]
    # packing splits only documents longer than 2048 tokens; concatenate-and-chunk splits those that fit too
    n_long = int(np.count_nonzero(lengths > 2048))
    assert 0 < n_long < 100 and fig["documents split"]["ours"] == pytest.approx(n_long)
    assert fig["documents <= 2048 tokens split"]["ours"] == 0 < fig["documents <= 2048 tokens split"]["peer"]
    assert fig["documents split, overlong=filter"]["ours"] == 0 < fig["documents split, overlong=filter"]["peer"]
    assert fig["tokens lost"]["ours"] == 0 < fig["tokens lost"]["peer"] < 2048  # one batch: one remainder
    assert [t["metric"] for t in result["targets"]][:2] == ["efficiency, best_fit_decreasing",
                                                            "efficiency, best_fit_decreasing, overlong=filter"]
    assert fig["docs per CPU-second, best_fit_decreasing (ours: the >= 1M-document set)"]["ours"] > 0


def test_length_cache_is_reused_and_keyed_by_the_files(corpus: Path, tmp_path: Path, monkeypatch):
    monkeypatch.setenv("PACKING_BENCH_CACHE", str(tmp_path / "cache"))
    first = packing_efficiency.prepare(corpus, tmp_path)
    again = packing_efficiency.prepare(corpus, tmp_path)
    assert not first["cached"] and again["cached"] and again["lengths"] == first["lengths"]
    assert "read from the cache" in packing_efficiency.describe(again)
    files = packing_efficiency.corpus_files(corpus)
    key = packing_efficiency.cache_key(files, packing_efficiency.TOKENIZER)
    st = files[0].stat()
    os.utime(files[0], ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    try:
        assert packing_efficiency.cache_key(files, packing_efficiency.TOKENIZER) != key
    finally:
        os.utime(files[0], ns=(st.st_atime_ns, st.st_mtime_ns))


def test_group_texts_layout_by_hand():
    # block 10, batches of 3 documents. Batch [7, 6, 8]: 21 tokens -> blocks 0..9, 10..19, 1 dropped:
    # document 1 (tokens 7..12) straddles the two blocks although it fits in one; document 2 loses its
    # last token. Batch [25, 4]: 29 tokens -> two blocks, 9 dropped: document 3 keeps 20 of its 25 tokens
    # across both blocks, document 4 is lost entirely.
    layout = packing_efficiency.group_texts_layout(np.array([7, 6, 8, 25, 4]), 10, 3)
    assert layout["sequences"] == 4 and layout["tokens"] == 40 and layout["tokens_dropped"] == 10
    assert layout["documents_split"] == 2 and layout["documents_split_that_fit"] == 1
    assert layout["documents_cut_short"] == 3
    # run_clm's group_texts itself makes exactly those blocks
    group_texts = packing_efficiency.make_group_texts(10)
    ids = list(range(50))
    out0 = group_texts({"input_ids": [ids[0:7], ids[7:13], ids[13:21]]})
    out1 = group_texts({"input_ids": [ids[21:46], ids[46:50]]})
    assert out0["input_ids"] == [ids[0:10], ids[10:20]] and out1["input_ids"] == [ids[21:31], ids[31:41]]
    assert out0["labels"] == out0["input_ids"]
