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

from platform_assets.code_point_tables import BMP_END, class_bits

NEEDS_FTFY = 1  # a C1 control or ESC: normalize._NEEDS_FTFY_RE
MOJIBAKE_LEAD = 2  # the first character of a mojibake bigram (normalize._mojibake_bigrams)
MOJIBAKE_CONT = 4  # its second character
MOJIBAKE = 8  # scan() only: a lead followed by a continuation (the bigram regex matches)
SPACE = 16  # normalize._SPACES_RE
CONTROL = 32  # normalize._CONTROL_RE, NEL (U+0085) left out: see NEL
LINE_BREAK = 64  # a character normalize._LINE_BREAK_RE replaces
NEL = 128  # U+0085: a control character and a line break; whitespace normalisation turns it into "\n"


def char_flags(needs_ftfy: re.Pattern[str], lead: re.Pattern[str], cont: re.Pattern[str], spaces: re.Pattern[str],
               controls: re.Pattern[str], line_breaks: re.Pattern[str]) -> np.ndarray:
    """The flag of every BMP code point, from single-character regexes (each matched over all of them)."""
    table = class_bits(((needs_ftfy, NEEDS_FTFY), (lead, MOJIBAKE_LEAD), (cont, MOJIBAKE_CONT),
                        (spaces, SPACE), (controls, CONTROL), (line_breaks, LINE_BREAK)), end=BMP_END)
    table[0x85] = (int(table[0x85]) & ~CONTROL) | NEL
    return table


def scan(text: str, table: np.ndarray) -> int:
    """The OR of the flags of `text`'s characters, with MOJIBAKE where a lead is followed by a
    continuation."""
    return _kernel()(np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32), table)


def load(table: np.ndarray) -> None:
    """Compile or load from the cache the kernels, with the argument types scan() and
    needs_line_strip() pass."""
    scan("é", table)
    needs_line_strip("a \n", 2)


def needs_line_strip(text: str, max_blank_lines: int) -> bool:
    """Does `text` hold a space or tab right before a "\n", or a run of more than `max_blank_lines` + 1
    newlines (more blank lines in a row than allowed): what normalize._strip_lines can change but
    the last line's end. `" \n" in text or "\t\n" in text or "\n" * (max_blank_lines + 2) in text` took
    0.044 CPU-s on cleaning_stage's 31 MB; one pass over the UTF-8 bytes (" ", tab and newline are
    bytes of their own there) with the encoding ~0.015."""
    return _line_kernel()(np.frombuffer(text.encode("utf-8", "surrogatepass"), dtype=np.uint8), max_blank_lines + 2)


@cache
def _kernel():
    """scan_flags compiled, on first use: numba (~0.15 s to import) stays out of this module's import,
    which the pipeline's, and so the cleaning settings', pulls in."""
    from platform_assets.cleaning.quality.kernels import compiled

    return compiled(scan_flags)


@cache
def _line_kernel():
    """line_strip_bytes compiled, on first use (as _kernel)."""
    from platform_assets.cleaning.quality.kernels import compiled

    return compiled(line_strip_bytes)


def line_strip_bytes(data, newline_run):
    """needs_line_strip over UTF-8 bytes, `newline_run` = max_blank_lines + 2 (compiled by _line_kernel;
    callable as Python): stops at the first sign."""
    run = 0
    prev = 0
    for i in range(data.size):
        c = data[i]
        if c == 10:
            if prev == 32 or prev == 9:
                return True
            run += 1
            if run >= newline_run:
                return True
        else:
            run = 0
        prev = c
    return False


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
