"""benchmarks/pipeline_end_to_end.py through the harness, both sides, on a tiny corpus written here:
the repository's real prose sample (text) and the platform's own modules (code), ~0.2 MB, with a
byte-level BPE tokenizer trained here (no ../shared, no /work/corpus, nothing downloaded). Ours runs
through each runner: `cli` (the CLI command users run, one process) and `stages` (9 asset processes,
each loading Dagster's definitions: ~1 minute on a quiet core), hence slow.
The filter config and `check` alone: tests/test_benchmarks_pipeline_end_to_end_filters.py."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

pytest.importorskip("datatrove")
pytest.importorskip("nltk")

from test_benchmarks_pipeline_scaling import write_repo_corpus  # noqa: E402

from benchmarks import harness  # noqa: E402
from benchmarks import pipeline_end_to_end as e2e  # noqa: E402
from benchmarks import pipeline_end_to_end_ours as e2e_ours  # noqa: E402

pytestmark = pytest.mark.slow


def _write_tokenizer(corpus: Path, path: Path) -> None:
    """A GPT-2-shaped byte-level BPE (EOS <|endoftext|>), trained on the corpus: no download."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    texts = [json.loads(line)["text"] for f in sorted(corpus.glob("*.jsonl")) for line in f.open()]
    tok.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=2000, special_tokens=[e2e.EOS],
                                                       initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.save(str(path))


@pytest.mark.parametrize("runner", e2e_ours.OURS_RUNNERS)
def test_pipeline_end_to_end_tiny(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, runner: str):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    write_repo_corpus(corpus)  # the pipeline_scaling test's corpus
    _write_tokenizer(corpus, tmp_path / "tokenizer.json")
    monkeypatch.setenv("E2E_TOKENIZER", str(tmp_path / "tokenizer.json"))
    monkeypatch.setenv("E2E_BENCH_MB", "0.2")
    monkeypatch.setenv("E2E_OURS_RUNNER", runner)
    result = harness.run_benchmark(harness.get_benchmark("pipeline_end_to_end"), corpus, work_root=tmp_path / "w")
    rows = {row["metric"]: row for row in result["summary"]}
    assert 0.1 < rows["input"]["ours"] == rows["input"]["peer"] < 0.4
    for side in harness.SIDES:
        rec = result["records"][side][0]
        assert rec["cpu_seconds"] > 0 and rec["seconds"] > 0 and rec["peak_rss_bytes"] > 10 * harness.MB
        assert rec["documents_kept"] > 0 and rec["tokens_written"] > rec["documents_kept"]
        assert rows["throughput per core"][side] == pytest.approx(
            result["spec"]["input_bytes"] / harness.MB / rec["cpu_seconds"])
    throughput = rows["throughput per core"]
    assert throughput["ratio"] == pytest.approx(throughput["ours"] / throughput["peer"])
    (target,) = result["targets"]
    assert target["met"] == (throughput["ratio"] >= e2e.TARGET_RATIO)
    ours = result["records"]["ours"][0]
    assert ours["runner"] == result["spec"]["ours_runner"] == runner
    if runner == "cli":
        # one CLI process did the work: its own CPU is nearly all of the side's (the rest: Popen, wait4)
        assert ours["command"][:3] == ["-m", "platform_assets", "run"] and ours["command"][-2:] == [
            "--until", "packed_shards"]
        assert 0.9 * ours["cpu_seconds"] <= ours["cli_cpu_seconds"] <= ours["cpu_seconds"]
        assert ours["peak_rss_bytes"] >= ours["cli_max_rss_bytes"] > 10 * harness.MB
        assert 0 < ours["cli_startup_cpu_seconds"] < ours["cli_cpu_seconds"]
        assert rows["CPU in stage process start-up"]["ours"] == 0.0  # no stage processes
        assert rows["CPU in stage work"]["ours"] == ours["cpu_seconds"]
    else:
        # ours' figures come from its own stage records, not from the peer's
        assert [s["stage"].split("[")[0] for s in ours["stages"]][-1] == "packed_shards"
        assert ours["stage_work_cpu_seconds"] > 0 and ours["stage_startup_cpu_seconds"] > 0
        assert ours["stage_work_cpu_seconds"] + ours["stage_startup_cpu_seconds"] <= ours["cpu_seconds"]
        assert ours["stage_work_cpu_seconds"] == pytest.approx(sum(s["work_cpu_seconds"] for s in ours["stages"]))
    # the same filter set on both sides: check() compared the kept ids, both records carry its figures
    agreement = ours["filter_agreement"]
    assert agreement == result["records"]["peer"][0]["filter_agreement"]
    for side in harness.SIDES:
        kept = agreement["kept_after_filters"][side]
        assert kept >= agreement["kept_after_dedup"][side] == result["records"][side][0]["documents_kept"] > 0
        assert rows["documents kept after filters"][side] == kept
        assert "kept_ids_after_filters" not in result["records"][side][0]
    assert agreement["kept_by_both"] == rows["documents kept by both sides' filters"]["ours"] > 0
    assert agreement["kept_by_ours_only"] + agreement["kept_by_peer_only"] <= max(
        e2e.FILTER_DISAGREEMENT_FLOOR, e2e.FILTER_DISAGREEMENT_MAX * (agreement["kept_by_both"]
                                                                    + agreement["kept_by_ours_only"]
                                                                    + agreement["kept_by_peer_only"]))
    # the peer runs its JSONL reader over the code source too, and our C4 preset judges code like the peer's
    assert {"c4", "gopher_quality"} <= set(ours["removed_by_rule_group"])
