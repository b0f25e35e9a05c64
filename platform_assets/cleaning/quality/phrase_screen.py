"""Does an ASCII text hold one of C4's phrases once lower-cased? One compiled pass over its bytes
(issue #13), where c4.py lower-cased the text and searched it once per phrase group.

C4 asks this of every English document ("lorem ipsum", "javascript" and the policy phrases, after
citations are removed): on cleaning_stage's 961 ASCII documents (9.7 MB) `str.lower` and the five
substring searches took 26 ms, ~2.5% of the whole step list. Here the pair of bytes each byte ends is
looked up in a 64 Ki table of the pairs a phrase starts with, in either case; only there are the
phrases compared, lower-casing through a table. For ASCII, `str.lower` maps A-Z and nothing else, so the answer is
`any(p in text.lower() for p in phrases)` (tests/unit/test_cleaning_quality_phrase_screen.py compares
them); text with other characters keeps that form (their lower case can be ASCII: the Kelvin sign).
"""

from __future__ import annotations

from functools import lru_cache
from typing import NamedTuple

import numpy as np

from platform_assets.cleaning.quality.kernels import compiled

_LOWER = np.arange(256, dtype=np.uint8)
_LOWER[ord("A"): ord("Z") + 1] += 32


class PhraseTable(NamedTuple):
    """Lower-case ASCII phrases of two characters or more, in the form the kernel reads."""

    starts: np.ndarray
    """bool[65536]: some phrase starts with the pair of bytes (first << 8 | second) once lower-cased."""
    phrases: np.ndarray
    """uint8[n, longest]: the phrases' bytes, zero-padded."""
    lengths: np.ndarray
    """int64[n]."""


@lru_cache(maxsize=16)
def phrase_table(phrases: tuple[str, ...]) -> PhraseTable | None:
    """The table for `phrases`, or None where the kernel does not apply (none, one not lower-case
    ASCII, or shorter than two characters): the caller then searches the lower-cased text."""
    if not phrases or not all(p.isascii() and p == p.lower() and len(p) >= 2 for p in phrases):
        return None
    longest = max(map(len, phrases))
    table = np.zeros((len(phrases), longest), dtype=np.uint8)
    for i, p in enumerate(phrases):
        table[i, : len(p)] = np.frombuffer(p.encode("ascii"), dtype=np.uint8)
    starts = np.zeros(1 << 16, dtype=np.bool_)
    for p in phrases:  # the pair as it may stand in the text, in either case
        for first in {p[0], p[0].upper()}:
            for second in {p[1], p[1].upper()}:
                starts[(ord(first) << 8) | ord(second)] = True
    return PhraseTable(starts, table, np.array([len(p) for p in phrases], dtype=np.int64))


def holds_phrase(data: np.ndarray, table: PhraseTable) -> bool:
    """Is one of the table's phrases in the ASCII bytes `data` once A-Z are lower-cased?"""
    return bool(_holds_phrase(data, _LOWER, table.starts, table.phrases, table.lengths))


def load() -> None:
    """Compile or load from the cache the kernel, with the argument types c4.py passes (its bytes are
    a read-only view of the text's encoding, as array_vocab's), once per process."""
    table = phrase_table(("ab",))
    holds_phrase(np.frombuffer(b"xAb", dtype=np.uint8), table)


@compiled
def _holds_phrase(data, lower, starts, phrases, lengths):
    """holds_phrase over the bytes (compiled; callable as Python)."""
    n = data.size
    if n < 2:
        return False
    prev = np.int64(data[0])
    for i in range(1, n):
        cur = np.int64(data[i])
        if starts[(prev << 8) | cur]:  # the raw pair: no lower-casing on the way (1.35 -> 1.2 ns a byte)
            start = i - 1
            for p in range(lengths.size):
                length = lengths[p]
                if start + length > n:
                    continue
                k = 0
                while k < length and lower[data[start + k]] == phrases[p, k]:
                    k += 1
                if k == length:
                    return True
        prev = cur
    return False
