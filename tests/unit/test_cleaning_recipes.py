"""Per-source cleaning recipes (cleaning/recipes.py) and the SFT turn checks (conversation_filter.py)."""

import gzip
import json
from pathlib import Path

import pyarrow as pa
import pytest
from document_batches import documents_batch

from platform_assets.cleaning.pipeline import build_pipeline, build_steps
from platform_assets.cleaning.recipes import apply_gates, resolve_recipe
from platform_assets.cleaning.settings import CleaningSettings, RecipeGates
from platform_assets.config import CleaningGates, ConfigError, parse_config
from platform_assets.ingest.chat import render_chat_text
from platform_assets.ingest.readers.fields import meta_json

# Ordinary instruction/response pairs of ~10 words: what the issue saw removed by Gopher's 50-word floor
PAIRS = [
    ("What is the capital of France?", "The capital of France is Paris, on the Seine."),
    ("Name three primary colours.", "The three primary colours are red, yellow and blue."),
    ("Give me a synonym for the word happy.", "A common synonym for happy is joyful, as in a joyful day."),
]


def _handbook_page() -> str:
    seed = Path(__file__).resolve().parents[2] / "sample_data" / "real_docs.jsonl.gz"
    with gzip.open(seed, "rt") as f:
        return next(d["text"] for d in map(json.loads, f) if d["source"] == "debian-handbook" and d["lang"] == "en")


def _chat_batch(conversations: list[list[dict] | None], texts: list[str] | None = None) -> pa.RecordBatch:
    texts = texts or [render_chat_text(c) if c else "a plain document" for c in conversations]
    metas = [meta_json({"messages": c}, None, None) if c is not None else None for c in conversations]
    batch = documents_batch(texts)
    return batch.set_column(batch.schema.get_field_index("meta"), batch.schema.field("meta"),
                            pa.array(metas, pa.string()))


def _pair(prompt: str, response: str) -> list[dict]:
    return [{"role": "user", "content": prompt}, {"role": "assistant", "content": response}]


def _clean(settings: CleaningSettings, batch: pa.RecordBatch) -> tuple[list[str], dict[str, str]]:
    """(kept ids, {removed id: "rule value"})."""
    pipeline = build_pipeline(settings)
    result = pipeline.process_batch(batch)
    pipeline.funnel().check()
    return result.kept.column("id").to_pylist(), {
        e["id"]: f"{e['rule']} {e['value']}" for e in result.exclusions.to_pylist()}


def test_ordinary_pairs_pass_sft_and_fail_web():
    batch = _chat_batch([_pair(p, r) for p, r in PAIRS])
    cleaning = CleaningSettings()
    kept, removed = _clean(resolve_recipe(cleaning, "sft").settings, batch)
    assert kept == ["d0", "d1", "d2"] and removed == {}
    kept, removed = _clean(resolve_recipe(cleaning, "web").settings, batch)
    # the prose rules of a web page: 22 words < Gopher's 50, or a 2-gram share (the answer repeats the question)
    assert kept == [] and {v.split(".")[0] for v in removed.values()} <= {"gopher_quality", "gopher_repetition"}
    assert any(v.startswith("gopher_quality.too_few_words") for v in removed.values())


@pytest.mark.parametrize(("conversation", "reason"), [
    (_pair("Say hello.", "\u200b\u200b"), "conversation.empty_turn turn 2 (assistant)"),  # blank once normalised
    (_pair("Explain what a compiler does.", "..."), "conversation.response_too_short 0 < 1 (turn 2)"),
    ([*_pair("How do I list files in a folder?", "Use the ls command in a shell."),
      {"role": "assistant", "content": "Use the ls command in a shell."}],
     "conversation.duplicate_turn turn 3 repeats turn 2"),
    (_pair("What colour is the sky on a clear day?", "What colour is the sky on a  clear day?"),  # echoed
     "conversation.duplicate_turn turn 2 repeats turn 1"),
    ([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there, who are you?"}],
     "conversation.no_response 2 turns, none by the assistant"),
    (None, "conversation.no_messages meta has no messages list"),
])
def test_sft_failures_are_excluded_with_their_reason(conversation, reason):
    good = _pair(*PAIRS[0])
    kept, removed = _clean(resolve_recipe(CleaningSettings(), "sft").settings, _chat_batch([good, conversation]))
    assert kept == ["d0"] and removed == {"d1": reason}


def test_short_acknowledgements_may_repeat_and_bounds_follow_the_config():
    chat = [*_pair("Is the server up?", "Yes."), {"role": "user", "content": "And the database?"},
            {"role": "assistant", "content": "Yes."}]
    kept, _ = _clean(resolve_recipe(CleaningSettings(), "sft").settings, _chat_batch([chat]))
    assert kept == ["d0"]  # "Yes." twice: under duplicate_min_words (4), not a copy error
    strict = CleaningSettings(recipes={"strict_sft": {"base": "sft", "overrides": {
        "conversation": {"min_response_words": 3, "max_response_words": 8}}}})
    batch = _chat_batch([chat, _pair(*PAIRS[0]), _pair(*PAIRS[1])])
    kept, removed = _clean(resolve_recipe(strict, "strict_sft").settings, batch)
    assert kept == [] and removed == {"d0": "conversation.response_too_short 1 < 3 (turn 2)",
                                      "d1": "conversation.response_too_long 9 > 8 (turn 2)",
                                      "d2": "conversation.response_too_long 9 > 8 (turn 2)"}


def test_web_is_the_global_block_and_default_sources_are_cleaned_as_before():
    cleaning = CleaningSettings(language={"allow": ["en"]}, quality=[{"preset": "c4"}])
    recipe = resolve_recipe(cleaning)
    assert recipe.name == "web" and recipe.settings is cleaning and recipe.gates == RecipeGates()
    assert [s.name for s in build_steps(recipe.settings)] == [s.name for s in build_steps(cleaning)]
    assert "conversation" not in [s.name for s in build_steps(cleaning)]  # only recipes for chat data add it
    page = _handbook_page()
    batch = _chat_batch([None] * 4, texts=[page, page + "\n\nfunction f() { return 1; }", "too short", "x " * 80])
    assert _clean(recipe.settings, batch) == _clean(cleaning, batch)


def test_docs_keeps_the_code_listing_of_a_page_that_web_cuts():
    page = _handbook_page() + "\n\nTo enable it, add:\n\nserver {\n    listen 80;\n}"
    batch = _chat_batch([None], texts=[page])
    cleaning = CleaningSettings()

    def kept_text(recipe: str) -> str:
        result = build_pipeline(resolve_recipe(cleaning, recipe).settings).process_batch(batch)
        return result.kept.column("text")[0].as_py()

    assert "listen 80;" not in kept_text("web")  # C4's line rules remove the listing's lines
    assert kept_text("docs").endswith("server {\n    listen 80;\n}")


def test_code_recipe_labels_languages_but_removes_no_source_file():
    code = "import os\n\n\ndef main():\n    for name in os.listdir('.'):\n        print(name)\n"
    cleaning = CleaningSettings(language={"allow": ["en"]})
    kept, removed = _clean(resolve_recipe(cleaning, "code").settings, _chat_batch([None], texts=[code]))
    assert kept == ["d0"] and removed == {}
    assert _clean(cleaning, _chat_batch([None], texts=[code]))[0] == []


def test_overrides_merge_onto_the_global_block():
    cleaning = CleaningSettings(language={"allow": ["en", "de"], "min_score": 0.6},
                                pii={"types": ["EMAIL"]},
                                recipes={"mine": {"base": "sft", "overrides": {"language": {"min_score": 0.7}}}})
    settings = resolve_recipe(cleaning, "mine").settings
    assert settings.language.allow == ("en", "de") and settings.language.min_score == 0.7  # merged, not replaced
    assert settings.pii.types == ("EMAIL",) and settings.conversation.enabled and settings.quality == []


def test_seed_filters_are_switched_on_per_recipe():
    cleaning = CleaningSettings(recipes={"sft_seeds": {"base": "sft", "overrides": {
        "quality": [{"preset": "seed_filters", "max_non_ascii_ratio": None}]}}})
    batch = _chat_batch([_pair(*PAIRS[0]), _pair("How was the film?", "It was sooooooooooooooo good!")])
    assert _clean(resolve_recipe(cleaning, "sft").settings, batch) == (["d0", "d1"], {})
    kept, removed = _clean(resolve_recipe(cleaning, "sft_seeds").settings, batch)
    assert kept == ["d0"] and removed["d1"].startswith("seed_filters.repeated_char_run")


def test_gates_follow_the_recipe():
    gates = CleaningGates(max_removal_rate=0.9, rule_bounds={"language": 0.3})
    cleaning = CleaningSettings(recipes={"loose": {"base": "sft", "gates": {"rule_bounds": {"conversation": 0.8}}}})
    assert apply_gates(gates, resolve_recipe(cleaning, "web").gates) == gates
    assert apply_gates(gates, resolve_recipe(cleaning, "sft").gates).max_removal_rate == 0.5
    loose = apply_gates(gates, resolve_recipe(cleaning, "loose").gates)  # sft's 0.5 kept, a rule bound added
    assert loose.max_removal_rate == 0.5 and loose.rule_bounds == {"language": 0.3, "conversation": 0.8}
    lenient = CleaningSettings(recipes={"lenient": {"base": "sft", "gates": {"max_removal_rate": 0.8}}})
    assert apply_gates(gates, resolve_recipe(lenient, "lenient").gates).max_removal_rate == 0.8
    # a custom recipe without gates of its own inherits its base's
    inherit = CleaningSettings(recipes={"mine": {"base": "sft", "overrides": {"pii": {"types": ["EMAIL"]}}}})
    assert resolve_recipe(inherit, "mine").gates.max_removal_rate == 0.5


def _config(sources: list[dict], **cleaning) -> dict:
    return {"sources": [{"format": "jsonl", "path": "x.jsonl", **s} for s in sources], "cleaning": cleaning}


def test_sources_name_their_recipe_and_unknown_names_are_config_errors(tmp_path):
    cfg = parse_config(_config([{"name": "chat", "recipe": "sft"}, {"name": "web"}]), tmp_path)
    assert cfg.cleaning_recipe("chat").name == "sft" and cfg.cleaning_recipe("web").name == "web"
    cfg = parse_config(_config([{"name": "web"}], default_recipe="docs"), tmp_path)
    assert cfg.cleaning_recipe("web").name == "docs"
    with pytest.raises(ConfigError, match=r"unknown cleaning recipe 'chatty' \(known: web, code, docs, sft, mine\)"):
        parse_config(_config([{"name": "chat", "recipe": "chatty"}], recipes={"mine": {"base": "sft"}}), tmp_path)
    with pytest.raises(ConfigError, match=r"unknown cleaning recipe 'nope'"):
        parse_config(_config([{"name": "web"}], default_recipe="nope"), tmp_path)


@pytest.mark.parametrize(("recipes", "message"), [
    ({"mine": {"base": "sft", "overrides": {"conversation": {"min_response_word": 3}}}},
     r"cleaning recipe 'mine': conversation.min_response_word: Extra inputs"),
    ({"mine": {"base": "sft", "overrides": {"recipes": {}}}}, r"recipes cannot be overridden"),
    ({"a": {"base": "b", "overrides": {"quality": []}}, "b": {"base": "a"}}, r"cycle: a -> b -> a"),
    ({"sft": {"base": "web"}}, r"sft is a built-in recipe"),
    ({"mine": {"base": "webb"}}, r"unknown cleaning recipe 'webb'"),
])
def test_bad_custom_recipes_are_config_errors(tmp_path, recipes, message):
    with pytest.raises(ConfigError, match=message):
        parse_config(_config([{"name": "web"}], recipes=recipes), tmp_path)


def test_blocklist_path_resolves_for_every_recipe(tmp_path):
    (tmp_path / "words.txt").write_text("zorblax\n")
    cfg = parse_config(_config([{"name": "chat", "recipe": "sft"}], blocklist={"path": "words.txt"}), tmp_path)
    settings = cfg.cleaning_recipe("chat").settings
    assert settings.blocklist.path == str(tmp_path / "words.txt")
    batch = _chat_batch([_pair(*PAIRS[0]), _pair("Say the word.", "The word is zorblax, as you asked.")])
    kept, removed = _clean(settings, batch)
    assert kept == ["d0"] and removed["d1"].startswith("blocklist.")


def test_docs_keeps_an_ordinary_paragraph_that_web_removes_for_its_sentence_count():
    paragraph = (  # 77 words in three sentences: the example of c4.too_few_sentences
        "The package manager keeps a local database of every package installed on the system, together "
        "with the files they provide and the scripts that run when it is configured or removed. "
        "When an administrator asks for a new program, the tool resolves its dependencies, downloads the "
        "archives from the configured mirrors and verifies their signatures before unpacking. "
        "Because every step is recorded, a failed upgrade can be resumed later without leaving the "
        "system in a broken state."
    )
    assert len(paragraph.split()) == 77
    batch = _chat_batch([None], texts=[paragraph])
    cleaning = CleaningSettings()
    kept, removed = _clean(resolve_recipe(cleaning, "web").settings, batch)
    assert kept == [] and removed["d0"] == "c4.too_few_sentences 3 < 5"
    assert _clean(resolve_recipe(cleaning, "docs").settings, batch) == (["d0"], {})
