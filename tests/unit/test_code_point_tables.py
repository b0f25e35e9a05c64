"""code_point_tables: per-code-point tables from a pattern's own classes."""

from __future__ import annotations

import re

import numpy as np
import regex

from platform_assets.code_point_tables import BMP_END, UNICODE_END, class_bits, every_code_point


def test_every_code_point_is_each_code_point_at_its_own_position():
    chars = every_code_point()
    assert len(chars) == UNICODE_END
    for code in (0, 0x41, 0xD800, 0xDFFF, 0xFFFF, 0x10000, 0x1F600, 0x10FFFF):  # surrogates included
        assert ord(chars[code]) == code
    assert every_code_point(BMP_END) == chars[:BMP_END]


def test_class_bits_agrees_with_the_patterns_on_every_code_point():
    digit, letter = re.compile(r"\d"), regex.compile(r"\p{L}+")  # a single class, and a run of one
    table = class_bits(((digit, 1), (letter, 2)))
    assert table.dtype == np.uint8 and table.size == UNICODE_END
    chars = every_code_point()
    expected = np.zeros(UNICODE_END, dtype=np.uint8)
    expected[[m.start() for m in digit.finditer(chars)]] |= 1
    expected[[m.start() for m in regex.finditer(r"\p{L}", chars)]] |= 2
    assert np.array_equal(table, expected)
    assert table[ord("7")] == 1 and table[ord("\u0663")] == 1  # ARABIC-INDIC THREE is re's \d
    assert table[ord("a")] == 2 and table[0x4E00] == 2 and table[0x1D400] == 2  # beyond the BMP too
    assert table[ord(" ")] == 0 and table[0xD800] == 0


def test_class_bits_below_an_end():
    table = class_bits(((re.compile(r"\s"), 4),), end=BMP_END)
    assert table.size == BMP_END
    assert {int(c) for c in np.flatnonzero(table)} == {c for c in range(BMP_END) if re.match(r"\s", chr(c))}
