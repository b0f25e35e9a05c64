"""The words of a case-folded text that may be listed words, from one compiled pass over its
characters (issue #13): no string per word.

Blocklist.matches split every text that the substring screen let through into words with
`regex.findall(r"\\w+")` (`re` on ASCII text) and looked them up in sets: on cleaning_stage's 52 such
texts (40 not ASCII, 0.9 MB) ~35 ms, ~3% of the whole step list, most of it the `regex` engine and a
string per word. Here a word is a maximal run of word characters, their kinds from array_vocab's
tables (ASCII: `[0-9A-Za-z_]`; the rest of the BMP: the `regex` module's own \\w per code point, so the
runs are exactly `findall`'s words); each run's FNV-1a hash over its code points is looked up among the
hashes of the listed first words, and only those words, and the words after a phrase's first word,
become strings (tests/unit/test_cleaning_blocklist_words.py compares them with `findall`). Text beyond
the BMP keeps `findall`.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from platform_assets.cleaning.quality.array_vocab import code_points
from platform_assets.cleaning.quality.array_vocab import load as load_tables
from platform_assets.cleaning.quality.kernels import WORD, compiled

_FNV_OFFSET = 0xCBF29CE484222325
_FNV_PRIME = 0x100000001B3
_MASK = (1 << 64) - 1
_FNV_OFFSET_U64, _FNV_PRIME_U64 = np.uint64(_FNV_OFFSET), np.uint64(_FNV_PRIME)  # the kernel's


class Words(NamedTuple):
    """A text's words as character ranges, and which of them hash like a wanted word."""

    starts: list[int]
    ends: list[int]
    candidates: list[int]
    """Indices of the words whose hash is a wanted word's (equal strings, or a collision)."""


def word_hash(word: str) -> int:
    """FNV-1a over the word's code points, as the kernel hashes a run (64-bit)."""
    h = _FNV_OFFSET
    for c in word:
        h = ((h ^ ord(c)) * _FNV_PRIME) & _MASK
    return h


def wanted_hashes(words: frozenset[str] | set[str]) -> np.ndarray:
    """The sorted hashes of `words`, as `words_of` takes them."""
    return np.array(sorted({word_hash(w) for w in words}), dtype=np.uint64)


def words_of(folded: str, hashes: np.ndarray) -> Words | None:
    """The words of `folded` (a case-folded text) and those among them that hash like one of `hashes`;
    None beyond the BMP, where the caller splits with the regex."""
    points = code_points(folded)
    if points is None:
        return None
    starts, ends, candidates = _word_runs(points.chars, points.kinds, hashes)
    return Words(starts.tolist(), ends.tolist(), candidates.tolist())


def load() -> None:
    """array_vocab's tables and the kernel, for ASCII and BMP text (the blocklist step's load)."""
    load_tables()
    hashes = wanted_hashes({"ab"})
    words_of("ab cd", hashes)
    words_of("ab cé", hashes)


@compiled
def _word_runs(chars, kinds, hashes):
    """(starts, ends) of the maximal runs of WORD characters, and the indices of those whose FNV-1a
    hash is in the sorted `hashes` (compiled; callable as Python)."""
    n = chars.size
    starts = np.empty(n // 2 + 1, dtype=np.int64)  # runs and the gaps between them alternate
    ends = np.empty(n // 2 + 1, dtype=np.int64)
    candidates = np.empty(n // 2 + 1, dtype=np.int64)
    k = 0
    c = 0
    i = 0
    while i < n:
        if kinds[chars[i]] != WORD:
            i += 1
            continue
        h = _FNV_OFFSET_U64
        j = i
        while j < n and kinds[chars[j]] == WORD:
            h = (h ^ np.uint64(chars[j])) * _FNV_PRIME_U64
            j += 1
        starts[k], ends[k] = i, j
        at = np.searchsorted(hashes, h)
        if at < hashes.size and hashes[at] == h:
            candidates[c] = k
            c += 1
        k += 1
        i = j + 1  # chars[j] ends the run: not a word character
    return starts[:k], ends[:k], candidates[:c]
