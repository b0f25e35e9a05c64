"""The faster kernels of the quality rules against the simple forms they replace (same tokens, same
vocabulary, same figures, bounds that never rule out a check that fires): issue #13's speed-up."""

from __future__ import annotations

import random

import numpy as np

from platform_assets.cleaning import presets
from platform_assets.cleaning.quality.ngrams import dup_ngram_chars as _dup_ngram_chars
from platform_assets.cleaning.quality.ngrams import later_occurrences as _later_occurrences
from platform_assets.cleaning.quality.ngrams import ngram_levels as _ngram_levels
from platform_assets.cleaning.quality.ngrams import repeat_bound as _repeat_bound
from platform_assets.cleaning.quality.ngrams import union_bound as _union_bound
from platform_assets.cleaning.quality.text_view import TextView, split_words


def test_union_bound_is_between_the_walk_and_the_sum():
    # the walk at level m counts disjoint m-grams at later occurrences of level n <= m: never more
    # than their union, which never exceeds the sum of their lengths
    rng = random.Random(13)
    for _ in range(400):
        words: list[str] = []
        while len(words) < rng.randint(5, 200):
            if words and rng.random() < 0.2:
                start = rng.randrange(len(words))
                words += words[start : start + rng.randint(1, 15)]
            else:
                words.append(rng.choice(["a", "bb", "ccc", "dd", "e", "fff"]))
        view = TextView(" ".join(words))
        cum = np.concatenate(([0], np.cumsum([len(w) for w in words])))
        levels = {level.n: level for level in _ngram_levels(view.vocab, 8)}
        for n, level in levels.items():
            starts = level.pos[_later_occurrences(level)]
            for m in range(n, 9):
                walked = _dup_ngram_chars(levels[m], cum, float("inf")) if m in levels else None
                union, total = _union_bound(starts, cum, m), _repeat_bound(starts, cum, m)
                assert (walked or 0) <= union <= total, (words, n, m)


def test_words_are_split_piecewise_around_non_ascii_lines():
    # `re` on the ASCII lines, `regex` on the others: the same tokens as `regex` on the whole text
    from platform_assets.cleaning.quality.text_view import _TOKEN_RE

    rng = random.Random(4)
    alphabet = [*"ab1_ -'’.\n\n\t,!é\u0301\u3000\xa0\u200d\x1c", "\U0001F600", "ü", "ab cd", "don't", "e.g."]
    texts = ["é" * 300 + "\n" + "a b " * 10, "x’y\n" * 400, "a\n" * 10 + "é", "é\n\na"]
    texts += ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 80))) for _ in range(20000)]
    for text in texts:
        assert split_words(text) == _TOKEN_RE.findall(text), repr(text)


def test_paragraphs_split_as_the_regex_does():
    import re

    from platform_assets.cleaning.quality.text_view import split_paragraphs

    rng = random.Random(6)
    for _ in range(20000):
        text = "".join(rng.choice(["a", "b", "\n", "\n", "\n", " ", "\t"]) for _ in range(rng.randint(0, 30)))
        assert split_paragraphs(text) == re.split(r"\n{2,}", text.strip()), repr(text)


def test_array_vocabulary_equals_the_regex_and_dict_one():
    # long texts take the array path (array_vocab.py): ASCII through byte tables, the rest of the BMP
    # through `regex`'s classes per code point; the reference is the token list + dict. Beyond the BMP
    # (the emoji) the regex path stays.
    from platform_assets.cleaning.quality.text_view import ARRAY_VOCAB_MIN_CHARS

    rng = random.Random(2)
    ascii_pieces = [*"ab_1 .-'\n\t,!\x1c\x00\x7f{}TH", "abcdefghij", "x.y", "don't", "...", "a-b", "The",
                    "THAT", "with", "HaVe", "3.14", "__init__"]
    other_pieces = [*"é’“”\u0301\u3000\xa0ÄΩж中\u212a\u200d", "naïve", "don’t", "\u212ahe", "\U0001F600"]
    stop_sets = [frozenset(presets.GOPHER_STOP_WORDS), frozenset(["that", "a-b"]), frozenset(["naïve", "the"]),
                 frozenset(["abcdefghij"]), frozenset(["khe"]), frozenset()]
    for i in range(900):
        pieces = ascii_pieces if i % 3 == 0 else ascii_pieces + other_pieces
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(ARRAY_VOCAB_MIN_CHARS, 1600)))
        ref, fast = TextView(text), TextView(text)
        ref.tokens  # noqa: B018 - tokens first: the regex and dict path
        a, b = ref.vocab, fast.vocab
        assert a.spans is None and (b.spans is not None) == (max(text) <= "\uffff")
        assert list(a.tokens) == list(b.tokens) and len(a.tokens) == len(b.tokens)
        for field in ("ids", "counts", "lengths", "first"):
            assert np.array_equal(getattr(a, field), getattr(b, field)), field
        sa, sb = ref.word_stats, fast.word_stats
        assert (sa.count, sa.chars) == (sb.count, sb.chars) and np.array_equal(sa.distinct_counts, sb.distinct_counts)
        assert np.array_equal(sa.has_letter(), sb.has_letter())
        for stop in stop_sets:
            assert sa.lowered_in(stop) == sb.lowered_in(stop), stop
        assert sb.distinct == sa.distinct and ref.n_tokens == fast.n_tokens


def test_c4_word_count_shortcut_equals_the_line_loop():
    from collections import Counter

    from platform_assets.cleaning.quality.c4 import C4, C4Settings

    rng = random.Random(21)
    pieces = ["The cat sat on the mat.", "Home", "a b", "one two three", "x" * 1200, "[1] cited here now",
              "uses cookies here ok", "javascript off", "lorem ipsum dolor", "{ code }", "   ", "\t", "Done!"]
    settings = [C4Settings(filter_no_terminal_punct=False, languages=None), C4Settings(languages=None),
                C4Settings(min_words_per_line=None, filter_no_terminal_punct=False, languages=None)]
    shortcut = 0
    for _ in range(3000):
        text = "\n".join(rng.choice(pieces) for _ in range(rng.randint(1, 12)))
        shortcut += not any(c in text for c in "[{") and "x" * 1001 not in text
        for s in settings:
            fast, slow = C4(s), C4(s)
            slow.fast_lines = False
            c1, c2 = Counter(), Counter()
            assert fast.check(TextView(text), c1) == slow.check(TextView(text), c2), text
            assert c1 == c2, text
    assert shortcut > 100  # the shortcut was taken often


def test_sentence_boundaries_match_the_lookbehind_first_patterns():
    # c4.py's boundary patterns start with their character class (scanned at C speed); the patterns
    # as first written started with the lookbehind: the same matches
    import re

    from platform_assets.cleaning.quality import c4

    first_written = {
        c4._SENTENCE_END_RE: re.compile(r"(?<![.!?…])[.!?…]++[\"'’”)\]]*+\s"),
        c4._INNER_SENTENCE_END_RE: re.compile(r"(?<![.!?…])[.!?…]++[\"'’”)\]]*+[^\S\n]"),
    }
    rng = random.Random(3)
    alphabet = list(".!?…\"'’”)] \n\tab")
    for _ in range(30000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 30)))
        for pattern, reference in first_written.items():
            assert pattern.findall(text) == reference.findall(text), repr(text)
