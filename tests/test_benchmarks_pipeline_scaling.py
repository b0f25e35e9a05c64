"""Smoke test of benchmarks/pipeline_scaling.py: the whole main graph, one fresh process per asset,
on a tiny generated corpus at 1x and 2x; every stage must report positive figures, and the 2x copies
must be distinct documents (dedup keeps them). The real-corpus runs are in benchmarks/RESULTS.md."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from benchmarks import pipeline_scaling as ps  # noqa: E402
from benchmarks import scaled_corpus  # noqa: E402

# 18 stage processes (9 stages x 2 scales), each loading Dagster's definitions: ~3 minutes on 2 cores
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not ps.GPT2_TOKENIZER_JSON.is_file(),
                                 reason=f"GPT-2 tokenizer {ps.GPT2_TOKENIZER_JSON} not present")]


def write_repo_corpus(root: Path) -> None:
    """text_000.jsonl: the repository's real prose sample (150 documents, 0.7 MB); code_000.jsonl: the
    platform's own Python modules. Both as the shared corpus writes them (id, kind, text)."""
    with gzip.open(REPO_ROOT / "sample_data" / "real_docs.jsonl.gz", "rt") as f, \
            open(root / "text_000.jsonl", "w") as out:
        for i, line in enumerate(f):
            out.write(json.dumps({"id": f"text-{i}", "kind": "text", "text": json.loads(line)["text"]},
                                 ensure_ascii=False) + "\n")
    with open(root / "code_000.jsonl", "w") as out:
        paths = [p for p in sorted((REPO_ROOT / "platform_assets").rglob("*.py")) if p.read_text().strip()]
        for i, path in enumerate(paths):  # empty __init__.py files would be quarantined (over its 5% bound)
            out.write(json.dumps({"id": f"code-{i}", "kind": "code", "path": str(path.relative_to(REPO_ROOT)),
                                  "text": path.read_text()}) + "\n")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("corpus")
    write_repo_corpus(root)
    return root


def test_only_processes_alive_together_add_their_high_water_marks():
    """peak RSS (HWM) adds to the stage process's peak the other processes' high-water marks, summed
    only over those seen in the same sample: two workers one after the other are one worker's memory."""
    assert ps.most_alive_together([]) == 0
    assert ps.most_alive_together([(0, 10, 5), (0, 10, 7)]) == 12
    assert ps.most_alive_together([(0, 4, 5), (5, 9, 7)]) == 7
    assert ps.most_alive_together([(0, 5, 5), (5, 9, 7)]) == 12  # both seen in sample 5
    assert ps.most_alive_together([(0, 9, 2), (1, 2, 300), (3, 4, 300), (4, 9, 1)]) == 303


def test_perturbed_copies_are_distinct_and_deterministic():
    text = ("The configuration file holds the list of sources and the settings of every stage, and the "
            "platform reads it once per run before any stage starts. ") * 4
    one, two = scaled_corpus.perturb(text, 1), scaled_corpus.perturb(text, 2)
    assert one == scaled_corpus.perturb(text, 1) and one != text and two != text and one != two
    tokens = scaled_corpus._TOKEN_SPLIT.findall
    assert sorted(tokens(one)) == sorted(tokens(text))  # the same bag of tokens
    assert scaled_corpus.perturb("0 0 0 0 0 0 0 0 0 0 0 0", 1) != "0 0 0 0 0 0 0 0 0 0 0 0"  # too repetitive to swap


def test_pipeline_scaling_tiny(corpus: Path, tmp_path: Path):
    out = tmp_path / "result.json"
    proc = subprocess.run([sys.executable, "-m", "benchmarks.pipeline_scaling", "--corpus", str(corpus),
                           "--base-mb", "0.2", "--scales", "1,2", "--workdir", str(tmp_path / "work"),
                           "--json", str(out)], cwd=REPO_ROOT, capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads(out.read_text())
    expected = ["raw_documents[code]", "raw_documents[text]", "cleaned_documents[code]", "cleaned_documents[text]",
                "dedup_signatures[code]", "dedup_signatures[text]", "dedup_band_buckets", "deduplicated_documents",
                "dataset_splits", "tokenizer", "tokenized_documents", "packed_shards"]
    one, two = result["scales"]
    assert (one["scale"], two["scale"]) == (1, 2)
    for scale in (one, two):
        assert [r["stage"] for r in scale["stages"]] == expected
        for r in scale["stages"]:
            for key in ("wall_seconds", "work_seconds", "cpu_seconds", "peak_tree_rss_bytes",
                        "max_process_rss_bytes", "input_bytes"):
                assert r[key] > 0, (scale["scale"], r["stage"], key)
            assert r["checks"] and all(c["passed"] for c in r["checks"])
            assert r["peak_tree_rss_bytes"] >= 0.5 * r["max_process_rss_bytes"]  # sampled vs exact, same order
            # the peak sample's processes add up to it, the stage's own python among them
            members = r["peak_tree_processes"]
            assert sum(m["rss_bytes"] for m in members) == r["peak_tree_rss_bytes"]
            assert any(m["name"].startswith("python") for m in members)
            # the high-water marks: the stage process's peak is at least its own report and any sample
            # of it, and the peak adds the high-water marks of the other processes alive together to it
            stage_samples = [m["rss_bytes"] for m in members if m["pid"] == r["pid"]]
            assert stage_samples and r["stage_process_peak_bytes"] >= max(stage_samples)
            assert r["stage_process_peak_bytes"] >= r["stage_process_hwm_bytes"] > 0
            others = [(*h["samples"], h["hwm_bytes"]) for h in r["process_high_water_marks"] if h["pid"] != r["pid"]]
            assert others  # Dagster's compute-log tails at least
            assert r["peak_hwm_rss_bytes"] == r["stage_process_peak_bytes"] + ps.most_alive_together(others)
        assert f"| {expected[-1]} | {scale['scale']}x |" in proc.stdout
    assert 1.9 < two["input_bytes"] / one["input_bytes"] < 2.1
    # the copies are distinct documents: none identical, far below the near-dedup threshold, and dedup keeps
    # them (what it removes at 2x is at most twice what it removes at 1x; none is a copy of its own original)
    assert result["inputs"]["copies_identical_to_original"] == 0
    assert all(v["max"] < scaled_corpus.NEAR_THRESHOLD for v in result["jaccard"].values() if isinstance(v, dict))
    dedup = {s["scale"]: next(r for r in s["stages"] if r["stage"] == "deduplicated_documents") for s in (one, two)}
    assert dedup[2]["duplicates"]["removed_as_copy_of_own_original"] == 0
    assert dedup[2]["duplicates"]["removed"] <= 2 * dedup[1]["duplicates"]["removed"]
    assert dedup[2]["metadata"]["rows"] >= 1.8 * dedup[1]["metadata"]["rows"]
    assert [row["stage"] for row in result["summary"]] == expected
    assert set(result["verdict"]) >= {"rss_flat", "rss_under_limit", "near_linear"}
    assert not (tmp_path / "work" / "pipeline_scaling" / "runs").exists() or \
        not any((tmp_path / "work" / "pipeline_scaling" / "runs").iterdir())  # run directories are removed
