"""The blocklist's word screen for a whole batch in one pass of Arrow's RE2 (issue #13).

Blocklist.matches settles most texts with a substring test per listed first word on the case-folded
text: 21 memchr-speed scans of every text plus `str.casefold` (~0.05 CPU-s over cleaning_stage's 534
surviving documents, 3.9 MB, 310 of them not ASCII). Here one case-insensitive RE2 search of the
alternation over the batch's UTF-8 (~5 ms there) says which texts can hold one.

Why that is exact (a superset of the substring tests, never fewer): the screened words are ASCII. In
a text holding none of CASEFOLD_TO_ASCII (the characters whose `str.casefold` holds an ASCII
character: "ß" -> "ss", "ﬁ" -> "fi", "K" (Kelvin) -> "k", ...), every other non-ASCII character folds to
non-ASCII characters and every ASCII one to one ASCII character, so an ASCII word is a substring of
the folded text only inside a lower-cased run of the text's own ASCII characters, which RE2's
case-insensitive match finds (in UTF-8 an ASCII byte is always a character of its own). Texts holding
one of those characters are passed on as possible matches, and the exact test decides.
"""

from __future__ import annotations

import array
import re
import sys
from collections.abc import Sequence
from functools import cache

import pyarrow as pa
import pyarrow.compute as pc

_BLOCK = 4096


@cache
def casefold_to_ascii() -> str:
    """Every non-ASCII character (surrogates aside) whose str.casefold holds an ASCII character, in
    code point order: from this Python's Unicode tables, a block of 4,096 characters folded at once and
    looked at character by character only where the folded block holds ASCII (~15 ms, once)."""
    found: list[str] = []
    for lo in range(0x80, 0x110000, _BLOCK):
        codes = array.array("I", range(lo, min(lo + _BLOCK, 0x110000)))  # "I": 4 bytes on every platform we run
        block = codes.tobytes().decode("utf-32-le" if sys.byteorder == "little" else "utf-32-be", "surrogatepass")
        if _has_ascii(block.casefold()):
            found += [c for c in block if _has_ascii(c.casefold())]  # a lone surrogate folds to itself
    return "".join(found)


def load() -> None:
    """The character table, once per process (the step's load; the workers' forkserver, whose
    workers then have it)."""
    casefold_to_ascii()


def _has_ascii(text: str) -> bool:
    return re.search(r"[\x00-\x7f]", text) is not None


@cache
def screen_pattern(words: tuple[str, ...]) -> str | None:
    """The RE2 pattern that matches a text that may hold one of `words` once case-folded; None when a
    word is not ASCII (the argument above needs ASCII words) or there is none."""
    if not words or not all(w.isascii() for w in words):
        return None
    specials = "".join(f"\\x{{{ord(c):x}}}" for c in casefold_to_ascii())
    alternation = "|".join(re.escape(w) for w in words)
    return f"(?i:{alternation})" + (f"|[{specials}]" if specials else "")


def may_hold(texts: Sequence[str], words: tuple[str, ...]) -> list[bool] | None:
    """Per text: False if none of `words` (ASCII, case-folded) is a substring of text.casefold(); True
    if one may be. None when the screen does not apply (screen_pattern)."""
    pattern = screen_pattern(words)
    if pattern is None:
        return None
    return pc.match_substring_regex(pa.array(texts, pa.string()), pattern).to_pylist()
