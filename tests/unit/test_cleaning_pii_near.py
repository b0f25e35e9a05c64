"""pii_search.substitute_near (e-mail addresses searched only around each "@", IPv6 candidates around each
":") gives exactly pattern.sub's result: on generated texts dense in the patterns' characters, at the
bounds of the local part (64) and the domain (8 labels, 24-letter TLD) and of IPv6's 8 groups, with
matches back to back and invalid ones in between."""

from __future__ import annotations

import random
from collections import Counter

from platform_assets.cleaning import pii
from platform_assets.cleaning.pii import _EMAIL_RE, _IPV6_RE, _SEARCH_NEAR, Redactor
from platform_assets.cleaning.pii_search import substitute_near

_PIECES = ["a", "Z", "9", "_", ".", "-", "+", "%", "@", " ", "\n", "é", "x.y", "@@", "..", "com", "org",
           "a" * 63, "b" * 64, "c" * 65, "d" * 25, ".de", "-x", "@a.b", "(", "<", ">", ",", ":"]


def _address(rng: random.Random) -> str:
    local = "".join(rng.choice("abc.%+-_9") for _ in range(rng.choice([1, 5, 63, 64, 65])))
    labels = ["".join(rng.choice("ab9-") for _ in range(rng.choice([1, 3, 61, 62, 63, 64])))
              for _ in range(rng.choice([1, 2, 8, 9]))]
    tld = "".join(rng.choice("abcXY") for _ in range(rng.choice([1, 2, 24, 25])))
    return f"{local}@{'.'.join(labels)}.{tld}"


def _both(text: str, pattern=_EMAIL_RE) -> tuple[str, str]:
    def replace(m) -> str:  # every other match kept: invalid matches are consumed as sub consumes them
        return "<X>" if len(m.group(0)) % 2 else m.group(0)

    return pattern.sub(replace, text), substitute_near(text, pattern, replace, _SEARCH_NEAR[pattern])


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


_IPV6_PIECES = [":", "::", "a", "F", "9", "ffff", "12345", ".", " ", "\n", "x", "_", "1:2", "a:b:c", "::1",
                "fe80::1", "2001:db8::8a2e:370:7334", "1:2:3:4:5:6:7:8", "1:2:3:4:5:6:7:8:9", "é"]


def test_ipv6_candidates_the_same_as_sub():
    rng = random.Random(23)
    matched = 0
    for _ in range(4000):
        text = "".join(rng.choice(_IPV6_PIECES) for _ in range(rng.randint(0, 16)))
        expected, got = _both(text, _IPV6_RE)
        assert got == expected, repr(text)
        matched += _IPV6_RE.search(text) is not None
    assert matched > 500
    for text in ["1:2:3:4:5:6:7:8", "ffff:" * 7 + "ffff", "ffff:" * 8, ("a:b:c " + " " * 40) * 5,
                 "x" * 100 + "::1" + "y" * 100, "::", ":::", "1::2::3"]:
        expected, got = _both(text, _IPV6_RE)
        assert got == expected, text


def test_every_ipv4_candidate_holds_the_hint_that_gates_it():
    from platform_assets.cleaning.pii import _IPV4_HINT_RE, _IPV4_RE

    rng = random.Random(24)
    pieces = ["1", "22", "333", "4444", ".", "..", " ", "a", "v", "/", "٣", "1.2", "10.0.0.1", "1.2.3", "-"]
    candidates = 0
    for _ in range(6000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 14)))
        if _IPV4_RE.search(text):
            candidates += 1
            assert _IPV4_HINT_RE.search(text), text
    assert candidates > 300
    assert _IPV4_HINT_RE.search("version 1.2.3.4") and not _IPV4_HINT_RE.search("1.2.3 and 4.5")
