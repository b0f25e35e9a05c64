"""Length bands for the language step's score threshold: very short texts need a lower one.

py3langid's probabilities are a softmax at a temperature of sqrt(sample bytes), so the same evidence
gives a lower top probability on a short text than on a long one: on the NAME lines of translated
man pages (1-15 words; benchmarks/langid_shortset.py), lines of 1-3 words that the model labels
correctly score a median well under the paragraph threshold of 0.5 (figures in
benchmarks/RESULTS.md, "Language ID: short texts"). `LanguageSettings.min_score_by_words` maps a
word count to the threshold of texts of at most that many words; longer texts use `min_score`.

Words: runs of letters and digits that hold a letter. Scripts written without spaces (Han, kana,
Thai, Lao, Khmer, Myanmar) count one word per 2 characters: a Chinese word averages 1.5-2 characters,
so "列出目录内容" (6 characters, "list directory contents") is 3 words, like its English.
"""

from __future__ import annotations

from collections.abc import Mapping

import regex

_UNSPACED = r"\p{Han}\p{Hiragana}\p{Katakana}\p{Thai}\p{Lao}\p{Khmer}\p{Myanmar}"
_WORD_RE = regex.compile(
    rf"(?P<unspaced>[{_UNSPACED}]+)|(?:(?![{_UNSPACED}])[\p{{L}}\p{{M}}\p{{N}}])*\p{{L}}[\p{{L}}\p{{M}}\p{{N}}]*"
)
UNSPACED_CHARS_PER_WORD = 2


def count_words(text: str, limit: int | None = None) -> int:
    """Words in `text`; with `limit`, counting stops once past it (the step only needs to know
    whether a text is in a band: without it, counting a 2 KB document cost more than its language ID)."""
    words = 0
    for match in _WORD_RE.finditer(text):
        unspaced = match.group("unspaced")
        words += -(-len(unspaced) // UNSPACED_CHARS_PER_WORD) if unspaced else 1
        if limit is not None and words > limit:
            break
    return words


def band_min_score(words: int, by_words: Mapping[int, float], default: float) -> float:
    """The threshold of the narrowest band that holds `words` (bands: at most N words), else `default`."""
    for max_words in sorted(by_words):
        if words <= max_words:
            return by_words[max_words]
    return default
