"""benchmarks/pipeline_end_to_end_steady.py: the steady-state figures from two sizes' results, and its
command line. The two sizes' runs themselves are pipeline_end_to_end's (its tests run both sides)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from benchmarks import pipeline_end_to_end_steady as steady  # noqa: E402
from benchmarks.harness import MB, BenchmarkError  # noqa: E402


def _result(mb: float, ours: list[float], peer: list[float]) -> dict[str, Any]:
    """A run_benchmark result as steady_state reads it: the input size and each round's CPU per side."""
    return {"spec": {"input_bytes": int(mb * MB)},
            "records": {"ours": [{"cpu_seconds": c} for c in ours], "peer": [{"cpu_seconds": c} for c in peer]}}


def test_rates_fixed_costs_and_ratio_from_two_sizes():
    # ours: ~20 CPU-s fixed + ~0.1 per MB; the peer: 3 per MB, nothing fixed (medians of the rounds)
    summary = steady.steady_state([_result(32, [23.2, 23.3, 40.0], [96.0]),
                                   _result(128, [32.8], [380.0, 384.0, 390.0])])
    ours, peer = summary["sides"]["ours"], summary["sides"]["peer"]
    assert ours["cpu_seconds"] == [pytest.approx(23.3), pytest.approx(32.8)]
    assert ours["cpu_seconds_per_mb"] == pytest.approx(9.5 / 96)
    assert ours["mb_per_cpu_second"] == pytest.approx(96 / 9.5)
    assert ours["fixed_cpu_seconds"] == pytest.approx(23.3 - 32 * 9.5 / 96)
    assert peer["cpu_seconds_per_mb"] == pytest.approx(3.0)
    assert peer["fixed_cpu_seconds"] == pytest.approx(0.0, abs=1e-9)
    assert summary["steady_state_ratio"] == pytest.approx((96 / 9.5) / (1 / 3.0))
    assert summary["met"] is True  # 30.3x
    # the whole-run figures charge ours' fixed cost: far below the steady state at either size
    assert summary["whole_run_ratio"] == [pytest.approx((32 / 23.3) / (32 / 96)),
                                          pytest.approx((128 / 32.8) / (128 / 384))]
    assert summary["whole_run_ratio"][0] < summary["whole_run_ratio"][1] < summary["steady_state_ratio"]


def test_not_met_below_the_target():
    summary = steady.steady_state([_result(32, [30.0], [64.0]), _result(128, [50.0], [256.0])])
    assert summary["steady_state_ratio"] == pytest.approx((96 / 20) / (96 / 192))  # 9.6x
    assert summary["met"] is False
    assert "[NOT MET] 9.60x" in steady.render(summary)


def test_render_names_both_sizes_and_the_verdict():
    text = steady.render(steady.steady_state([_result(32, [23.3], [96.0]), _result(128, [32.8], [384.0])]))
    assert "CPU-s at 32.0 MB" in text and "CPU-s at 128.0 MB" in text
    assert "**steady state, MB per CPU-s**" in text
    assert "[MET] 30.32x" in text


@pytest.mark.parametrize("results, message", [
    ([_result(32, [1.0], [1.0])], "two sizes"),
    ([_result(128, [30.0], [300.0]), _result(32, [20.0], [100.0])], "must increase"),
    ([_result(32, [30.0], [100.0]), _result(128, [29.0], [300.0])], "ours: .* no rate"),
    ([_result(32, [20.0], [100.0]), _result(128, [30.0], [100.0])], "peer: .* no rate"),
])
def test_figures_that_give_no_rate_are_refused(results, message):
    with pytest.raises(BenchmarkError, match=message):
        steady.steady_state(results)


@pytest.mark.parametrize("sizes", ["32", "32,32", "0,128", "32,64,128", "a,b"])
def test_command_line_needs_two_different_positive_sizes(sizes, tmp_path: Path, capsys):
    with pytest.raises(SystemExit) as exc:
        steady.main(["--corpus", str(tmp_path), "--sizes", sizes])
    assert exc.value.code == 2
    assert "--sizes" in capsys.readouterr().err


def test_command_line_runs_the_benchmark_once_per_size_and_restores_the_size(tmp_path: Path, monkeypatch, capsys):
    """main() runs pipeline_end_to_end at each size, smaller first, with E2E_BENCH_MB set for that
    size's prepare, puts the variable back as it was, and writes both results and the summary."""
    seen: list[str] = []
    figures = {"32": _result(32, [23.3], [96.0]), "128": _result(128, [32.8], [384.0])}

    def fake_run(bench, corpus, repeat, work_root, progress=None):
        assert bench.name == "pipeline_end_to_end" and repeat == 2
        seen.append(steady.os.environ[steady.SIZE_ENV])
        return {**figures[seen[-1]], "load": {"before": 0.0}, "machine": {"cores": 2}}

    monkeypatch.setattr(steady, "run_benchmark", fake_run)
    monkeypatch.setenv(steady.SIZE_ENV, "7")
    out = tmp_path / "steady.json"
    assert steady.main(["--corpus", str(tmp_path), "--sizes", "128,32", "--repeat", "2", "--json", str(out)]) == 0
    assert seen == ["32", "128"]
    assert steady.os.environ[steady.SIZE_ENV] == "7"
    assert "[MET] 30.32x" in capsys.readouterr().out
    written = json.loads(out.read_text())
    assert written["sizes_mb"] == [32.0, 128.0] and written["summary"]["met"] is True
    assert len(written["results"]) == 2
