"""The in-process run (the CLI's main job: every stage in one process) drops what a stage cached for
itself when another stage starts: py3langid's model, loaded by cleaned_documents, is not held through
dedup, splits, tokenize and packing (~120 MB here)."""

import json
import os
import subprocess
import sys

from platform_assets import stage_caches


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


def test_the_caches_kept_between_sources_are_kept_by_every_stage_of_the_per_source_job():
    """The per-source job runs its stages for one source, then for the next: a cache its first stage
    needs, released by a later one of them, would be loaded again for every source."""
    from platform_assets.definitions import defs
    from platform_assets.defs.pipeline.jobs import PER_SOURCE_ASSETS

    selected = {key.to_user_string() for key in PER_SOURCE_ASSETS.resolve(defs().resolve_asset_graph())}
    assert selected == stage_caches.PER_SOURCE_STAGES


# A fresh interpreter: in the suite's long-lived process (1.6 GB by then) glibc's dynamic mmap threshold
# has grown, so the model's arrays came from the heap and freeing them showed 54 of the ~120 MB in RSS.
# The stage start releases, then trims the heap (stage_context), as here.
_RELEASE_SCRIPT = """
import json

import psutil
from platform_assets import stage_caches
from platform_assets.cleaning import language_id
from platform_assets.cleaning.language_id import LanguageIdentifier
from platform_assets.heap import release_freed_heap

SENTENCE = "The quick brown fox jumps over the lazy dog and keeps running through the field."
process = psutil.Process()
first = LanguageIdentifier().predict(SENTENCE)
assert language_id._MODEL is not None
# ingest and cleaning keep it: the per-source job runs them for each source in turn
assert stage_caches.release_other_stages("cleaned_documents") == []
assert stage_caches.release_other_stages("raw_documents") == []
assert language_id._MODEL is not None
before = process.memory_info().rss
released = stage_caches.release_other_stages("deduplicated_documents")
release_freed_heap()
freed = before - process.memory_info().rss
print(json.dumps({"released": released, "model_gone": language_id._MODEL is None, "freed": freed,
                  "same_answer": LanguageIdentifier().predict(SENTENCE) == first}))  # loaded again
"""


def test_the_language_model_is_released_when_another_stage_starts():
    # the model decompressed in memory (no cache file): a mapped one is unmapped on release, its pages
    # the page cache's (tests/unit/test_cleaning_language_model_cache.py)
    done = subprocess.run([sys.executable, "-c", _RELEASE_SCRIPT], capture_output=True, text=True,
                          timeout=120, check=True, env={**os.environ, "PLATFORM_ASSETS_CACHE_DIR": ""})
    result = json.loads(done.stdout.splitlines()[-1])
    assert "language model" in result["released"]
    assert result["model_gone"]
    assert result["freed"] > 60 * 2**20  # the float32 weights alone are 57 MB
    assert result["same_answer"]
