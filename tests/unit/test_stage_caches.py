"""The in-process run (the CLI's main job: every stage in one process) drops what a stage cached for
itself when another stage starts: py3langid's model, loaded by cleaned_documents, is not held through
dedup, splits, tokenize and packing (~120 MB here)."""

import psutil

from platform_assets import stage_caches
from platform_assets.cleaning import language_id
from platform_assets.cleaning.language_id import LanguageIdentifier

SENTENCE = "The quick brown fox jumps over the lazy dog and keeps running through the field."


def test_a_stage_keeps_the_caches_it_shares_and_drops_the_others(monkeypatch):
    monkeypatch.setattr(stage_caches, "_RELEASES", {})
    held = {"a": True, "b": True}

    def release(name: str):
        def drop() -> bool:
            was, held[name] = held[name], False
            return was
        return drop

    stage_caches.register("a", frozenset({"stage_a", "stage_a2"}), release("a"))
    stage_caches.register("b", frozenset({"stage_b"}), release("b"))
    assert stage_caches.release_other_stages("stage_a2") == ["b"]
    assert held == {"a": True, "b": False}
    assert stage_caches.release_other_stages("stage_a") == []  # nothing held any more: nothing named
    assert stage_caches.release_other_stages("stage_c") == ["a"]


def test_the_language_model_is_released_when_another_stage_starts():
    process = psutil.Process()
    first = LanguageIdentifier().predict(SENTENCE)
    assert language_id._MODEL is not None
    # ingest and cleaning keep it: the per-source job runs them for each source in turn
    assert stage_caches.release_other_stages("cleaned_documents") == []
    assert stage_caches.release_other_stages("raw_documents") == []
    assert language_id._MODEL is not None
    before = process.memory_info().rss
    assert "language model" in stage_caches.release_other_stages("deduplicated_documents")
    assert language_id._MODEL is None
    assert before - process.memory_info().rss > 60 * 2**20  # the float32 weights alone are 57 MB
    assert LanguageIdentifier().predict(SENTENCE) == first  # loaded again, the same answer
