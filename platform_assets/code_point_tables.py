"""Tables indexed by code point, built by running a regex's own character classes over every code
point, so that a compiled pass reading the table answers exactly as the regex would.

Cleaning replaces regex searches by one pass over a text's code points (language scripts and word
counts, the normalize scans, PII digit chains, the quality rules' token kinds): each pass reads a
per-code-point table, and each table comes from the pattern it replaces rather than from a
hand-written list of ranges, so a new Unicode version of `re` or `regex` moves both together.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

UNICODE_END = 0x110000  # one past U+10FFFF
BMP_END = 0x10000  # one past U+FFFF


def every_code_point(end: int = UNICODE_END) -> str:
    """U+0000..end-1 in order, lone surrogates included: a match's positions in it are its code
    points (0.01 s and 4.4 MB for all of Unicode: made when asked, not kept)."""
    return np.arange(end, dtype=np.uint32).tobytes().decode("utf-32-le", "surrogatepass")


def class_bits(classes: Iterable[tuple[Any, int]], end: int = UNICODE_END) -> np.ndarray:
    """uint8 per code point below `end`: the OR of the bit of every (compiled `re` or `regex`
    pattern, bit) whose matches over every_code_point(end) cover it. Meant for patterns that are
    character classes (one class, or a run of one): a pattern that looks around or spans several
    classes marks whatever its matches over that one string cover."""
    chars = every_code_point(end)
    table = np.zeros(end, dtype=np.uint8)
    for pattern, bit in classes:
        for match in pattern.finditer(chars):
            table[match.start():match.end()] |= bit
    return table
