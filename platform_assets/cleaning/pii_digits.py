"""Whether a text can hold a card number or a phone number at all, in one compiled pass (numba) over
its code points (issue #13), so that pii.py runs those two digit-led patterns only where it can.

Every match of pii._CARD_RE is a chain of 13 or more digits (`re`'s \\d) with at most one space or
dash between two of them; every phone number that pii._phone_ok accepts holds 9 or more digits, and
every shape of pii._PHONE_RE puts at most three of ``) .-(`` between two of its digits. A text without
such a chain therefore has no card match and no valid phone match: pattern.sub would return it
unchanged with no hit, and is not run. Both patterns try their first class at every digit of the
text (~8 ns a character for `re`'s Unicode \\d: 0.029 and 0.039 CPU-s on the cleaning_stage benchmark's
534 texts, of which 21 hold a card chain and 133 a phone chain; the pii step 0.148 -> 0.110 CPU-s).

The pass also says where the chains are, and pii.py searches the two patterns only there
(pii_search.substitute_in_spans, which argues why that finds the same matches): the phone pattern on the
benchmark's 79 texts with a phone chain 25 -> 1.2 ms, the card pattern on its 25 with a card chain
7.6 -> 0.5 ms (loaded machine).
"""

from __future__ import annotations

import re
from functools import cache
from typing import Any, NamedTuple

import numpy as np

from platform_assets.code_point_tables import class_bits

CARD_MIN_DIGITS, CARD_MAX_GAP, CARD_GAP_CHARS = 13, 1, " -"
PHONE_MIN_DIGITS, PHONE_MAX_GAP, PHONE_GAP_CHARS = 9, 3, " .-()"


@cache
def _tables() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(is `re`'s \\d, per code point of U+0000..U+10FFFF; card gap characters, phone gap characters,
    per ASCII code point): \\d from the pattern itself (~0.03 s, once per process)."""
    digit = class_bits(((re.compile(r"\d"), 1),)).view(np.bool_)
    card_gap = np.zeros(128, dtype=np.bool_)
    card_gap[[ord(c) for c in CARD_GAP_CHARS]] = True
    phone_gap = np.zeros(128, dtype=np.bool_)
    phone_gap[[ord(c) for c in PHONE_GAP_CHARS]] = True
    return digit, card_gap, phone_gap


class DigitChains(NamedTuple):
    """Where a text's chains are: (start, end) of each, from its first digit to after its last."""

    card: list[tuple[int, int]]
    phone: list[tuple[int, int]]


def digit_chains(text: str) -> DigitChains:
    """The card and phone chains of `text` (an empty list: it can hold no card / phone number)."""
    if text.isascii():
        chars = np.frombuffer(text.encode("ascii"), dtype=np.uint8)
    else:
        chars = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    card, phone = _kernel()(chars, *_tables(), CARD_MIN_DIGITS, CARD_MAX_GAP, PHONE_MIN_DIGITS, PHONE_MAX_GAP)
    return DigitChains(list(map(tuple, card.tolist())), list(map(tuple, phone.tolist())))


def load() -> None:
    """The tables and the compiled kernel (from numba's cache), for both kinds of text, once per process."""
    digit_chains("1")
    digit_chains("é1")


@cache
def _kernel() -> Any:
    """chains compiled, on first use: numba (~0.15 s to import) stays out of this module's import,
    which the pipeline's pulls in."""
    from platform_assets.cleaning.quality.kernels import compiled

    return compiled(chains)


def chains(chars, digit, card_gap, phone_gap, card_min, card_max_gap, phone_min, phone_max_gap):
    """digit_chains over code points (compiled by _kernel; callable as Python): a chain is digits with
    at most `*_max_gap` gap characters between consecutive ones, `*_min` digits or more; as (start,
    end) rows, in order."""
    n = chars.size
    card = np.empty((n // card_min + 1, 2), dtype=np.int64)
    phone = np.empty((n // phone_min + 1, 2), dtype=np.int64)
    n_card = n_phone = 0
    card_run = phone_run = 0  # digits in the current chain
    card_start = phone_start = last_digit = -1
    card_since = phone_since = card_max_gap + phone_max_gap + 2  # characters since its last digit
    for i in range(n):
        c = chars[i]
        if digit[c]:
            if card_since <= card_max_gap:
                card_run += 1
            else:
                if card_run >= card_min:
                    card[n_card, 0], card[n_card, 1] = card_start, last_digit + 1
                    n_card += 1
                card_run, card_start = 1, i
            if phone_since <= phone_max_gap:
                phone_run += 1
            else:
                if phone_run >= phone_min:
                    phone[n_phone, 0], phone[n_phone, 1] = phone_start, last_digit + 1
                    n_phone += 1
                phone_run, phone_start = 1, i
            card_since = phone_since = 0
            last_digit = i
        else:
            # a character that is no gap breaks the chain: past any gap allowed
            card_since = card_since + 1 if c < 128 and card_gap[c] else card_max_gap + 1
            phone_since = phone_since + 1 if c < 128 and phone_gap[c] else phone_max_gap + 1
    if card_run >= card_min:
        card[n_card, 0], card[n_card, 1] = card_start, last_digit + 1
        n_card += 1
    if phone_run >= phone_min:
        phone[n_phone, 0], phone[n_phone, 1] = phone_start, last_digit + 1
        n_phone += 1
    return card[:n_card], phone[:n_phone]
