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


def _badness_texts(rng: random.Random, count: int) -> list[str]:
    """Mojibake (UTF-8 read in the codecs ftfy repairs), the pattern's own characters, accented and
    Cyrillic prose, ASCII, a lone surrogate, text that starts with a match (BADNESS_RE's "^" branch)."""
    words = ["café", "naïve", "Zürich", "łódź", "żółć", "привет", "Ελλάδα", "“quoted”", "—", "…", "€5", "™", "½"]
    mojibake = [w.encode("utf-8").decode(codec, errors="replace") for w in words
                for codec in ("latin-1", "cp1252", "cp1251", "mac_roman", "cp437", "iso-8859-2")]
    pattern_chars = sorted({ch for ch in "".join(map(chr, range(0x80, 0x3000)))
                            if normalize.BADNESS_RE.search("a" + ch + "b") or normalize.BADNESS_RE.search(ch)})
    clean = words + list("abc xyz.,\n\t1A") + ["\ud800", "\u00a0", "中文", "é", "ł", "В", "Ã", "â€"]
    texts = ["", "é", "Ã©", "â€™", "\ud800Ã©"] + [m + " tail" for m in mojibake]
    for _ in range(count):
        pick = [rng.choice(mojibake) if (r := rng.random()) < 0.02 else rng.choice(pattern_chars) if r < 0.08
                else rng.choice(clean) for _ in range(rng.randint(0, 30))]
        texts.append("".join(pick))
    return texts


def test_compiled_badness_equals_ftfy_is_bad():
    from ftfy.badness import is_bad

    from platform_assets.cleaning import normalize_badness

    assert normalize_badness.matcher() is not None  # ftfy's pattern has the shape the kernel reads
    rng = random.Random(12)
    bad = 0
    for text in _badness_texts(rng, 20000):
        expected = is_bad(text)
        assert normalize_badness.is_bad(text) == expected, repr(text)
        assert normalize._is_bad_windows(text) == expected, repr(text)  # the fallback
        bad += expected
    assert 2000 < bad < 18000
    assert normalize_badness.is_bad("a\U0001F600Ã©") is None  # beyond the BMP: the windowed search
    assert normalize._is_bad("a\U0001F600Ã©") is True


def test_compiled_badness_refuses_other_shapes():
    import re

    from platform_assets.cleaning.normalize_badness import _sequences

    assert _sequences(re.compile("a+|b")) is None  # unbounded repeat
    assert _sequences(re.compile("(ab)|c")) is None  # a group
    assert _sequences(re.compile("ab")) is None  # not an alternation
    assert _sequences(re.compile("x|a$")) is None  # an anchor other than a leading "^"
    sequences, at_start = _sequences(re.compile("^a[bc]?|d"))
    assert len(sequences) == 3 and at_start == [True, True, False]
