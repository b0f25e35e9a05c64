"""Faster forms of the quality kernels (issue #13) against the forms they replaced, kept here as
plain Python (numba compiles the same code; the _replaced_* functions are line_stats' loops before
they read the newline positions or line boundaries): the same values on adversarial and random input
(empty, only newlines, leading/trailing whitespace, \\r and other line breaks that are not newlines,
long newline runs, non-ASCII, code-like repeats)."""

from __future__ import annotations

import random

import numpy as np

from platform_assets.cleaning.quality import kernels, line_stats
from platform_assets.cleaning.quality.text_view import TextView, duplicates, split_lines, split_paragraphs


def _replaced_piece_duplicates(chars, spaces, min_newlines, strip):
    """line_stats.piece_duplicates_at before it read the newline positions: a loop over every character."""
    lo, hi = 0, chars.size
    if strip:
        while lo < hi and spaces[chars[lo]]:
            lo += 1
        while hi > lo and spaces[chars[hi - 1]]:
            hi -= 1
    newlines = int(np.count_nonzero(chars[lo:hi] == 10))
    starts = np.empty(newlines + 1, dtype=np.int64)
    ends = np.empty(newlines + 1, dtype=np.int64)
    n = 0
    start = lo
    i = lo
    while i < hi:
        if chars[i] != 10:
            i += 1
            continue
        j = i
        while j < hi and chars[j] == 10:
            j += 1
        if j - i >= min_newlines:
            starts[n], ends[n] = start, i
            n += 1
            start = j
        i = j
    starts[n], ends[n] = start, hi
    n += 1
    repeated, repeated_chars = kernels.repeated_ranges(chars, starts, ends, n)
    return n, repeated, repeated_chars


def _replaced_kept_lines(chars, spaces, flags, min_words):
    size = chars.size
    breaks = 0
    for i in range(size):
        if flags[chars[i]] & line_stats.LINE_BREAK:
            breaks += 1
    starts = np.empty(breaks + 1, dtype=np.int64)
    ends = np.empty(breaks + 1, dtype=np.int64)
    lines = kept = longest = sentences = 0
    unchanged = size == 0 or not flags[chars[size - 1]] & line_stats.LINE_BREAK
    i = 0
    while i < size:
        j = i
        while j < size and not flags[chars[j]] & line_stats.LINE_BREAK:
            j += 1
        a, b = i, j
        while a < b and spaces[chars[a]]:
            a += 1
        while b > a and spaces[chars[b - 1]]:
            b -= 1
        lines += 1
        longest = max(longest, b - a)
        words = 0
        for k in range(a, b):
            if not spaces[chars[k]] and (k == a or spaces[chars[k - 1]]):
                words += 1
                if words == min_words:
                    break  # enough: only `words >= min_words` matters
        if words >= min_words:
            starts[kept], ends[kept] = a, b
            kept += 1
            sentences += line_stats._inner_boundaries(chars, spaces, flags, a, b) + (b > a)
            unchanged = unchanged and a == i and b == j
        else:
            unchanged = False
        if j < size:  # "\r\n" is one boundary
            unchanged = unchanged and chars[j] == 10
            j += 2 if chars[j] == 13 and j + 1 < size and chars[j + 1] == 10 else 1
        i = j
    return starts[:kept].copy(), ends[:kept].copy(), lines, longest, sentences, unchanged


def _replaced_bullet_ellipsis_lines(chars, spaces, flags, bullets, bullet_ends):
    size = chars.size
    lines = bulleted = ellipsis = 0
    i = 0
    while i < size:
        j = i
        while j < size and not flags[chars[j]] & line_stats.LINE_BREAK:
            j += 1
        a = i  # str.lstrip
        while a < j and spaces[chars[a]]:
            a += 1
        b = j  # str.rstrip, of the whole line
        while b > i and spaces[chars[b - 1]]:
            b -= 1
        lines += 1
        for k in range(bullet_ends.size - 1):
            lo, hi = bullet_ends[k], bullet_ends[k + 1]
            if a + hi - lo <= j and kernels.same_run(chars, a, bullets, lo, hi - lo):
                bulleted += 1
                break
        if (b > i and chars[b - 1] == 0x2026) or (b - i >= 3 and chars[b - 1] == 46 and chars[b - 2] == 46
                                                  and chars[b - 3] == 46):
            ellipsis += 1
        if j < size:  # "\r\n" is one boundary
            j += 2 if chars[j] == 13 and j + 1 < size and chars[j + 1] == 10 else 1
        i = j
    return lines, bulleted, ellipsis


def _replaced_nonblank_line_stats(chars, spaces, stop, short_length):
    size = chars.size
    newlines = 0
    for i in range(size):
        newlines += chars[i] == 10
    starts = np.empty(newlines + 1, dtype=np.int64)
    ends = np.empty(newlines + 1, dtype=np.int64)
    n = punctuated = short = 0
    i = 0
    while True:
        j = i
        while j < size and chars[j] != 10:
            j += 1
        for k in range(i, j):
            if not spaces[chars[k]]:  # not blank
                starts[n], ends[n] = i, j
                n += 1
                punctuated += stop[chars[j - 1]]
                short += j - i <= short_length
                break
        if j >= size:
            break
        i = j + 1
    return n, punctuated, short, kernels.repeated_ranges(chars, starts, ends, n)[1]


def _texts(rng: random.Random, count: int) -> list[str]:
    pieces = ["a", "b", "ab", " ", "\t", "\n", "\n", "\n\n", "\n\n\n", "\n" * 7, "\r", "\r\n", "\x0b", "\x85",
              "\u2028", "\xa0", "\u3000", "é", "ж", "中", "line one", "line one\n", "def f():\n    pass\n"]
    fixed = ["", "\n", "\n\n", "\n" * 9, " \n ", "a", "a\n", "\na", "\n\na\n\na\n\n", " \n a \n a \n ",
             "x\n\n\nx", "x\n\n\n\n\nx\n\nx", "é\n\né\n\n\né", "\t\n\t", "line\n" * 500, "p\n\n" * 300]
    return fixed + ["".join(rng.choice(pieces) for _ in range(rng.randint(0, 80))) for _ in range(count)]


def test_pieces_from_newline_positions_equal_the_character_loop():
    rng = random.Random(21)
    checked = 0
    for text in _texts(rng, 4000):
        points = TextView(text).code_points
        if points is None:
            continue
        newlines = line_stats.newline_positions(points.chars)
        assert newlines.tolist() == [i for i, c in enumerate(text) if c == "\n"], repr(text)
        for min_newlines, strip in ((1, False), (2, True), (2, False), (1, True), (3, False)):
            new = line_stats.piece_duplicates_at(points.chars, points.spaces, newlines, min_newlines, strip)
            old = _replaced_piece_duplicates(points.chars, points.spaces, min_newlines, strip)
            assert new == old, (min_newlines, strip, repr(text))
        view = TextView(text)
        for paragraphs, split in ((True, split_paragraphs), (False, split_lines)):
            expected = split(text)
            assert view.repeated_pieces(paragraphs) == (len(expected), *duplicates(expected)), repr(text)
        checked += 1
    assert checked > 4000


def test_keyed_numbering_equals_the_hashed_numbering():
    # token_vocab numbers tokens by (hash, packed key, length), comparing characters only beyond the
    # key's reach: the same ids and first positions as number_hashed_ranges (hash, then characters),
    # for ASCII, BMP and (beyond the key's 16 bits) astral code points, tokens around the 4/8-character
    # limit, and tokens equal in their last 8 characters
    rng = random.Random(22)
    alphabets = ["ab", "abcdefgh", "aé", "жщ", "a\u3000b", "x\U0001F600"]
    for _ in range(3000):
        alphabet = rng.choice(alphabets)
        words = ["".join(rng.choice(alphabet) for _ in range(rng.choice([1, 3, 4, 5, 7, 8, 9, 12, 16, 17])))
                 for _ in range(rng.randint(1, 12))]
        words += [rng.choice(["x", "yy"]) + "commonsuffix" for _ in range(rng.randint(0, 3))]
        text = " ".join(rng.choice(words) for _ in range(rng.randint(0, 60)))
        data = text.encode("ascii") if text.isascii() else text.encode("utf-32-le")
        chars = np.frombuffer(data, dtype=np.uint8 if text.isascii() else np.uint32)
        kinds = np.full(0x110000 if chars.dtype == np.uint32 else 256, kernels.WORD, dtype=np.uint8)
        kinds[32] = kernels.SPACE
        size = chars.size + 1
        starts, ends = np.empty(size, np.int64), np.empty(size, np.int64)
        hashes, keys = np.empty(size, np.uint64), np.empty(size, np.uint64)
        n = kernels._token_runs(chars, kinds, starts, ends, hashes, keys)
        expected = kernels.number_hashed_ranges(chars, starts, ends, hashes, n)
        assert kernels.token_vocab(chars, kinds)[0].tolist() == expected[0][:n].tolist(), repr(text)
        exact = 8 if chars.dtype == np.uint8 else (4 if chars.size == 0 or chars.max() < 0x10000 else 0)
        got = kernels._number_keyed_ranges(chars, starts, ends, hashes, keys, n, exact)
        assert got[2] == expected[2] and got[0][:n].tolist() == expected[0][:n].tolist(), repr(text)
        assert got[1][:got[2]].tolist() == expected[1][:expected[2]].tolist(), repr(text)


def test_other_line_breaks_is_the_flag_table_less_the_newline():
    for size, dtype in ((256, np.uint8), (0x10000, np.uint32)):
        flags = line_stats._flags(size)
        for c in range(size):
            expected = bool(flags[c] & line_stats.LINE_BREAK) and c != 10
            assert line_stats.other_line_breaks(np.array([65, c, 66], dtype=dtype)) == expected, hex(c)
    assert not line_stats.other_line_breaks(np.zeros(0, dtype=np.uint8))


def test_lines_from_the_boundaries_equal_the_character_loops():
    rng = random.Random(23)
    bullets = line_stats._bullet_table(("-", "•", "* "))
    checked = fast = 0
    for text in _texts(rng, 3000) + ["- a\r\n- b\r\n", "a...\r\r\nb…", "\r\n", "\r", "x\x1cy\x1dz\x1e",
                                    "• one\u2028• two\u2029", "a\x85b", "\n\n- x\n"]:
        points = TextView(text).code_points
        if points is None:
            continue
        chars, spaces = points.chars, points.spaces
        flags = line_stats._flags(256 if chars.dtype == np.uint8 else 0x10000)
        newlines = line_stats.newline_positions(chars)
        breaks = line_stats.line_breaks(points, newlines)
        assert breaks.tolist() == line_stats.line_break_positions(chars, flags).tolist(), repr(text)
        fast += breaks is newlines
        for min_words in (0, 1, 3):
            new = line_stats._kept_lines_at(chars, spaces, flags, breaks, min_words)
            old = _replaced_kept_lines(chars, spaces, flags, min_words)
            assert [x.tolist() if isinstance(x, np.ndarray) else x for x in new] == \
                   [x.tolist() if isinstance(x, np.ndarray) else x for x in old], (min_words, repr(text))
        assert line_stats._bullet_ellipsis_lines_at(chars, spaces, flags, breaks, *bullets) == \
               _replaced_bullet_ellipsis_lines(chars, spaces, flags, *bullets), repr(text)
        for stop, short in ((frozenset(".!?"), 30), (frozenset("…"), 0), (frozenset(), 5)):
            table = line_stats._char_table(stop, flags.size)
            assert line_stats._nonblank_line_stats_at(chars, spaces, table, short, newlines) == \
                   _replaced_nonblank_line_stats(chars, spaces, table, short), repr(text)
        checked += 1
    assert checked > 3000 and fast > 100 and checked - fast > 1000  # the newline path and the general one


def test_token_count_is_the_vocabulary_length():
    from platform_assets.cleaning.quality.array_vocab import array_vocab

    rng = random.Random(24)
    pieces = [*"ab_1 .-'’\n\t,!\x1c{}", "don't", "x.y", "...", "é", "中", "\u0301", "\u3000", "a-b-c", "--"]
    texts = ["", "a", "-", "a-", "-a", "a-b", "a--b", "a.b.", " ' ", "’’", "x" * 100]
    texts += ["".join(rng.choice(pieces) for _ in range(rng.randint(0, 200))) for _ in range(3000)]
    for text in texts:
        points = TextView(text).code_points
        if points is None:
            continue
        assert kernels.token_count(points.chars, points.kinds) == len(array_vocab(text, points).ids), repr(text)
        view = TextView(text)
        assert view.n_tokens == len(TextView(text).tokens), repr(text)  # the regex tokeniser's count
