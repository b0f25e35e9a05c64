"""Smoke tests of the dedup benchmarks (benchmarks/minhash_signatures.py, dedup_quality.py,
dedup_scaling.py): each runs both sides through the harness (fresh child processes) on a tiny
generated input and must produce its figures; the real-data runs are in benchmarks/RESULTS.md."""

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

from benchmarks import dedup_quality, dedup_scaling, minhash_signatures  # noqa: E402
from benchmarks.harness import BenchmarkError  # noqa: E402

WORDS = [f"w{i}" for i in range(400)] + ["Straße", "naïve", "日本語", "ΣΟΦΙΑ", "don't", "x_y"]


def _doc(rng: random.Random, n_words: int) -> str:
    lines, line = [], []
    for _ in range(n_words):
        line.append(rng.choice(WORDS))
        if len(line) == 12:
            lines.append(" ".join(line) + ".")
            line = []
    return "\n".join(lines + [" ".join(line)])


def _near_copy(rng: random.Random, text: str, edits: int) -> str:
    words = text.split(" ")
    for _ in range(edits):
        words[rng.randrange(len(words))] = rng.choice(WORDS)
    return " ".join(words)


def _texts(n: int, n_words: int, seed: int) -> list[str]:
    """n documents: originals, a near copy (few edits) of every third, an exact copy of every tenth."""
    rng = random.Random(seed)
    out: list[str] = []
    while len(out) < n:
        base = _doc(rng, n_words)
        out.append(base)
        if len(out) % 3 == 0:
            out.append(_near_copy(rng, base, 2))
        if len(out) % 10 == 0:
            out.append(base)
    return out[:n]


def _write_jsonl(path: Path, prefix: str, texts: list[str], source: str) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for i, t in enumerate(texts):
            f.write(json.dumps({"id": f"{prefix}-{i}", "kind": prefix, "source": source, "path": f"/x/{i}",
                                "lang": None, "text": t}) + "\n")




@pytest.fixture(scope="module")
def text_corpus(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("corpus")
    _write_jsonl(root / "text_000.jsonl", "text", _texts(90, 700, 1), "generated")  # ~4-5 KB each
    _write_jsonl(root / "code_000.jsonl", "code", _texts(60, 300, 2), "generated-code")
    return root


def test_minhash_signatures_both_peers(text_corpus: Path, tmp_path: Path, monkeypatch):
    monkeypatch.setenv("MINHASH_BENCH_DOCS", "120")
    for name in ("minhash_signatures_datasketch", "minhash_signatures_rensa"):
        pytest.importorskip(name.rsplit("_", 1)[1])
        result = _run(name, text_corpus, tmp_path / name)
        fig = _figures(result)
        assert result["spec"]["docs"] == 120 and result["spec"]["input_bytes"] / 120 > 1000
        for metric in ("docs/s per core, text -> signature", "docs/s per core, signatures only", "peak RSS"):
            assert fig[metric]["ours"] > 0 and fig[metric]["peer"] > 0, (name, metric)
        assert fig["docs"]["ours"] == fig["docs"]["peer"] == 120
        ours, peer = result["records"]["ours"][0], result["records"]["peer"][0]
        assert ours["distinct_shingles"] == peer["distinct_shingles"]  # the same shingling
        assert ours["cpu_seconds"] / ours["seconds"] < 1.5  # one core
        assert [t["metric"] for t in result["targets"]] == ["docs/s per core, text -> signature"]


def test_chunks_are_about_2kb_and_cut_on_whitespace():
    text = ("alpha beta gamma delta " * 400).encode()  # 9,200 bytes
    pieces = list(minhash_signatures._cut(text))
    assert all(1000 <= len(p) <= 2200 for p in pieces) and b"".join(pieces) == text
    assert all(p[:1] == b" " for p in pieces[1:])  # every cut is at a space (which starts the next piece)
    assert list(minhash_signatures._cut(b"short")) == []
    multibyte = "日本語" * 1000  # no whitespace: cut on a character boundary
    assert "".join(p.decode() for p in minhash_signatures._cut(multibyte.encode())) == multibyte


def test_minhash_check_refuses_different_shingling():
    ok = {"docs": 5, "num_perm": 128, "distinct_shingles": 100_000}
    minhash_signatures.check(ok, dict(ok))
    with pytest.raises(BenchmarkError, match="not the same shingling"):
        minhash_signatures.check(ok, {**ok, "distinct_shingles": 99_000})
    with pytest.raises(BenchmarkError, match="documents x slots differ"):
        minhash_signatures.check(ok, {**ok, "docs": 4})


needs_truth = pytest.mark.skipif(not dedup_quality.TRUTH_SCRIPT.is_file(),
                                 reason=f"ground-truth script {dedup_quality.TRUTH_SCRIPT} not present")


@needs_truth
def test_dedup_quality_text(text_corpus: Path, tmp_path: Path, monkeypatch):
    monkeypatch.setenv("DEDUP_QUALITY_SOURCES", "all")
    result = _run("dedup_quality_text", text_corpus, tmp_path / "work")
    fig = _figures(result)
    assert len(result["spec"]["docs"]) == 90
    for t in dedup_quality.THRESHOLDS:
        assert fig[f"truth pairs @{t}"]["ours"] > 0
        for m in ("precision", "recall", "recall, resolved", "cluster precision"):
            assert 0.0 <= fig[f"{m} @{t}"]["peer"] <= 1.0
        # planted copies (2 of ~120 words edited: J ~ 0.9, or exact) are all found, nothing else is
        assert fig[f"precision @{t}"]["ours"] == 1.0 and fig[f"recall @{t}"]["ours"] == 1.0
        assert fig[f"F1 @{t}"]["ours"] == 1.0 and 0.0 <= fig[f"F1 @{t}"]["peer"] <= 1.0
        # SimHash beside it, on the same truth: 2 edits of ~700 words move ~3.4 of 64 bits, so at
        # max_distance 3 it finds some near copies (and every exact one), never a false pair
        for label in ("SimHash", "SimHash, unverified"):
            assert fig[f"{label} precision @{t}"]["ours"] == 1.0
            assert 0.0 < fig[f"{label} recall @{t}"]["ours"] <= 1.0
            f1 = fig[f"{label} F1 @{t}"]["ours"]
            recall = fig[f"{label} recall @{t}"]["ours"]
            assert abs(f1 - 2 * recall / (1 + recall)) < 1e-9
            assert fig[f"{label} documents removed @{t}"]["ours"] >= 9  # the exact copies at least
            assert fig[f"{label} precision @{t}"]["peer"] != fig[f"{label} precision @{t}"]["peer"]  # nan
    for label in ("SimHash", "SimHash, unverified"):
        assert fig[f"{label} wall time"]["ours"] > 0
    ours = result["records"]["ours"][0]
    assert ours["simhash_max_distance"] == 3 and 0 < ours["minhash_seconds"] < ours["seconds"]
    assert fig["wall time"]["ours"] == ours["minhash_seconds"]
    assert {t["metric"] for t in result["targets"]} == {"precision @0.8", "recall @0.8", "precision @0.5",
                                                        "recall @0.5"}


@needs_truth
def test_dedup_quality_python_versions(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("DEDUP_QUALITY_PY_VERSIONS", "2")
    rng = random.Random(3)
    modules = {f"mod{i}": _doc(rng, 250) for i in range(6)}
    versions = tmp_path / "versions"
    for v, minor in (("3.11.1", 11), ("3.12.0", 12), ("3.13.2", 13)):
        lib = versions / v / "lib" / f"python3.{minor}"
        (lib / "test").mkdir(parents=True)
        for name, text in modules.items():
            (lib / f"{name}.py").write_text(_near_copy(rng, text, 1) if minor == 13 else text)
        (lib / "test" / "test_x.py").write_text("not selected at top level")
    result = _run("dedup_quality_py", versions, tmp_path / "work")
    spec, fig = result["spec"], _figures(result)
    assert [Path(p).parent.parent.name for p in spec["libraries"]] == ["3.12.0", "3.13.2"]  # newest two
    assert len(spec["docs"]) == 12 and fig["truth pairs @0.8"]["ours"] == 6
    assert fig["precision @0.8"]["ours"] == 1.0 and fig["recall @0.8"]["ours"] == 1.0
    assert fig["documents removed @0.8"]["ours"] == 6
    assert fig["SimHash precision @0.8"]["ours"] == 1.0  # verified: any pair it reports is a truth pair


def test_quality_scores(tmp_path: Path):
    pairs_file = tmp_path / "pairs.jsonl"
    rows = [(0, 1, 9), (1, 2, 9), (0, 2, 9), (3, 4, 9), (2, 4, 6)]  # inter out of union 10
    pairs_file.write_text("".join(json.dumps({"a": a, "b": b, "inter": i, "union": 10}) + "\n"
                                  for a, b, i in rows))
    spec = {"truth_pairs_file": str(pairs_file)}
    # 1 and 2 removed for 0, 4 kept: 3~4 missed (both kept); one false link 2->... none
    s = dedup_quality.score(spec, 0.8, [(1, 0), (2, 0)], [0, 0, 0, 3, 4])
    assert s["truth_pairs"] == 4 and s["precision"] == 1.0 and s["recall"] == 0.75
    assert s["truth_pairs_both_kept"] == 1 and s["recall_resolved"] == 0.75 and s["cluster_precision"] == 1.0
    # 4 removed for 2 (J = 0.6: a false link at 0.8, a true one at 0.5); 3 removed for 4's cluster
    s = dedup_quality.score(spec, 0.8, [(1, 0), (2, 0), (4, 2), (3, 2)], [0, 0, 0, 0, 0])
    assert s["links"] == 4 and s["true_links"] == 2 and s["precision"] == 0.5
    assert s["recall"] == 1.0 and s["cluster_pairs"] == 10 and s["cluster_precision"] == 0.4
    s = dedup_quality.score(spec, 0.5, [(1, 0), (2, 0), (4, 2)], [0, 0, 0, 3, 0])
    assert s["truth_pairs"] == 5 and s["precision"] == 1.0
    assert s["recall"] == 0.8 and s["recall_resolved"] == 1.0


def test_dedup_scaling_sizes_and_table(text_corpus: Path, tmp_path: Path, capsys):
    assert dedup_scaling.main(["--corpus", str(text_corpus), "--sizes", "25,100", "--workdir",
                               str(tmp_path / "work"), "--json", str(tmp_path / "out.json")]) == 0
    out = capsys.readouterr().out
    results = json.loads((tmp_path / "out.json").read_text())
    small, full = results["25"], results["100"]
    assert full["spec"]["docs"] == 150 and 10 < small["spec"]["docs"] < 75  # crc32 mod 4: about a quarter
    for res in (small, full):
        fig = _figures(res)
        assert fig["docs in"]["ours"] == fig["docs in"]["peer"] == res["spec"]["docs"]
        assert fig["docs/s"]["ours"] > 0 and fig["docs/s"]["peer"] > 0 and fig["peak RSS"]["ours"] > 0
    full_fig = _figures(full)
    assert full_fig["docs out"]["ours"] < 150 and full_fig["docs out"]["peer"] < 150  # planted copies removed
    assert "| 25% |" in out and "| 100% |" in out and "ours: time 100% / 25% = " in out
    assert "peak RSS at 100%" in out
    assert all(dedup_scaling.selected(f"text-{i}", 100) for i in range(50))
    quarter = {i for i in range(400) if dedup_scaling.selected(f"d{i}", 25)}
    half = {i for i in range(400) if dedup_scaling.selected(f"d{i}", 50)}
    assert quarter < half and 60 < len(quarter) < 140  # nested sizes
