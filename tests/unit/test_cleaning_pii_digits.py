"""pii_digits' gate for the card and phone patterns: a text it turns away has no card match and no
valid phone match (so skipping pattern.sub changes nothing), and the redactor with the gate gives the
same text and counts as without it, on generated text dense in digits, separators, Unicode digits
(Arabic-Indic, fullwidth, astral), placeholders that hold digits, and at the chains' lengths."""

from __future__ import annotations

import random
from collections import Counter

from platform_assets.cleaning import pii
from platform_assets.cleaning.pii import _CARD_RE, _PHONE_RE, DigitChain, Redactor, _phone_ok
from platform_assets.cleaning.pii_digits import chains, digit_chains
from platform_assets.cleaning.settings import PiiSettings

_PIECES = ["1", "4", "0", "9", " ", "-", ".", "(", ")", "+", ",", "a", "\n", "/", "٣", "０", "𝟕", "é", "x",
           "4111 1111 1111 1111", "4111-1111-1111-1111", "+44 20 7946 0958", "(415) 555-0132", "415.555.0132",
           "020 7946 0958", "+1-415-555-0132", "1234567890123", "123456789012", "12345678", "123456789",
           "+33 1 23 45 67 89", "٤١١١٣٣٣٣٣٣٣٣٣٣٣٣", "０２０ ７９４６ ０９５８"]


def _ungated(settings: PiiSettings | None = None) -> Redactor:
    redactor = Redactor(settings)
    redactor.detectors = [(k, p, v, None if isinstance(n, DigitChain) else n, g)
                          for k, p, v, n, g in redactor.detectors]
    return redactor


def test_a_text_turned_away_has_no_card_and_no_valid_phone():
    rng = random.Random(31)
    turned_away = {0: 0, 1: 0}
    found = {0: 0, 1: 0}
    for _ in range(6000):
        text = "".join(rng.choice(_PIECES) for _ in range(rng.randint(0, 14)))
        card, phone = digit_chains(text)
        for spans, pattern in ((card, _CARD_RE), (phone, _PHONE_RE)):  # each match lies in one region
            for m in pattern.finditer(text):
                digits = [i for i in range(m.start(), m.end()) if text[i].isdigit()]
                inside = [(a, b) for a, b in spans if a - 1 <= m.start() and m.end() <= b + 1]
                if len(digits) >= (13 if pattern is _CARD_RE else 9):
                    assert inside, (repr(text), m.span(), spans)
        if not card:
            turned_away[0] += 1
            assert _CARD_RE.search(text) is None, repr(text)
        found[0] += _CARD_RE.search(text) is not None
        if not phone:
            turned_away[1] += 1
            assert not any(_phone_ok(m) for m in _PHONE_RE.finditer(text)), repr(text)
        found[1] += any(_phone_ok(m) for m in _PHONE_RE.finditer(text))
    assert min(turned_away.values()) > 500 and min(found.values()) > 500, (turned_away, found)


def _found(text: str) -> tuple[bool, bool]:
    card, phone = digit_chains(text)
    return bool(card), bool(phone)


def test_chains_at_their_lengths_and_the_python_form_agrees():
    assert _found("1" * 13) == (True, True) and _found("1" * 12) == (False, True)
    assert _found("1" * 8) == (False, False) and _found("1 2-3" + "4" * 6) == (False, True)
    assert _found("1-" * 12 + "1") == (True, True) and _found("1--" * 12 + "1") == (False, True)
    assert _found("1)-(" + "1" * 8) == (False, True)  # three gap characters: ") (" in "(415) 555"
    assert _found("1)-((" + "1" * 8) == (False, False)  # four break a phone chain
    assert _found("１" * 13) == (True, True)  # fullwidth digits are `re`'s \d too
    assert _found("1,2,3,4,5,6,7,8,9") == (False, False)
    # where they are: from the first digit to after the last, every chain of the text, in order
    text = "call +1 (415) 555-0132 or 4111 1111 1111 1111, ref 12345678 and ٣٣٣٣٣٣٣٣٣"
    assert digit_chains(text) == ([(26, 45)], [(6, 22), (26, 45), (64, 73)])
    assert digit_chains("12345678901234 x 98765432109876") == ([(0, 14), (17, 31)], [(0, 14), (17, 31)])
    import numpy as np

    from platform_assets.cleaning.pii_digits import _tables

    for text in ("4111 1111 1111 1111", "+44 20 7946 0958", "abc", "٣" * 9):
        points = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
        card, phone = chains(points, *_tables(), 13, 1, 9, 3)
        assert [list(map(tuple, card.tolist())), list(map(tuple, phone.tolist()))] == list(digit_chains(text))


def test_redaction_with_and_without_the_gate_is_the_same():
    rng = random.Random(32)
    settings = [None, PiiSettings(placeholder="{type}1111111111111"), PiiSettings(types=("PHONE", "CREDIT_CARD"))]
    redacted = 0
    for _ in range(3000):
        text = rng.choice(["", " ", "\n"]).join(rng.choice(_PIECES + ["a@b.co", "10.1.2.3", "8.8.8.8"])
                                                for _ in range(rng.randint(0, 16)))
        for s in settings:
            gated, plain = Redactor(s), _ungated(s)
            c1, c2 = Counter(), Counter()
            got = gated.redact(text, c1)
            assert got == plain.redact(text, c2) and c1 == c2, (repr(text), s)
            redacted += got[1] > 0
    assert redacted > 1000
    assert any(isinstance(d[3], DigitChain) for d in pii.Redactor().detectors)


def test_numbers_that_end_at_a_regions_edge_are_redacted_as_without_the_regions():
    """The chains' regions (pii_search.substitute_in_spans) reach one character past a phone number's last
    digit (its ")") and the patterns' two-character lookaheads past that: numbers followed by what the
    lookaheads read, next to other chains, and joined to them by one character."""
    numbers = ["+44 20 7946 (0958)", "+1 (415) 555-0132", "(415) 555-0132", "4111 1111 1111 1111", "020 7946 0958",
               "+33 1 23 45 67 89"]
    tails = ["", ".", ".5", ".a", ")", ")-", "-", "a", " 1", "x+44 20 7946 0958", "(0958)", "/4111111111111111"]
    heads = ["", "+", "(", "x", "1 ", "tel:", "+44 20 7946 0958x"]
    checked = 0
    for number in numbers:
        for head in heads:
            for tail in tails:
                text = f"{head}{number}{tail}"
                got, plain = Redactor().redact(text, Counter()), _ungated().redact(text, Counter())
                assert got == plain, repr(text)
                checked += got[1] > 0
    assert checked > 120
