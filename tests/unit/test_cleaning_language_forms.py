"""The language step without length bands (`min_score_by_words: {}`) skips counting words, which no
threshold then reads: the same labels, scores, scripts and removals as with the words counted (the
form it replaces), on short and long texts in several scripts and texts without letters."""

from __future__ import annotations

import pyarrow as pa

from platform_assets.cleaning import language_id
from platform_assets.cleaning.language_bands import count_words
from platform_assets.cleaning.language_script import script_counts
from platform_assets.cleaning.settings import LanguageSettings

TEXTS = ["", "1234 5678", "ok", "Hola", "Der schnelle braune Fuchs springt über den faulen Hund.",
         "The quick brown fox jumps over the lazy dog. " * 20, "Быстрая коричневая лиса", "中文文本测试一下",
         "Le renard brun rapide saute par-dessus le chien paresseux.", "a b c", "Dit is een korte zin.",
         "日本語のテキストです", "Ελληνικά κείμενα εδώ", "😀😀😀", "x" * 3000]


def _run(step):
    batch = pa.RecordBatch.from_pydict({"id": [str(i) for i in range(len(TEXTS))], "text": TEXTS,
                                        "modality": ["text"] * len(TEXTS)})
    result = step(batch)
    return result.kept.to_pylist(), result.exclusions.to_pylist(), sorted(result.stats.counters.items())


def test_without_bands_the_same_as_with_words_counted(monkeypatch):
    settings = LanguageSettings(min_score_by_words={})
    fast = _run(language_id.LanguageFilter(settings))

    def counted(self, text):  # the replaced form: words always counted
        sample = text[: self.settings.max_chars]
        return count_words(sample, self._longest_band), script_counts(sample)

    monkeypatch.setattr(language_id.LanguageFilter, "_text_facts", counted)
    assert _run(language_id.LanguageFilter(settings)) == fast
    kept, excluded, _ = fast
    assert kept and excluded  # both outcomes exercised
