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
from functools import cache
from typing import Any

import numpy as np
import regex

from platform_assets.code_point_tables import class_bits

_UNSPACED = r"\p{Han}\p{Hiragana}\p{Katakana}\p{Thai}\p{Lao}\p{Khmer}\p{Myanmar}"
_WORD_RE = regex.compile(
    rf"(?P<unspaced>[{_UNSPACED}]+)|(?:(?![{_UNSPACED}])[\p{{L}}\p{{M}}\p{{N}}])*\p{{L}}[\p{{L}}\p{{M}}\p{{N}}]*"
)
UNSPACED_CHARS_PER_WORD = 2


def count_words(text: str, limit: int | None = None) -> int:
    """Words in `text` (the matches of _WORD_RE: :func:`count_words_by_regex`, as one compiled pass,
    language_kernels.word_count); with `limit`, counting stops once past it (the step only needs to
    know whether a text is in a band)."""
    kernel, classes, no_limit = _compiled_words()
    if text.isascii():
        chars = np.frombuffer(text.encode("ascii"), dtype=np.uint8)
    else:
        chars = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    return int(kernel(chars, classes, UNSPACED_CHARS_PER_WORD, no_limit if limit is None else limit))


@cache
def _compiled_words() -> tuple[Any, np.ndarray, int]:
    """(kernel, class bits per code point, the kernel's "no limit"), once per process (the kernels'
    module imports numba): the table is _WORD_RE's own character classes run over every code point
    of U+0000..U+10FFFF (1.1 MB)."""
    from platform_assets.cleaning import language_kernels as kernels

    kernels.load()
    classes = class_bits(((regex.compile(rf"[{_UNSPACED}]+"), kernels.UNSPACED_CHAR),
                          (regex.compile(r"\p{L}+"), kernels.LETTER_CHAR),
                          (regex.compile(r"[\p{L}\p{M}\p{N}]+"), kernels.WORD_CHAR)))
    return kernels.word_count, classes, kernels.NO_LIMIT


def load() -> None:
    """The compiled word count and its table, once per process: the language step calls it before its
    first batch."""
    _compiled_words()


def count_words_by_regex(text: str, limit: int | None = None) -> int:
    """count_words as the regex finds the words: the reference the compiled pass is tested against
    (two Han or kana characters make a word: UNSPACED_CHARS_PER_WORD)."""
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
