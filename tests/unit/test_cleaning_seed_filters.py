"""The seeds' filters (issue #17): each rule on documents that pass and fail, with its rule name and
value in the exclusions; the licence gate in `drop` mode; none of it in the default recipe."""

from __future__ import annotations

import json
from collections import Counter

import pyarrow as pa
import pytest
from document_batches import documents_batch

from platform_assets.cleaning.blocklist import read_terms
from platform_assets.cleaning.license_gate import LicenseGate, license_violations
from platform_assets.cleaning.pipeline import build_pipeline, build_steps
from platform_assets.cleaning.quality import preset, rule_set
from platform_assets.cleaning.quality.seed_filters import HATE_TERMS_FILE, SeedFiltersSettings
from platform_assets.cleaning.quality.step import QualityStep
from platform_assets.cleaning.quality.text_view import TextView
from platform_assets.cleaning.settings import CleaningSettings, LicenseSettings
from platform_assets.cleaning.steps import Doc

PROSE = ("The committee met on Tuesday to review the budget for the coming year, and the members agreed "
         "that the library should stay open longer in the evenings during the examination period.")


def _batch(texts, *, langs=None, metas=None, licenses=None) -> pa.RecordBatch:
    b = documents_batch(texts)
    n = len(texts)
    if metas is not None:
        b = b.set_column(b.schema.get_field_index("meta"), "meta", pa.array(metas, pa.string()))
    if licenses is not None:
        b = b.set_column(b.schema.get_field_index("license"), "license", pa.array(licenses, pa.string()))
    return b.append_column("lang", pa.array(langs or ["en"] * n, pa.string()))


def _run(texts, **kw):
    step = QualityStep([preset("seed_filters", **kw.pop("settings", {}))])
    result = step(_batch(texts, **kw))
    return result.kept["id"].to_pylist(), {e["id"]: (e["rule"], e["value"]) for e in result.exclusions.to_pylist()}


def _check(text, lang="en", meta=None, **settings):
    r = rule_set(preset("seed_filters", **settings))
    return r.check(TextView(text, Doc("d", text, "text", lang, meta=meta)), Counter())


def test_not_in_the_default_recipe():
    settings = CleaningSettings()
    assert "seed_filters" not in [q.preset for q in settings.quality]
    assert not settings.licenses.enabled
    assert [s.name for s in build_steps(settings)][0] == "guard"  # no licence step either


def test_users_repeated_character_run_is_removed():
    kept, removed = _run([PROSE, "This is sooooooooooooooooooo good!!!!!!!!!!!! " + PROSE])
    assert kept == ["d0"]
    assert removed == {"d1": ("seed_filters.repeated_char_run", "19 > 10: 'o'")}


@pytest.mark.parametrize("text", [
    PROSE + "\n\n==========================\n" + "-" * 40,  # underlines and rules are not runs
    PROSE + "\n" + " " * 30 + "indented",  # whitespace is not counted
    "Soooooooo good!!!!!!!!!! " + PROSE,  # 10 of one character: at the limit, kept
])
def test_runs_that_pass(text):
    assert _check(text) is None


def test_run_limit_and_off_switch():
    assert _check("zzzzzz " + PROSE, max_char_run=5).value == "6 > 5: 'z'"
    assert _check("!" * 40 + PROSE, max_char_run=None) is None


def test_users_non_ascii_english_document_is_removed():
    # 35% of the letters are not ASCII (mojibake-like noise pasted into English prose)
    words = ["the"] * 13 + ["ąęłńśźż"]  # 39 ASCII letters, 7 non-ASCII per block: 15%
    mixed = "Cheap тексты продаются здесь сейчас and the best deals for the whole family are here today"
    assert _check(" ".join(words * 20)) is None
    drop = _check(mixed)
    assert drop.rule == "seed_filters.non_ascii_ratio"
    measured, limit = drop.value.split(" > ")
    assert float(measured) == pytest.approx(0.35, abs=0.02) and limit == "0.2"
    # another language is not judged by the English-calibrated rule
    assert _check(mixed, lang="ru") is None
    assert _check(mixed, prose_languages=None).rule == "seed_filters.non_ascii_ratio"


def test_non_script_ratio_is_script_aware():
    greek = "Η γρήγορη καφέ αλεπού πηδάει πάνω από τον τεμπέλη σκύλο. " * 3
    settings = {"max_non_script_ratio": 0.1, "max_non_ascii_ratio": None, "min_mean_word_length": None}
    assert _check(greek, lang="el", **settings).rule == "seed_filters.non_script_ratio"
    assert _check(greek, lang="el", scripts=("Greek",), **settings) is None
    assert _check(PROSE, scripts=("Latin",), **settings) is None
    assert _check(PROSE, scripts=("Greek",), **settings).value == "1 > 0.1"  # ASCII letters are Latin


def test_mean_word_length_bounds():
    assert _check(PROSE) is None
    low = _check("a b c d e f g h i j k l m n o p q r s t u v w x y z " * 3)
    assert low.rule == "seed_filters.mean_word_length_low" and low.value == "1 < 3"
    high = _check("Pneumonoultramicroscopic supercalifragilistic antidisestablishmentarianism " * 3)
    assert high.rule == "seed_filters.mean_word_length_high"
    assert _check("a b c d e f g " * 5, min_mean_word_length=None) is None
    assert _check(PROSE, max_mean_word_length=4.0).rule == "seed_filters.mean_word_length_high"


def _chat(*contents, roles=("user", "assistant")) -> str:
    return json.dumps({"messages": [{"role": r, "content": c} for r, c in zip(roles, contents, strict=True)]})


def test_empty_outputs_of_chat_and_instruction_documents():
    metas = [
        _chat("Summarise the minutes.", PROSE),  # a real answer: kept
        _chat("Summarise the minutes.", "   "),  # blank answer
        _chat("Summarise the minutes.", None),  # null answer
        _chat("Summarise the minutes.", roles=("user",)),  # no assistant turn
        json.dumps({"instruction": "Summarise the minutes.", "output": None}),  # instruction record
        json.dumps({"instruction": "Summarise the minutes.", "output": PROSE}),
        json.dumps({"url": "https://example.org"}),  # neither chat nor instruction
    ]
    kept, removed = _run([PROSE] * len(metas), metas=metas)
    assert kept == ["d0", "d5", "d6"]
    assert removed == {
        "d1": ("seed_filters.empty_output", "messages[1].content is empty"),
        "d2": ("seed_filters.empty_output", "messages[1].content is null"),
        "d3": ("seed_filters.empty_output", "no assistant message"),
        "d4": ("seed_filters.empty_output", "output is null"),
    }
    kept, removed = _run([PROSE] * 2, metas=metas[1:3], settings={"empty_output": False})
    assert kept == ["d0", "d1"] and not removed


def test_hate_terms_beside_the_nsfw_list():
    terms = read_terms(default=HATE_TERMS_FILE)
    assert 10 <= len(terms) <= 100 and "heil hitler" in terms  # small, documented, phrases matched as words
    kept, removed = _run([PROSE, "They shouted Heil   Hitler at the rally. " + PROSE])
    assert kept == ["d0"]
    assert removed == {"d1": ("seed_filters.hate_terms", "1 > 0: heil hitler")}
    # a list of the config's own, with a tolerance
    own = {"hate_terms": ("budget committee", "library"), "max_hate_terms": 1}
    assert _check(PROSE.replace("the budget", "the budget committee"), **own).value.startswith("2 > 1: ")
    assert _check(PROSE, **own) is None
    assert _check("heil hitler " + PROSE, max_hate_terms=None) is None


def test_hate_terms_from_a_file(tmp_path):
    (tmp_path / "terms.txt").write_text("# a test list\nzorblax\n")
    assert _check("zorblax " + PROSE, hate_terms_path=str(tmp_path / "terms.txt")).rule == "seed_filters.hate_terms"
    assert _check("heil hitler " + PROSE, hate_terms_path=str(tmp_path / "terms.txt")) is None


def test_preset_in_a_recipe_config():
    settings = CleaningSettings.model_validate({"quality": [{"preset": "seed_filters", "max_char_run": 20,
                                                             "prose_languages": ["en", "de"]}]})
    (q,) = settings.quality
    assert isinstance(q, SeedFiltersSettings) and q.max_char_run == 20 and q.max_hate_terms == 0
    with pytest.raises(ValueError, match="max_char_runs"):
        CleaningSettings.model_validate({"quality": [{"preset": "seed_filters", "max_char_runs": 20}]})


# -- the licence gate ---------------------------------------------------------------------------------


def test_license_gate_drop_mode_removes_with_rule_and_value():
    settings = CleaningSettings.model_validate({
        "language": {"enabled": False}, "quality": [], "pii": {"enabled": False},
        "licenses": {"allow": ["CC-BY-4.0", "MIT"], "on_missing_or_disallowed": "drop"}})
    pipeline = build_pipeline(settings)
    assert pipeline.steps[0].name == "license"
    batch = _batch([PROSE] * 5, licenses=["cc-by-4.0", "MIT", "CC-BY-NC-4.0", None, " "])
    result = pipeline.process_batch(batch)
    assert result.kept["id"].to_pylist() == ["d0", "d1"]
    assert {e["id"]: (e["rule"], e["value"]) for e in result.exclusions.to_pylist()} == {
        "d2": ("license.not_allowed", "CC-BY-NC-4.0"), "d3": ("license.missing", None),
        "d4": ("license.missing", None)}
    funnel = pipeline.funnel()
    funnel.check()
    assert funnel.removed_by_rule()["license.not_allowed"]["docs"] == 1


def test_license_gate_fail_mode_runs_no_step_and_counts_violations():
    settings = LicenseSettings(allow=("MIT",), on_missing_or_disallowed="fail")
    assert "license" not in [s.name for s in build_steps(CleaningSettings(licenses=settings))]
    column = pa.array(["MIT", "GPL-3.0", "GPL-3.0", None], pa.string())
    assert license_violations(column, settings) == Counter({"GPL-3.0": 2, "(missing)": 1})
    with pytest.raises(ValueError, match="allow"):
        LicenseGate(LicenseSettings())
