"""Where pii.py's patterns are searched: the whole text (`re.sub`), windows around each occurrence of a
character or an anchor pattern that every match holds (substitute_near: e-mail addresses around "@",
IPv6 and IPv4 candidates and AWS secrets around their anchors, pii._SEARCH_NEAR), or the regions of
the digit chains that card and phone numbers are made of (substitute_in_spans, pii_digits). Each
finds the matches `re.sub` finds, where a replacement can happen: the functions' docstrings argue why,
and tests/unit/test_cleaning_pii_near.py, _anchors.py and _digits.py compare them with plain `sub`."""

from __future__ import annotations

import re
from collections.abc import Callable


def substitute(
    text: str,
    pattern: re.Pattern[str],
    valid: Callable[[re.Match[str]], bool] | None,
    group: int,
    placeholder: str,
    near: tuple[str, int, int] | None = None,
    spans: tuple[list[tuple[int, int]], int, int] | None = None,
) -> tuple[str, int]:
    """Replace the valid matches of `pattern` (or just their `group`) by `placeholder`; with `near`
    (pii._SEARCH_NEAR), searching only around that character's occurrences; with `spans` (a
    pii.DigitChain's chains, before, after), only around those (substitute_in_spans)."""
    hits = 0

    def replace(m: re.Match[str]) -> str:
        nonlocal hits
        if valid is not None and not valid(m):
            return m.group(0)
        hits += 1
        if group == 0:
            return placeholder
        whole, start = m.group(0), m.start(0)
        return whole[: m.start(group) - start] + placeholder + whole[m.end(group) - start :]

    # windows of (before + after) characters per occurrence: beyond one occurrence per window's width
    # they would cover the text more than once, where sub's scan is linear ("a@" * 1_000_000)
    if spans is not None:
        return substitute_in_spans(text, pattern, replace, *spans), hits
    if near is None or count_anchors(text, near[0]) * (near[1] + near[2]) > len(text):
        return pattern.sub(replace, text), hits
    return substitute_near(text, pattern, replace, near), hits


def count_anchors(text: str, anchor: str | re.Pattern[str]) -> int:
    return text.count(anchor) if isinstance(anchor, str) else sum(1 for _ in anchor.finditer(text))


def find_anchor(text: str, anchor: str | re.Pattern[str], pos: int) -> int:
    """The first anchor at or after `pos` (where the anchor pattern's match starts), or -1."""
    if isinstance(anchor, str):
        return text.find(anchor, pos)
    m = anchor.search(text, pos)
    return -1 if m is None else m.start()


def substitute_near(text: str, pattern: re.Pattern[str], replace: Callable[[re.Match[str]], str],
                     near: tuple[str | re.Pattern[str], int, int]) -> str:
    """pattern.sub(replace, text) for a pattern whose every match holds `near`'s character (or a match
    of its anchor pattern, the occurrence being where that starts), with at most `before` characters
    of the match before its first occurrence and `after` after it: the same matches, found by a search
    in a window around each occurrence.

    Why the same: sub takes, from the end of the previous match on, the leftmost match. A match whose
    first occurrence is i starts in [i - before, i], so a search from there (or from the previous
    match's end) finds it if there is one; none starts earlier (its first occurrence would be an
    earlier one, whose window found none). The window's end lies past every match that starts by i
    and past the character its final lookahead reads, so the search answers as over the whole text;
    a match it finds that starts after i is left to the later occurrence's window, and lookbehinds
    read before `pos`."""
    anchor, before, after = near
    out: list[str] = []
    copied = searched_to = 0  # text[:copied] is in `out`; the previous match ended at searched_to
    i = find_anchor(text, anchor, 0)
    while i >= 0:
        m = pattern.search(text, max(searched_to, i - before), min(len(text), i + after + 2))
        if m is not None and m.start() <= i:
            out += (text[copied:m.start()], replace(m))
            copied = searched_to = m.end()
            i = find_anchor(text, anchor, max(searched_to, i + 1))
        else:
            i = find_anchor(text, anchor, i + 1)
    if not out:
        return text
    out.append(text[copied:])
    return "".join(out)


# The most characters the digit patterns' final lookaheads read past a match: _CARD_RE's (?![ -]?\d|\w)
# and _PHONE_RE's (?![\w-]|\.\d) read two.
_LOOKAHEAD = 2


def substitute_in_spans(text: str, pattern: re.Pattern[str], replace: Callable[[re.Match[str]], str],
                         chains: list[tuple[int, int]], before: int, after: int) -> str:
    """pattern.sub(replace, text) for _CARD_RE and _PHONE_RE, given the text's chains of their kind
    (pii_digits; in order) and how far a match reaches before a chain's first digit and after its last:
    the regions [start - before, end + after) of the chains, overlapping ones joined, are searched from
    left to right as sub searches, each to `_LOOKAHEAD` characters past its end.

    Why the same replacements (pii_digits' docstring has the chains): a match that `replace` changes
    holds a chain's worth of digits (13 for a card, 9 for a valid phone number), and every match that
    holds one of a chain's digits holds only that chain's digits, since between two consecutive digits
    of a match stand at most the gap characters a chain allows; it lies in the chain's region: a card
    match starts and ends with a digit, a phone match has at most "+" or "(" before its first digit and
    ")" after its last. A match that holds no chain digit cannot reach into a region either: it would
    end with a digit or ")" right before the chain (one chain with it, then) or start with "+" or "("
    right after its last digit (which the patterns' first lookbehind refuses). So sub's matches in a
    region follow from the region's start alone, as the search here finds them; the matches outside
    every region change nothing (`replace` keeps them as they are)."""
    regions: list[list[int]] = []
    for start, end in chains:
        lo, hi = max(0, start - before), min(len(text), end + after)
        if regions and lo <= regions[-1][1]:
            regions[-1][1] = max(regions[-1][1], hi)
        else:
            regions.append([lo, hi])
    out: list[str] = []
    copied = 0  # text[:copied] is in `out`
    for lo, hi in regions:
        pos = max(lo, copied)
        while pos < hi:
            m = pattern.search(text, pos, min(len(text), hi + _LOOKAHEAD))
            if m is None or m.start() >= hi:
                break
            out += (text[copied:m.start()], replace(m))
            copied = pos = m.end()
    if not out:
        return text
    out.append(text[copied:])
    return "".join(out)
