"""benchmarks/pipeline_end_to_end.py through the harness, both sides, on a tiny corpus written here:
the repository's real prose sample (text) and the platform's own modules (code), ~0.2 MB, with a
byte-level BPE tokenizer trained here (no ../shared, no /work/corpus, nothing downloaded). Ours runs
through each runner: `cli` (the CLI command users run, one process), the whole benchmark through
run_benchmark, and `stages` (9 asset processes, each loading Dagster's definitions: ~25 s on a quiet
core), ours' side alone, checked against the `cli` run's peer record: the peer does not depend on
ours' runner, so running datatrove a second time would prove nothing new (it cost ~10 s).
The filter config and `check` alone: tests/test_benchmarks_pipeline_end_to_end_filters.py."""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

pytest.importorskip("datatrove")
pytest.importorskip("nltk")

from test_benchmarks_pipeline_scaling import write_repo_corpus  # noqa: E402

from benchmarks import harness, report  # noqa: E402
from benchmarks import pipeline_end_to_end as e2e  # noqa: E402
from benchmarks import pipeline_end_to_end_ours as e2e_ours  # noqa: E402

pytestmark = pytest.mark.slow

BENCH_ENV = {"E2E_BENCH_MB": "0.2"}


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


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """The pipeline_scaling test's corpus and a tokenizer trained on it (tokenizer.json beside it)."""
    root = tmp_path_factory.mktemp("e2e")
    (root / "corpus").mkdir()
    write_repo_corpus(root / "corpus")
    _write_tokenizer(root / "corpus", root / "tokenizer.json")
    return root / "corpus"


@pytest.fixture(scope="module")
def cli_run(corpus: Path, tmp_path_factory) -> tuple[dict[str, Any], dict[str, Any]]:
    """run_benchmark with the `cli` runner, and the peer's record as its child wrote it (before
    check() moved its kept ids into the figures), for the `stages` runner's check."""
    peer_records: list[dict[str, Any]] = []
    run_side = harness.run_side

    def run_side_keeping_the_peer(bench, side, *args, **kwargs):
        record = run_side(bench, side, *args, **kwargs)
        if side == "peer":
            peer_records.append(copy.deepcopy(record))
        return record

    with pytest.MonkeyPatch.context() as mp:
        for key, value in {**BENCH_ENV, "E2E_TOKENIZER": str(corpus.parent / "tokenizer.json"),
                           "E2E_OURS_RUNNER": "cli"}.items():
            mp.setenv(key, value)
        mp.setattr(harness, "run_side", run_side_keeping_the_peer)
        result = harness.run_benchmark(harness.get_benchmark("pipeline_end_to_end"), corpus,
                                       work_root=tmp_path_factory.mktemp("w"))
    (peer,) = peer_records
    return result, peer


def _assert_records_and_rows(result: dict[str, Any], runner: str) -> dict[str, dict[str, Any]]:
    """What holds for either runner: both sides' records, the summary's rows built from them, and the
    filter agreement check() wrote into both records. Returns the rows by metric."""
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
    ours = result["records"]["ours"][0]
    assert ours["runner"] == result["spec"]["ours_runner"] == runner
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
    return rows


def test_pipeline_end_to_end_tiny_cli(cli_run):
    result, _ = cli_run
    rows = _assert_records_and_rows(result, "cli")
    (target,) = result["targets"]
    assert target["met"] == (rows["throughput per core"]["ratio"] >= e2e.TARGET_RATIO)
    # one CLI process did the work: its own CPU is nearly all of the side's (the rest: Popen, wait4)
    ours = result["records"]["ours"][0]
    assert ours["command"][:3] == ["-m", "platform_assets", "run"] and ours["command"][-2:] == [
        "--until", "packed_shards"]
    assert 0.9 * ours["cpu_seconds"] <= ours["cli_cpu_seconds"] <= ours["cpu_seconds"]
    assert ours["peak_rss_bytes"] >= ours["cli_max_rss_bytes"] > 10 * harness.MB
    assert 0 < ours["cli_startup_cpu_seconds"] < ours["cli_cpu_seconds"]
    assert rows["CPU in stage process start-up"]["ours"] == 0.0  # no stage processes
    assert rows["CPU in stage work"]["ours"] == ours["cpu_seconds"]


def test_pipeline_end_to_end_tiny_stages(cli_run, corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Ours' side with the `stages` runner, in a child as run_benchmark runs it, then check() and the
    summary against the `cli` run's peer record, on the same inputs (prepare is deterministic)."""
    cli_result, peer = cli_run
    assert e2e_ours.OURS_RUNNERS == ("cli", "stages")  # a new runner needs its own test here
    for key, value in {**BENCH_ENV, "E2E_TOKENIZER": str(corpus.parent / "tokenizer.json"),
                       "E2E_OURS_RUNNER": "stages"}.items():
        monkeypatch.setenv(key, value)
    bench = harness.get_benchmark("pipeline_end_to_end")
    work = tmp_path / "work"
    work.mkdir()
    spec = bench.prepare(corpus, work)
    assert {k: v for k, v in spec.items() if k not in ("inputs", "sources", "ours_runner")} == {
        k: v for k, v in cli_result["spec"].items() if k not in ("inputs", "sources", "ours_runner")}
    spec_path = work / "spec.json"
    spec_path.write_text(json.dumps(spec, indent=1))
    ours = harness.run_side(bench, "ours", spec_path, work, "r1")
    records = {"ours": [ours], "peer": [copy.deepcopy(peer)]}
    bench.check(ours, records["peer"][0])
    rows = _assert_records_and_rows({"spec": spec, "records": records,
                                     "summary": report.summarize(bench, spec, records)}, "stages")
    # ours' figures come from its own stage records, not from the peer's
    assert [s["stage"].split("[")[0] for s in ours["stages"]][-1] == "packed_shards"
    assert ours["stage_work_cpu_seconds"] > 0 and ours["stage_startup_cpu_seconds"] > 0
    assert ours["stage_work_cpu_seconds"] + ours["stage_startup_cpu_seconds"] <= ours["cpu_seconds"]
    assert ours["stage_work_cpu_seconds"] == pytest.approx(sum(s["work_cpu_seconds"] for s in ours["stages"]))
    assert rows["CPU in stage work"]["ours"] == ours["stage_work_cpu_seconds"]
    assert rows["CPU in stage process start-up"]["ours"] == ours["stage_startup_cpu_seconds"]
