"""Faster forms in the normalize step (issue #13) against the regex passes they replace: the same text
on adversarial and random input (every space separator, neighbours of the class, CJK's ideographic
space which stays, accented and mojibake text, empty)."""

from __future__ import annotations

import random

from platform_assets.cleaning import normalize


def test_space_separators_are_the_class_of_the_regex():
    every_bmp_char = "".join(map(chr, range(0xD800))) + "".join(map(chr, range(0xE000, 0x10000)))
    assert "".join(normalize._space_separators()) == "".join(normalize._SPACES_RE.findall(every_bmp_char))


def test_replace_spaces_equals_the_regex_substitution():
    rng = random.Random(9)
    pieces = [*normalize._space_separators(), "\u3000", "\u200b", "\u2028", "\u1680\u1680", " ", "\t", "\n", "a",
              "é", "Ã©", "â€™", "中文", "ж", "\U0001F600", "\x85", "\ufeff"]
    texts = ["", " ", "\xa0", "\xa0" * 50, "a\u2009b\u202fc", "\u3000\u205f"]
    texts += ["".join(rng.choice(pieces) for _ in range(rng.randint(0, 40))) for _ in range(5000)]
    changed = 0
    for text in texts:
        expected = normalize._SPACES_RE.sub(" ", text)
        assert normalize._replace_spaces(text) == expected, repr(text)
        changed += expected != text
    assert changed > 3000
