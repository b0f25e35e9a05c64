"""Smoke test of benchmarks/subset_lance.py on a tiny corpus: both sides stream it from their own moto S3
server at the three sizes, write the same documents to Lance, and report per-size RSS, time and counts;
the real-corpus figures are in benchmarks/RESULTS.md."""

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

from benchmarks import subset_lance  # noqa: E402

GPT2 = Path(subset_lance.GPT2_TOKENIZER_JSON)
pytestmark = [pytest.mark.s3, pytest.mark.skipif(not GPT2.is_file(), reason=f"GPT-2 tokenizer {GPT2} not present")]
pytest.importorskip("moto")


@pytest.fixture
def corpus(tmp_path) -> Path:
    rng = random.Random(0)
    root = tmp_path / "corpus"
    root.mkdir()
    for name, n in (("code_000", 60), ("text_000", 30), ("code_001", 40)):
        with open(root / f"{name}.jsonl", "w") as f:
            for i in range(n):
                source = rng.choice(["python", "c", "perl"]) if name.startswith("code") else "debian"
                f.write(json.dumps({"id": f"{name}-{i}", "kind": name[:4], "source": source, "path": f"/src/{i}",
                                    "lang": None if name.startswith("code") else "en", "sha256": "0" * 64,
                                    "text": f"def f{i}(x):\n    return x + {rng.randrange(99)}  # {name}\n"}) + "\n")
    return root


def test_both_sides_write_the_same_python_documents_at_three_sizes(corpus, tmp_path):
    result = _run("subset_lance", corpus, tmp_path / "work")
    rows = _figures(result)
    pythons = [sum(json.loads(line)["source"] == "python" for p in sorted(corpus.glob(pattern))
                   for line in p.open()) for pattern in subset_lance.PATTERNS_DEFAULT]
    assert pythons[0] < pythons[2]
    for k, want in enumerate(pythons, 1):
        assert rows[f"documents, size {k}"]["ours"] == rows[f"documents, size {k}"]["peer"] == want
        assert rows[f"tokens, size {k}"]["ours"] == rows[f"tokens, size {k}"]["peer"] > want
        assert 0 < rows[f"peak RSS, size {k}"]["ours"] < 3000
    assert rows["peak RSS largest / smallest size"]["ours"] >= 1.0
