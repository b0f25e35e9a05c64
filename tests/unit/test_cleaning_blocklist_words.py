"""The blocklist's word pass (cleaning/blocklist_words.py) against what it replaces: its words are
`regex.findall(r"\\w+")`'s on case-folded text of every kind of character the two could read apart
(combining marks, digits of other scripts, connector punctuation, joiners, symbols, text beyond the
BMP, which keeps `findall`); no listed word is missed by the hash screen; and Blocklist.matches gives
the word-by-word loop's answer on such text, limits included."""

from __future__ import annotations

import random

import numpy as np
import regex

from platform_assets.cleaning import blocklist_words
from platform_assets.cleaning.blocklist import Blocklist

# letters of several scripts, combining marks (Mn, Mc), digits (Nd of other scripts), connector
# punctuation, joiners and spaces of several kinds, symbols, and a character beyond the BMP
PIECES = ["porn", "Porn", "hot", "singles", "sex", "cam", "x_y", "a\u0301", "\u0915\u093f", "\u0e01\u0e34", "١٢٣",
          "‿", "\u200d", "\u00a0", " ", "\n", "-", "'", "’", ".", "😀", "ß", "ǅ", "Ⅻ", "²", "Σ", "ς", "İ", "_", "9",
          "ﬁ", "ℌ", "日本", "\u0301", "\U00010400"]


def _text(rng: random.Random, n: int) -> str:
    return "".join(rng.choice(PIECES) for _ in range(rng.randint(0, n)))


def test_the_words_are_findalls_and_the_screen_misses_no_wanted_word():
    rng = random.Random(51)
    wanted = {"porn", "hot", "x_y", "sex", "ss", "a\u0301", "١٢٣"}
    hashes = blocklist_words.wanted_hashes(wanted)
    beyond_bmp = compared = with_wanted = 0
    for _ in range(4000):
        folded = _text(rng, 14).casefold()
        expected = regex.findall(r"\w+", folded)
        words = blocklist_words.words_of(folded, hashes)
        if words is None:
            assert any(ord(c) > 0xFFFF for c in folded)
            beyond_bmp += 1
            continue
        got = [folded[a:b] for a, b in zip(words.starts, words.ends, strict=True)]
        assert got == expected, repr(folded)
        assert {i for i, w in enumerate(got) if w in wanted} <= set(words.candidates), repr(folded)
        assert all(blocklist_words.word_hash(got[i]) in set(hashes.tolist()) for i in words.candidates)
        compared += 1
        with_wanted += any(w in wanted for w in got)
    assert compared > 2500 and beyond_bmp > 100 and with_wanted > 300


def test_the_hash_is_the_kernels():
    words = ["porn", "ß", "日本", "a\u0301b", "x" * 40]
    hashes = blocklist_words.wanted_hashes(set(words))
    assert hashes.dtype == np.uint64 and list(hashes) == sorted(hashes)
    for w in words:
        found = blocklist_words.words_of(f"-- {w} --", hashes)
        assert found is not None and len(found.candidates) == 1, w


def _word_by_word(b: Blocklist, text: str, limit: int | None) -> list[str]:
    """Blocklist.matches as it was: every `regex` word of the folded text through the loop."""
    folded, found = text.casefold(), {}
    words = regex.findall(r"\w+", folded)
    for i, w in enumerate(words):
        if (w,) in b.single:
            found.setdefault(w)
        if w not in b.phrase_starts:
            continue
        for n in range(2, b.max_len + 1):
            gram = tuple(words[i: i + n])
            if len(gram) == n and gram in b.phrases.get(n, ()):
                found.setdefault(" ".join(gram))
        if limit is not None and len(found) >= limit:
            return list(found)
    for term in b.substrings:
        if term in folded:
            found.setdefault(term)
    return list(found)


def test_matches_give_the_word_by_word_answer_on_text_of_every_kind():
    rng = random.Random(52)
    b = Blocklist(["porn", "hot singles", "sex cam now", "x_y", "a\u0301", "日本"])
    hits = 0
    for _ in range(3000):
        text = _text(rng, 16)
        for limit in (None, 1, 2):
            expected = _word_by_word(b, text, limit)
            assert b.matches(text, limit=limit) == expected, (text, limit)
            hits += bool(expected)
    assert hits > 2000
