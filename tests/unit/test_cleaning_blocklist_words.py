"""The blocklist's word pass (cleaning/blocklist_words.py) against what it replaces: its words are
`regex.findall(r"\\w+")`'s on case-folded text of every kind of character the two could read apart
(combining marks, digits of other scripts, connector punctuation, joiners, symbols, text beyond the
BMP, which keeps `findall`); no listed word is missed by the hash screen; and Blocklist.matches gives
the word-by-word loop's answer (test_cleaning_pii_blocklist's reference) on such text, limits included."""

from __future__ import annotations

import random

import numpy as np
import regex
from test_cleaning_pii_blocklist import _matches_word_by_word

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


def test_matches_give_the_word_by_word_answer_on_text_of_every_kind():
    rng = random.Random(52)
    b = Blocklist(["porn", "hot singles", "sex cam now", "x_y", "a\u0301", "日本"])
    hits = 0
    for _ in range(3000):
        text = _text(rng, 16)
        for limit in (None, 1, 2):
            expected = _matches_word_by_word(b, text, limit)
            assert b.matches(text, limit=limit) == expected, (text, limit)
            hits += bool(expected)
    assert hits > 2000
