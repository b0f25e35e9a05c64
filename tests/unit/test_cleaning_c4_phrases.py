"""C4's phrase screen searches a word that several phrases share before the phrases themselves
(quality/c4.group_by_shared_word): the same answer as searching every phrase."""

from __future__ import annotations

import random

from platform_assets.cleaning import presets
from platform_assets.cleaning.quality.c4 import C4, group_by_shared_word, holds_any

PHRASES = ("lorem ipsum", "javascript", *presets.C4_POLICY_SUBSTRINGS)


def test_groups_cover_every_phrase_under_a_word_it_contains():
    groups = group_by_shared_word(PHRASES)
    assert sorted(p for _, ps in groups for p in ps) == sorted(PHRASES)
    assert all(word in p for word, ps in groups for p in ps)
    assert len(groups) < len(PHRASES)  # "cookie" is shared: fewer searches than phrases
    assert C4()._phrase_groups == groups


def test_the_same_answer_as_searching_every_phrase():
    groups = group_by_shared_word(PHRASES)
    pieces = [*PHRASES, "cookie", "cookies", "policy", "use", "terms", "lorem", "java", "script", " ", "x",
              "privacy", "of", "uses"]
    rng = random.Random(31)
    held = 0
    for _ in range(5000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 6)))
        # cut a phrase in two now and then: a shared word present, the phrase not
        text = text[rng.randint(0, 3):]
        expected = any(p in text for p in PHRASES)
        assert holds_any(text, groups) == expected, text
        held += expected
    assert 500 < held < 4500
