"""Smoke test of the benchmark harness: `python -m benchmarks run ingest_jsonl` end to end on a tiny
corpus written here (two files; `lang` is null in one and a string in the other, as in the real
corpus), plus the loud failure when the two sides disagree on rows."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent


def _write_corpus(root: Path) -> int:
    root.mkdir()
    n = 0
    for part, lang in ((0, None), (1, "en")):
        with open(root / f"part_{part}.jsonl", "w") as f:
            for i in range(150):
                doc = {"id": f"{part}-{i}", "lang": lang, "text": f"document {part}/{i} " * (1 + i % 9)}
                f.write(json.dumps(doc) + "\n")
                n += 1
    (root / "stats.json").write_text('{"not": "an input"}\n')  # only *.jsonl is selected, by both sides
    return n


def test_run_prints_both_figures_and_a_ratio_and_rows_match(tmp_path: Path):
    lines = _write_corpus(tmp_path / "corpus")
    out_json = tmp_path / "result.json"
    work = tmp_path / "work"
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks", "run", "ingest_jsonl", "--corpus", str(tmp_path / "corpus"),
         "--json", str(out_json), "--workdir", str(work)],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr + proc.stdout
    table = proc.stdout
    throughput = re.search(r"^\| throughput \(MB/s\) \| ([\d.,]+) \| ([\d.,]+) \| ([\d.]+)x \(ours/peer",
                           table, re.M)
    assert throughput, table
    rss = re.search(r"^\| peak RSS \(MB\) \| ([\d,]+) \| ([\d,]+) \| ([\d.]+)x \(peer/ours", table, re.M)
    assert rss and all(float(g.replace(",", "")) > 0 for g in rss.groups()), table
    assert re.search(rf"^\| rows out \| {lines} \| {lines} \| equal \|", table, re.M), table
    assert "imports and setup are excluded" in table and "machine: " in table and "datasets " in table

    result = json.loads(out_json.read_text())
    ours, peer = result["records"]["ours"][0], result["records"]["peer"][0]
    assert ours["rows_out"] == peer["rows_out"] == lines
    assert ours["quarantined"] == {} and peer["features_given"]
    assert ours["peak_rss_bytes"] > 0 and ours["seconds"] > 0 and peer["seconds"] > 0
    assert list(work.iterdir()) == []  # run directories are cleaned up


def test_list_names_the_benchmark():
    proc = subprocess.run([sys.executable, "-m", "benchmarks", "list"], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert any(line.startswith("ingest_jsonl:") for line in proc.stdout.splitlines())


def test_row_mismatch_fails_loudly():
    sys.path.insert(0, str(REPO_ROOT))
    try:
        from benchmarks.harness import BenchmarkError
        from benchmarks.ingest_jsonl import check
    finally:
        sys.path.remove(str(REPO_ROOT))
    check({"rows_out": 3}, {"rows_out": 3})
    with pytest.raises(BenchmarkError, match="rows out differ: ours 2, peer 3"):
        check({"rows_out": 2, "quarantined": {"malformed_json": 1}}, {"rows_out": 3})


def test_loading_every_benchmark_module_imports_no_platform_code():
    """The parent imports every benchmark module to list them, and a side that measures another tree
    (the cleaning baseline) must be the first to import platform_assets: a module-level import of it
    in any benchmark module breaks that side (as scaled_corpus once did)."""
    probe = ("import sys; from benchmarks.harness import load_registry; names = load_registry(); "
             "leaked = sorted(m for m in sys.modules if m.split('.')[0] in ('platform_assets', 'training')); "
             "print(len(names)); print(' '.join(leaked))")
    proc = subprocess.run([sys.executable, "-c", probe], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    count, leaked = proc.stdout.split("\n")[:2]
    assert int(count) > 10
    assert leaked == "", f"benchmark modules import platform code at load time: {leaked}"
