"""C4's phrase test as one compiled pass over an ASCII text's bytes (quality/phrase_screen.py) against
the form it replaces, `any(p in text.lower() for p in phrases)`: on generated text dense in the
phrases' pieces, in mixed case, cut short, at either end; and C4's whole check with the pass and
with the string form."""

from __future__ import annotations

import random
from collections import Counter

import numpy as np
import pytest

from platform_assets.cleaning import presets
from platform_assets.cleaning.quality import phrase_screen
from platform_assets.cleaning.quality.c4 import C4, C4Settings
from platform_assets.cleaning.quality.text_view import TextView

C4_PHRASES = ("lorem ipsum", "javascript", *presets.C4_POLICY_SUBSTRINGS)


def _bytes(text: str) -> np.ndarray:
    return np.frombuffer(text.encode("ascii"), dtype=np.uint8)


def _mixed_case(rng: random.Random, text: str) -> str:
    return "".join(c.upper() if rng.random() < 0.3 else c for c in text)


def test_the_pass_answers_as_the_lower_cased_substring_search():
    rng = random.Random(41)
    table = phrase_screen.phrase_table(C4_PHRASES)
    pieces = [" ", "\n", ".", "[1]", "use", "uses", "cookie", "cookies", "use of", "terms of", "privacy", "policy",
              "java", "script", "lorem", "ipsum", "of use", "us", "e ", "co", "ok", "Lorem Ipsu", "x", "THE"]
    pieces += [p[:cut] for p in C4_PHRASES for cut in (len(p) - 1, len(p))]
    held = 0
    for _ in range(5000):
        text = "".join(_mixed_case(rng, rng.choice(pieces)) for _ in range(rng.randint(0, 12)))
        expected = any(p in text.lower() for p in C4_PHRASES)
        assert phrase_screen.holds_phrase(_bytes(text), table) == expected, repr(text)
        held += expected
    assert 1000 < held < 4000
    for phrase in C4_PHRASES:  # alone, at either end, upper-cased, one character short
        for text in (phrase, f"x {phrase}", f"{phrase} x", phrase.upper(), phrase[:-1], phrase[1:]):
            assert phrase_screen.holds_phrase(_bytes(text), table) == (phrase in text.lower()), text
    assert not phrase_screen.holds_phrase(_bytes(""), table)
    assert not phrase_screen.holds_phrase(_bytes("j"), table)


@pytest.mark.parametrize("phrases", [(), ("a",), ("Lorem ipsum",), ("café",)])
def test_phrases_the_pass_cannot_take_leave_the_string_form(phrases):
    assert phrase_screen.phrase_table(phrases) is None


def test_c4_decides_the_same_with_the_pass_and_with_the_string_form(monkeypatch):
    """The whole check (removed lines, drops, rewritten text, counters) on documents with and without
    phrases, citations inside and around them, and non-ASCII text (which keeps the string form)."""
    rng = random.Random(42)
    lines = [
        "This is a sentence with enough words. It is kept. So is this one, and the next. And this.",
        "A second line of prose, with two sentences in it. Both of them count towards the five.",
        "We use cookies to make this site work for you and your friends.",
        "Please read the Terms of Use before you go on with this page today.",
        "The privacy[1] policy says nothing at all about the data we keep here.",
        "Enable JavaScript to see this page in full, as it was meant to be seen.",
        "Our cook[2]ie policy is the one below, read it as you would any other.",
        "Short line.",
        "Ein Satz mit Umlauten für die Übung, der genug Wörter hat, um zu bleiben.",
    ]
    documents = ["\n".join(rng.choice(lines) for _ in range(rng.randint(1, 10))) for _ in range(400)]
    documents += [doc.replace("Short line.", "Lorem ipsum dolor sit amet.") for doc in documents[:20]]
    rule = C4(C4Settings())

    def run_all():
        results = []
        for text in documents:
            counters: Counter[str] = Counter()
            outcome = rule.check(TextView(text), counters)
            results.append((outcome, dict(counters)))
        return results

    calls = Counter()
    real = phrase_screen.holds_phrase

    def counted(data, table):
        calls["pass"] += 1
        return real(data, table)

    monkeypatch.setattr(phrase_screen, "holds_phrase", counted)
    with_pass = run_all()
    monkeypatch.setattr(phrase_screen, "phrase_table", lambda phrases: None)
    string_form = run_all()
    assert with_pass == string_form
    assert calls["pass"] > 150  # the ASCII documents went through the pass
    kinds = Counter(type(outcome).__name__ for outcome, _ in with_pass)
    assert kinds["Drop"] > 50 and kinds["str"] > 50
