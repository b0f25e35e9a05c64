"""PII patterns searched in windows around an anchor pattern's matches (pii._SEARCH_NEAR: IPv6
candidates around the colons that a second group follows, AWS secret names around "secret" in any
case, IPv4 candidates around their dotted hint) against pattern.sub, the form they replace: the same
text on generated input dense in colons, hex groups, digits and dots, case variants of "secret" (also
"ſ" and "K", which match `s` and `k` case-insensitively) and keys of 39-41 characters; and the
redactor's output with the windows against plain `sub`."""

from __future__ import annotations

import random
from collections import Counter

from platform_assets.cleaning import pii
from platform_assets.cleaning.pii import (
    _AWS_SECRET_KEY_RE,
    _IPV4_RE,
    _IPV6_RE,
    _SEARCH_NEAR,
    Redactor,
)
from platform_assets.cleaning.pii_search import substitute_near


def _both(text: str, pattern, keep_even: bool = True) -> tuple[str, str]:
    def replace(m) -> str:  # every other match kept: invalid matches are consumed as sub consumes them
        return m.group(0) if keep_even and len(m.group(0)) % 2 == 0 else f"<{m.start()}:{m.end()}>"

    return pattern.sub(replace, text), substitute_near(text, pattern, replace, _SEARCH_NEAR[pattern])


def _generated_texts_agree(rng: random.Random, pattern, pieces: list[str], most_pieces: int) -> int:
    """_both on 4,000 texts of up to `most_pieces` random pieces (asserting the same result on each);
    how many held a match."""
    matched = 0
    for _ in range(4000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, most_pieces)))
        expected, got = _both(text, pattern)
        assert got == expected, repr(text)
        matched += pattern.search(text) is not None
    return matched


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
    pieces = ["std::", "::", ":", "a", "f", "0", "1:2", "fe80::1", "2001:db8::8a2e:370:7334", "def f():", "\n",
              " ", "x:y:z", "12:30:45", "ffff:" * 3, "1:2:3:4:5:6:7:8", ":::", "é", "."]
    assert _generated_texts_agree(random.Random(32), _IPV6_RE, pieces, 20) > 1000


def test_ipv4_windows_on_text_dense_in_digits_and_dots():
    """IPv4 candidates searched around their hint (".d.d.d"): numbers, versions, dotted runs longer
    than an address, digits right before or after, and the two characters the final lookahead reads
    (".5", ".a") at every distance from the window's end."""
    pieces = ["1", "12", "123", "1234", ".", "..", "10.0.0.1", "192.168.1.254", "1.2.3.4.5", "v", "a", " ", "\n",
              "/", "-", ",", "256.1.1.1", "8.8.8.8.", "0", "é", "http://", "version 2.6.32.1"]
    assert _generated_texts_agree(random.Random(35), _IPV4_RE, pieces, 16) > 1000
    for ending in ("", ".", ".5", ".a", "a", "5", " ", ". "):
        for address in ("1.2.3.4", "123.123.123.123", "12.3.45.6"):
            text = f"x {address}{ending}"
            expected, got = _both(text, _IPV4_RE, keep_even=False)
            assert got == expected, text


def test_redaction_with_windows_equals_plain_sub(monkeypatch):
    rng = random.Random(33)
    texts = []
    for _ in range(300):
        texts.append(" ".join(rng.choice([
            "aws_secret_access_key = " + _key(rng, 40), "mail jane.doe@example.org", "host fe80::1 up",
            "2001:db8::8a2e:370:7334", "std::vector<int> x;", "SECRET: '" + _key(rng, 40) + "'", "plain words",
            "server 93.184.216.34.", "kernel 2.6.32.1", "10.0.0.12", "8.8.8.8.8", "at 203.0.113.7:8080",
        ]) for _ in range(rng.randint(1, 12))))
    with_windows = [Redactor().redact(t, Counter()) for t in texts]
    monkeypatch.setattr(pii, "_SEARCH_NEAR", {})
    plain = [Redactor().redact(t, Counter()) for t in texts]
    assert with_windows == plain
    assert sum(hits for _, hits in plain) > 300


def _ipv6_reference(candidate: str, redact_non_global: bool) -> bool:
    """The validator as it was: `ipaddress.ip_address` on every candidate, then the group rule."""
    import ipaddress

    try:
        ip = ipaddress.ip_address(candidate)
    except ValueError:
        return False
    if sum(1 for g in candidate.split(":") if g) < 3:
        return False
    return redact_non_global or ip.is_global


def test_ipv6_candidates_refused_before_parsing_are_those_the_parse_and_group_rule_refuse():
    """_ipv6_ok refuses times, MAC addresses and hex dumps by counting colons before `ipaddress` parses
    them: the same answer as parsing every candidate, on candidates the IPv6 pattern finds in text made
    of every shape it can match (1-8 groups, "::" anywhere or twice, empty groups, 5-hex-digit runs)."""
    from platform_assets.cleaning.settings import PiiSettings

    rng = random.Random(34)
    groups = ["", "0", "1", "ff", "db8", "2001", "fe80", "abcd", "ABCD", "12", "30", "45", "1a2b3"]
    validators = {flag: Redactor(PiiSettings(redact_non_global_ips=flag))._ipv6_ok for flag in (False, True)}
    seen, accepted = 0, Counter()
    for _ in range(10000):
        text = " " + ":".join(rng.choice(groups) for _ in range(rng.randint(2, 10))) + " "
        for m in _IPV6_RE.finditer(text):
            seen += 1
            for flag, valid in validators.items():
                expected = _ipv6_reference(m.group(0), flag)
                assert valid(m) == expected, (m.group(0), flag)
                accepted[flag] += expected
    assert seen > 4000 and accepted[False] > 100 and accepted[True] > accepted[False]
