"""One compiled pass (numba) that tells the normalize step which of its regex passes can change a
non-ASCII text (issue #13).

normalize.py decided that with up to five regex searches per non-ASCII document (C1 controls and ESC,
a mojibake bigram, space separators, control characters, line breaks): ~0.19 CPU-s under cProfile on
the cleaning_stage benchmark (596 non-ASCII documents), each search trying a character class at every
position. Here one pass over the code points ORs a flag per code point from a table built by running
those same regexes over every BMP character (none of their classes holds a character beyond it), so
the answers are the regexes' own: 0.02 CPU-s (the step: 0.44 -> 0.29 CPU-s, benchmark medians).
Tested against them in tests/unit/test_cleaning_normalize_scan.py.
"""

from __future__ import annotations

import re
from functools import cache

import numpy as np

NEEDS_FTFY = 1  # a C1 control or ESC: normalize._NEEDS_FTFY_RE
MOJIBAKE_LEAD = 2  # the first character of a mojibake bigram (normalize._mojibake_bigrams)
MOJIBAKE_CONT = 4  # its second character
MOJIBAKE = 8  # scan() only: a lead followed by a continuation (the bigram regex matches)
SPACE = 16  # normalize._SPACES_RE
CONTROL = 32  # normalize._CONTROL_RE, NEL (U+0085) left out: see NEL
LINE_BREAK = 64  # a character normalize._LINE_BREAK_RE replaces
NEL = 128  # U+0085: a control character and a line break; whitespace normalisation turns it into "\n"
_BMP = 0x10000


def char_flags(needs_ftfy: re.Pattern[str], lead: re.Pattern[str], cont: re.Pattern[str], spaces: re.Pattern[str],
               controls: re.Pattern[str], line_breaks: re.Pattern[str]) -> np.ndarray:
    """The flag of every BMP code point, from single-character regexes (each matched over all of them)."""
    table = np.zeros(_BMP, dtype=np.uint8)
    every_char = np.arange(_BMP, dtype=np.uint32).tobytes().decode("utf-32-le", "surrogatepass")
    for pattern, flag in ((needs_ftfy, NEEDS_FTFY), (lead, MOJIBAKE_LEAD), (cont, MOJIBAKE_CONT),
                          (spaces, SPACE), (controls, CONTROL), (line_breaks, LINE_BREAK)):
        hits = [m.start() for m in pattern.finditer(every_char)]
        table[hits] |= flag
    table[0x85] = (int(table[0x85]) & ~CONTROL) | NEL
    return table


def scan(text: str, table: np.ndarray) -> int:
    """The OR of the flags of `text`'s characters, with MOJIBAKE where a lead is followed by a
    continuation."""
    return _kernel()(np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32), table)


def load(table: np.ndarray) -> None:
    """Compile or load from the cache the kernel, with the argument types scan() passes."""
    scan("é", table)


@cache
def _kernel():
    """scan_flags compiled, on first use: numba (~0.15 s to import) stays out of this module's import,
    which the pipeline's, and so the cleaning settings', pulls in."""
    from platform_assets.cleaning.quality.kernels import compiled

    return compiled(scan_flags)


def scan_flags(chars, table):
    """scan() over code points (compiled by _kernel; callable as Python, as the tests do)."""
    flags = 0
    prev = 0
    for i in range(chars.size):
        c = chars[i]
        f = table[c] if c < 0x10000 else 0
        if (prev & MOJIBAKE_LEAD) and (f & MOJIBAKE_CONT):
            flags |= MOJIBAKE
        flags |= f
        prev = f
    return flags
