"""pii._substitute_near (an e-mail address searched only around each "@") gives exactly pattern.sub's
result: on generated texts dense in the pattern's characters, at the bounds of the local part (64) and
the domain (8 labels, 24-letter TLD), with matches back to back and invalid ones in between."""

from __future__ import annotations

import random
from collections import Counter

from platform_assets.cleaning import pii
from platform_assets.cleaning.pii import _EMAIL_RE, _SEARCH_NEAR, Redactor, _substitute_near

_PIECES = ["a", "Z", "9", "_", ".", "-", "+", "%", "@", " ", "\n", "é", "x.y", "@@", "..", "com", "org",
           "a" * 63, "b" * 64, "c" * 65, "d" * 25, ".de", "-x", "@a.b", "(", "<", ">", ",", ":"]


def _address(rng: random.Random) -> str:
    local = "".join(rng.choice("abc.%+-_9") for _ in range(rng.choice([1, 5, 63, 64, 65])))
    labels = ["".join(rng.choice("ab9-") for _ in range(rng.choice([1, 3, 61, 62, 63, 64])))
              for _ in range(rng.choice([1, 2, 8, 9]))]
    tld = "".join(rng.choice("abcXY") for _ in range(rng.choice([1, 2, 24, 25])))
    return f"{local}@{'.'.join(labels)}.{tld}"


def _both(text: str) -> tuple[str, str]:
    def replace(m) -> str:  # every other match kept: invalid matches are consumed as sub consumes them
        return "<EMAIL>" if len(m.group(0)) % 2 else m.group(0)

    return _EMAIL_RE.sub(replace, text), _substitute_near(text, _EMAIL_RE, replace, _SEARCH_NEAR[_EMAIL_RE])


def test_the_same_result_as_sub_on_generated_text():
    rng = random.Random(21)
    matched = replaced = 0
    for _ in range(3000):
        parts = [rng.choice(_PIECES) if rng.random() < 0.7 else _address(rng) for _ in range(rng.randint(0, 12))]
        text = "".join(parts) if rng.random() < 0.5 else rng.choice(["", " ", "\n"]).join(parts)
        expected, got = _both(text)
        assert got == expected, repr(text)
        matched += _EMAIL_RE.search(text) is not None
        replaced += got != text
    assert matched > 200 and replaced > 50  # addresses were found and replaced, not only missed


def test_back_to_back_addresses_and_window_edges():
    longest_domain = ".".join(["x" * 63] * 8) + "." + "y" * 24
    for text in ["a@b.cd", "a@b.cd@e.fg", "a@b.cd,e@f.gh", "x" * 64 + "@b.cd", "x" * 65 + "@b.cd",
                 "u@" + longest_domain, "u@" + longest_domain + "z", "u@" + longest_domain + "-",
                 "@b.cd a@", "a@b.c" * 50, ("é" + "a@b.cd") * 20, "a@b.cd" + " " * 600 + "e@f.gh"]:
        expected, got = _both(text)
        assert got == expected, text


def test_redaction_counts_are_unchanged():
    rng = random.Random(22)
    text = " ".join(_address(rng) for _ in range(200))
    counters: Counter[str] = Counter()
    redacted, hits = Redactor().redact(text, counters)
    assert hits == counters["EMAIL"] == text.count("@") - _EMAIL_RE.sub("", text).count("@")
    assert redacted.count("<EMAIL>") == counters["EMAIL"]
    assert pii.redact("write to jane.doe@example.org today") == "write to <EMAIL> today"
