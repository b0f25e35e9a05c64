"""PII patterns searched in windows around an anchor pattern's matches (pii._SEARCH_NEAR: IPv6
candidates around the colons that a second group follows, AWS secret names around "secret" in any
case) against pattern.sub, the form they replace: the same text on generated input dense in colons,
hex groups, case variants of "secret" (also "ſ" and "K", which match `s` and `k` case-insensitively)
and keys of 39-41 characters; and the redactor's output with the windows against plain `sub`."""

from __future__ import annotations

import random
from collections import Counter

from platform_assets.cleaning import pii
from platform_assets.cleaning.pii import _AWS_SECRET_KEY_RE, _IPV6_RE, _SEARCH_NEAR, Redactor, _substitute_near


def _both(text: str, pattern, keep_even: bool = True) -> tuple[str, str]:
    def replace(m) -> str:  # every other match kept: invalid matches are consumed as sub consumes them
        return m.group(0) if keep_even and len(m.group(0)) % 2 == 0 else f"<{m.start()}:{m.end()}>"

    return pattern.sub(replace, text), _substitute_near(text, pattern, replace, _SEARCH_NEAR[pattern])


def _key(rng: random.Random, n: int) -> str:
    return "".join(rng.choice("ABCxyz0189/+") for _ in range(n))


def test_aws_secret_windows_equal_sub():
    rng = random.Random(31)
    names = ["secret", "SECRET", "sEcReT", "ſecret", "Secret_Access_Key", "aws_secret_access_key", "AWS-SECRET-KEY",
             "secretkey", "aws_secret", "secret_key", "SECRET_KEY", "secret_\u212aey", "awssecretaccesskey"]
    pieces = [" ", "\n", "=", ":", '"', "'", "\t", "x", "aws", "_", "-", "key", "é", "secret secret", "+", "/"]
    matched = 0
    for _ in range(4000):
        parts = []
        for _ in range(rng.randint(0, 8)):
            if rng.random() < 0.5:
                parts.append(rng.choice(pieces))
            else:
                sep = rng.choice(["=", " = ", ": ", '": "', "\t=\t", "='", ":  '"])
                parts.append(rng.choice(names) + sep + _key(rng, rng.choice([39, 40, 41])))
        text = "".join(parts)
        expected, got = _both(text, _AWS_SECRET_KEY_RE)
        assert got == expected, repr(text)
        matched += _AWS_SECRET_KEY_RE.search(text) is not None
    assert matched > 500
    # the longest name and separators: the window must reach the character after a 40-character key
    for name in ("aws_secret_access_key", "AWS-SECRET-ACCESS-KEY", "secret"):
        for quote in ('"', "'"):
            for n in (39, 40, 41, 42):
                text = f"{name}{quote}     =     {quote}{_key(rng, n)} tail"
                expected, got = _both(text, _AWS_SECRET_KEY_RE, keep_even=False)
                assert got == expected, text


def test_ipv6_windows_on_code_dense_in_colons():
    rng = random.Random(32)
    pieces = ["std::", "::", ":", "a", "f", "0", "1:2", "fe80::1", "2001:db8::8a2e:370:7334", "def f():", "\n",
              " ", "x:y:z", "12:30:45", "ffff:" * 3, "1:2:3:4:5:6:7:8", ":::", "é", "."]
    matched = 0
    for _ in range(4000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 20)))
        expected, got = _both(text, _IPV6_RE)
        assert got == expected, repr(text)
        matched += _IPV6_RE.search(text) is not None
    assert matched > 1000


def test_redaction_with_windows_equals_plain_sub(monkeypatch):
    rng = random.Random(33)
    texts = []
    for _ in range(300):
        texts.append(" ".join(rng.choice([
            "aws_secret_access_key = " + _key(rng, 40), "mail jane.doe@example.org", "host fe80::1 up",
            "2001:db8::8a2e:370:7334", "std::vector<int> x;", "SECRET: '" + _key(rng, 40) + "'", "plain words",
        ]) for _ in range(rng.randint(1, 12))))
    with_windows = [Redactor().redact(t, Counter()) for t in texts]
    monkeypatch.setattr(pii, "_SEARCH_NEAR", {})
    plain = [Redactor().redact(t, Counter()) for t in texts]
    assert with_windows == plain
    assert sum(hits for _, hits in plain) > 300
