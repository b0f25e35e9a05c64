"""normalize._is_bad searches ftfy's BADNESS_RE only around runs of its anchor characters (one per
alternative, normalize._badness_anchors): it must answer as ftfy's is_bad on every alternative of the
pattern, wherever the match sits in a text, and on random mixtures of the pattern's characters."""

from __future__ import annotations

import random
import re._constants as c

from ftfy.badness import is_bad

from platform_assets.cleaning import normalize
from platform_assets.cleaning.normalize import _BADNESS_RADIUS, _badness_alternatives, _is_bad

_CONTEXT = list("abc xyz.,\n\t1A") + ["é", "ł", "В", "ж", "”", "«", "—", "\u00a0", "中"]


def _choices(op, av) -> list[str]:
    """Characters that one position of an alternative matches (a sample for the unbounded classes)."""
    if op is c.LITERAL:
        return [chr(av)]
    if op is c.IN:
        if av and av[0][0] is c.NEGATE:
            return ["1", " ", "é"]
        out: list[str] = []
        for kind, v in av:
            if kind is c.LITERAL:
                out.append(chr(v))
            elif kind is c.RANGE:
                out += [chr(v[0]), chr(v[1]), chr((v[0] + v[1]) // 2)]
            elif kind is c.CATEGORY:
                out += [" ", "a", "7"] if v is not c.CATEGORY_SPACE else [" ", "\n"]
        return out
    if op is c.ANY:
        return ["a", "é", " "]
    if op is c.CATEGORY:
        return [" ", "a"]
    raise AssertionError(f"unexpected {op}")


def _sample(branch, rng: random.Random) -> str:
    out = []
    for op, av in branch:
        if op is c.AT:
            continue
        if op in (c.MAX_REPEAT, c.MIN_REPEAT):
            lo, hi, inner = av
            out += [rng.choice(_choices(*inner[0])) for _ in range(rng.randint(lo, min(hi, lo + 2)))]
        else:
            out.append(rng.choice(_choices(op, av)))
    return "".join(out)


def test_the_anchor_search_is_in_use():
    assert normalize._BADNESS_RADIUS is not None
    assert normalize._BADNESS_ANCHOR_RE.pattern != r"[^\x00-\x7f]+"  # ftfy's pattern kept its shape
    assert not normalize._BADNESS_ANCHOR_RE.search("plain ASCII text, ‘quotes’ and — dashes …, жизнь")


def test_every_alternative_is_found_wherever_it_sits():
    branches = _badness_alternatives()
    rng = random.Random(13)
    found = 0
    for branch in branches:
        for _ in range(40):
            piece = _sample(branch, rng)
            before = "".join(rng.choice(_CONTEXT) for _ in range(rng.randint(0, 12)))
            after = "".join(rng.choice(_CONTEXT) for _ in range(rng.randint(0, 12)))
            for text in (piece, before + piece, piece + after, before + piece + after):
                assert _is_bad(text) == is_bad(text), (branch, text)
                found += is_bad(text)
    assert found > 40 * len(branches)  # most samples do match: the alternatives were exercised


def _agreements(rng: random.Random, rare: list[str], common: list[str], share: float, max_len: int) -> int:
    """20,000 random texts of up to `max_len` characters, each `share` of them from `rare`: _is_bad
    answers as is_bad on every one; how many are bad."""
    found = 0
    for _ in range(20000):
        text = "".join(rng.choice(rare) if rng.random() < share else rng.choice(common)
                       for _ in range(rng.randint(0, max_len)))
        assert _is_bad(text) == is_bad(text), repr(text)
        found += is_bad(text)
    return found


def test_random_mixtures_of_the_patterns_characters():
    alphabet = sorted({ch for branch in _badness_alternatives() for op, av in branch if op in (c.LITERAL, c.IN)
                       for ch in _choices(op, av)})
    assert 1000 < _agreements(random.Random(14), alphabet, _CONTEXT, 0.3, 40) < 19000


def test_mojibake_text_and_ascii_mixtures():
    # ftfy's BADNESS_RE has the shape the windowed search needs (else normalize falls back to is_bad)
    assert _BADNESS_RADIUS is not None and 2 <= _BADNESS_RADIUS <= 10
    other = [*"ÃÂâ€œ™ÐÎØÙàéÅ×²³√≈‚ÄВГРСЂўЂ°µ¢£ŸŠ®Œœ\xa0\xad", "ГўВЂВ", "Ã ", "\x85", "Ã©", "â€™"]
    found = _agreements(random.Random(10), other, list("abcxyz .,?!\n\t1A"), 0.06, 60)
    assert 2000 < found < 18000  # both answers well represented
