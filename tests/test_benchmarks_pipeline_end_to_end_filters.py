"""pipeline_end_to_end's like-for-like parts, without running either pipeline: ours' generated config
applies the peer's four filters with datatrove's thresholds, and `check` fails when the sides' filters
keep different documents; the CLI runner builds the README's command on its own instance, and reads the
CLI's corpus summary line (fast; the whole benchmark is tests/test_benchmarks_pipeline_end_to_end.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

pytest.importorskip("datatrove")
pytest.importorskip("nltk")

from benchmarks import pipeline_end_to_end as e2e  # noqa: E402
from benchmarks import pipeline_end_to_end_ours as e2e_ours  # noqa: E402
from benchmarks import pipeline_scaling  # noqa: E402
from benchmarks.harness import BenchmarkError  # noqa: E402

# our preset field -> the datatrove filter attribute holding the same setting
SAME_SETTING = {
    "gopher_repetition": ("GopherRepetitionFilter", {
        "dup_line_frac": "dup_line_frac", "dup_para_frac": "dup_para_frac",
        "dup_line_char_frac": "dup_line_char_frac", "dup_para_char_frac": "dup_para_char_frac",
        "top_n_grams": "top_n_grams", "dup_n_grams": "dup_n_grams"}),
    "gopher_quality": ("GopherQualityFilter", {
        "min_doc_words": "min_doc_words", "max_doc_words": "max_doc_words",
        "min_avg_word_length": "min_avg_word_length", "max_avg_word_length": "max_avg_word_length",
        "max_symbol_word_ratio": "max_symbol_word_ratio", "max_bullet_lines_ratio": "max_bullet_lines_ratio",
        "max_ellipsis_lines_ratio": "max_ellipsis_lines_ratio",
        "min_alpha_words_ratio": "max_non_alpha_words_ratio",  # datatrove's name, same rule (a TODO there)
        "min_stop_words": "min_stop_words"}),
    "c4": ("C4QualityFilter", {
        "remove_citations": "remove_citations", "filter_no_terminal_punct": "filter_no_terminal_punct",
        "min_num_sentences": "min_num_sentences", "min_words_per_line": "min_words_per_line",
        "max_word_length": "max_word_length", "filter_lorem_ipsum": "filter_lorem_ipsum",
        "filter_javascript": "filter_javascript", "filter_curly_bracket": "filter_curly_bracket",
        "filter_policy": "filter_policy"}),
    "fineweb": ("FineWebQualityFilter", {
        "line_punct_thr": "line_punct_thr", "line_punct_exclude_zero": "line_punct_exclude_zero",
        "short_line_thr": "short_line_threshold", "short_line_length": "short_line_length",
        "char_duplicates_ratio": "char_duplicates_ratio", "new_line_ratio": "new_line_ratio"}),
}


def _comparable(value):
    # datatrove keeps n-gram limits as ((n, fraction), ...), ours as {n: fraction}
    return tuple(sorted(value.items())) if isinstance(value, dict) else value


@pytest.mark.parametrize("recipe", e2e.QUALITY_RECIPES)
@pytest.mark.parametrize("alpha", [False, True])
def test_ours_config_applies_the_peers_filters(tmp_path: Path, recipe: str, alpha: bool):
    from platform_assets.config import load_config

    tokenizer = tmp_path / "tokenizer.json"
    tokenizer.write_text("{}")
    sources = {"text": {"path": str(tmp_path / "text")}, "code": {"path": str(tmp_path / "code")}}
    overrides = e2e_ours.ours_overrides(recipe, alpha)
    config = load_config(pipeline_scaling.write_config(tmp_path, sources, tokenizer, overrides))
    ours = config.cleaning.quality
    peer = e2e.peer_filters(recipe, alpha)
    assert [q.preset for q in ours] == list(SAME_SETTING)
    assert [type(f).__name__ for f in peer] == [cls for cls, _ in SAME_SETTING.values()]
    for settings, peer_filter in zip(ours, peer, strict=True):
        assert settings.languages is None  # every document, as datatrove's filters
        for our_field, peer_attr in SAME_SETTING[settings.preset][1].items():
            assert _comparable(getattr(settings, our_field)) == _comparable(getattr(peer_filter, peer_attr)), (
                settings.preset, our_field)
    by_preset = {q.preset: q for q in ours}
    assert (by_preset["gopher_quality"].min_alpha_words_ratio is not None) is alpha
    assert by_preset["c4"].filter_no_terminal_punct is (recipe == "published")
    # the rest of the sample's recipe stays: language ID at 0.5, the other steps at their defaults
    assert config.cleaning.language.min_score == 0.5 and config.cleaning.pii.enabled
    assert config.cleaning_gates.max_removal_rate == config.cleaning_gates.max_rule_removal_rate == 1.0


def _records(ours_kept: list[str], peer_kept: list[str], removed: dict[str, str]) -> tuple[dict, dict]:
    ours = {"side": "ours", "kept_ids_after_filters": ours_kept, "kept_ids_after_dedup": ours_kept[:-1],
            "removed_rule_by_id": removed, "documents_kept": len(ours_kept) - 1}
    peer = {"side": "peer", "kept_ids_after_filters": peer_kept, "documents_kept": len(peer_kept)}
    return ours, peer


def test_check_reports_agreement_and_drops_the_id_lists():
    shared = [f"text-{i}" for i in range(100)]
    ours, peer = _records([*shared, "text-200"], [*shared, "text-300", "text-301"],
                          {"text-300": "gopher_repetition.top_2_gram", "text-301": "language.low_score"})
    e2e.check(ours, peer)
    figures = ours["filter_agreement"]
    assert figures is peer["filter_agreement"]
    assert figures["kept_after_filters"] == {"ours": 101, "peer": 102}
    assert figures["kept_after_dedup"] == {"ours": 100, "peer": 102}
    assert (figures["kept_by_both"], figures["kept_by_ours_only"], figures["kept_by_peer_only"]) == (100, 1, 2)
    assert figures["kept_by_peer_only_removed_by_our"] == {"gopher_repetition": 1, "language": 1}
    assert figures["kept_by_one_side_share"] == pytest.approx(3 / 103)
    assert "kept_ids_after_filters" not in ours and "removed_rule_by_id" not in ours
    assert "kept_ids_after_filters" not in peer


def test_check_fails_when_the_filters_keep_different_documents():
    shared = [f"text-{i}" for i in range(100)]
    # 12 of 112 kept by one side only: over the 10% bound
    ours, peer = _records([*shared, *(f"code-{i}" for i in range(12))], shared, {})
    with pytest.raises(BenchmarkError, match="12 of 112 kept by one side only"):
        e2e.check(ours, peer)
    # a tiny input: 3 borderline documents of 5 are within the floor, 4 are not
    ours, peer = _records(["a", "b", "c", "d"], ["a", "b", "e"], {})
    e2e.check(ours, peer)
    ours, peer = _records(["a", "b", "c", "d", "f"], ["a", "b", "e"], {})
    with pytest.raises(BenchmarkError, match="4 of 6"):
        e2e.check(ours, peer)
    # nothing kept on either side is no comparison at all
    ours, peer = _records(["x"], [], {})
    ours["kept_ids_after_filters"] = []
    with pytest.raises(BenchmarkError, match="0 of 0"):
        e2e.check(ours, peer)


def _spec(tmp_path: Path, runner: str = "cli") -> dict:
    tokenizer = tmp_path / "tokenizer.json"
    tokenizer.write_text("{}")
    sources = {name: {"path": str(tmp_path / name), "bytes": 1} for name in ("text", "code")}
    for name in sources:
        (tmp_path / name).mkdir()
    return {"sources": sources, "tokenizer": str(tokenizer), "quality_recipe": "fineweb", "alpha_rule": False,
            "ours_runner": runner}


def test_cli_runner_runs_the_readme_command_on_the_benchmarks_config(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch):
    from platform_assets import cli
    from platform_assets.config import load_config

    monkeypatch.setenv("PLATFORM_CONFIG", "/elsewhere.yaml")  # a stale export must not pick another config
    spec = _spec(tmp_path)
    run_dir = tmp_path / "run"
    command, env, storage = e2e_ours.cli_invocation(spec, run_dir)
    config_path = run_dir / "pipeline.yaml"
    assert command == [sys.executable, "-m", "platform_assets", "run", "--config", str(config_path),
                       "--until", "packed_shards"]
    assert "packed_shards" in cli.UNTIL_CHOICES and "PLATFORM_CONFIG" not in env
    # an instance of its own, configured as the repository's default one
    assert env["DAGSTER_HOME"] == str(run_dir / "dagster_home")
    assert (run_dir / "dagster_home" / "dagster.yaml").read_bytes() == (
        REPO_ROOT / "dagster_home" / "dagster.yaml").read_bytes()
    # the config the stages runner builds (the same filters, gates, tokenizer), its outputs under run_dir
    config = load_config(config_path)
    stages_config = load_config(pipeline_scaling.write_config(
        tmp_path, spec["sources"], Path(spec["tokenizer"]), e2e_ours.ours_overrides("fineweb", False)))
    assert config.cleaning == stages_config.cleaning and config.cleaning_gates == stages_config.cleaning_gates
    assert config.tokenizer == stages_config.tokenizer
    assert Path(config.storage_root) == storage == run_dir / "data"
    # the CLI runs one per-source job per source (no file partitions here), then the corpus job
    assert cli.selected_partition_keys(config, None) == ["text", "code"]


class _Value:
    def __init__(self, value):
        self.value = value


class _Materialization:
    def __init__(self, **metadata):
        self.metadata = {k: _Value(v) for k, v in metadata.items()}


class _CorpusJobResult:
    """What cli._summary and cli._checks_summary read of a corpus_job result."""

    def asset_materializations_for_node(self, asset: str):
        return {"deduplicated_documents": [_Materialization(documents_in=1523, rows=1490)],
                "dataset_splits": [_Materialization(rows=1490)],
                "tokenized_documents": [_Materialization(tokens=2_345_678)],
                "packed_shards": [_Materialization(sequences=2291, efficiency=0.99)],
                "media_shards": [_Materialization(samples=0)]}.get(asset, [])

    def get_asset_check_evaluations(self):
        return []


def test_cli_summary_line_is_what_the_benchmark_reads():
    from platform_assets import cli

    result = _CorpusJobResult()
    output = ("source  status ...\ntext             ok          10            0        8  4/4 checks passed\n"
              f"{'corpus':<16} {'ok':<8} {cli._summary('corpus_job', result)}  {cli._checks_summary(result)}\n"
              "outputs under /x; runs recorded in /y\n")
    match = e2e_ours.CORPUS_SUMMARY.search(output)
    assert match is not None and match.groups() == ("1523", "1490", "2345678")
    assert e2e_ours.CORPUS_SUMMARY.search(output.replace("corpus           ok ", "corpus           FAILED ")) is None


def test_ours_runner_is_checked(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("E2E_OURS_RUNNER", raising=False)
    assert e2e_ours.ours_runner() == "cli"
    monkeypatch.setenv("E2E_OURS_RUNNER", "stages")
    assert e2e_ours.ours_runner() == "stages"
    monkeypatch.setenv("E2E_OURS_RUNNER", "materialize")
    with pytest.raises(SystemExit, match="E2E_OURS_RUNNER must be one of"):
        e2e_ours.ours_runner()


def test_the_peers_tokenizer_has_no_wall_clock_limit_on_a_long_document(monkeypatch: pytest.MonkeyPatch):
    """nltk 3.10 limits each regex call to 5 s of wall clock; Punkt walks a whole document in one call,
    so a long document on a slow machine failed the peer at 256 MB. The benchmark's tokenizer lifts it;
    a limit of 0 s proves the lifted setting is the one in force (it would fail any call)."""
    redos = pytest.importorskip("nltk.redos")
    from benchmarks.cleaning_quality_rules import offline_nltk_tokenizer

    monkeypatch.setattr(redos, "DEFAULT_TIMEOUT", 0.0)
    tokenizer = offline_nltk_tokenizer()
    assert redos.DEFAULT_TIMEOUT is None
    text = "A sentence ends here. " * 20_000
    assert len(tokenizer.sent_tokenize(text)) == 20_000
