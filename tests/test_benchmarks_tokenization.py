"""Smoke test of benchmarks/tokenization.py: both sides through the harness (fresh child processes) on
a tiny generated corpus; the real-data figures are in benchmarks/RESULTS.md."""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from benchmark_runs import figures as _figures  # noqa: E402
from benchmark_runs import run as _run  # noqa: E402

from benchmarks import tokenization  # noqa: E402
from benchmarks.harness import BenchmarkError  # noqa: E402

pytestmark = pytest.mark.skipif(not tokenization.TOKENIZER_JSON.is_file(),
                                reason=f"GPT-2 tokenizer.json not at {tokenization.TOKENIZER_JSON}")
WORDS = ["the", "token", "Straße", "日本語", "def", "return", "(x)", "<|endoftext|>", "naïve", "\n", "    "]


def _write(path: Path, n: int, seed: int) -> None:
    rng = random.Random(seed)
    with open(path, "w", encoding="utf-8") as f:
        for i in range(n):
            text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(50, 400)))
            f.write(json.dumps({"id": f"{path.stem}-{i}", "text": text}) + "\n")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("corpus")
    _write(root / "text_000.jsonl", 120, 1)
    _write(root / "code_000.jsonl", 80, 2)
    return root


def test_tokenization_benchmark_runs_both_sides(corpus: Path, tmp_path: Path, monkeypatch):
    monkeypatch.setenv("TOKENIZE_BENCH_MB", "0.1")  # every 2nd or 3rd line of ~250 KB
    result = _run("tokenization", corpus, tmp_path / "work")
    spec, fig = result["spec"], _figures(result)
    assert spec["lines"] == 200 and spec["docs"] == len(range(0, 200, spec["stride"])) and spec["stride"] > 1
    assert set(spec["bytes_per_kind"]) == {"text", "code"}
    for metric in ("tokens/s", "throughput", "peak RSS", "CPU time"):
        assert fig[metric]["ours"] > 0 and fig[metric]["peer"] > 0, metric
    # the same tokens, "<|endoftext|>" in the text included (as text on both sides)
    assert fig["tokens (EOS excluded)"]["ours"] == fig["tokens (EOS excluded)"]["peer"] > spec["docs"] * 50
    ours = result["records"]["ours"][0]
    assert ours["tokens_with_eos"] == ours["tokens"] + spec["docs"]
    assert [t["metric"] for t in result["targets"]] == ["tokens/s"]


def test_check_refuses_different_outputs():
    ok = {"docs_out": 10, "tokens": 5000}
    tokenization.check(ok, dict(ok))
    with pytest.raises(BenchmarkError, match="outputs differ"):
        tokenization.check(ok, {**ok, "tokens": 4999})
