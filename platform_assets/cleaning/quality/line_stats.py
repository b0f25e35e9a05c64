"""Line statistics as compiled passes over the text's code points (issue #13), without a string per
line. Over str.splitlines' lines: C4's lines where only the word count decides (no citation, phrase,
curly bracket or over-long line in the document; terminal-punctuation filter off, as FineWeb runs it):
the stripped lines kept when they hold min_words_per_line words (str.split's) and the sentences c4.py
counts over them (one per non-blank line plus each inner boundary of _INNER_SENTENCE_END_RE); Gopher
quality's lines that start with a bullet (after str.lstrip) or end with an ellipsis (after
str.rstrip). Over newlines: Gopher repetition's repeated lines and paragraphs; FineWeb's non-blank lines
of text.split("\\n") (ending with a terminal punctuation mark, short, repeated). The rule sets' string
forms (map() chains, regexes) stay for text beyond the BMP and are what the tests compare these with.
"""

from __future__ import annotations

from functools import lru_cache
from typing import NamedTuple

import numpy as np

from platform_assets.cleaning.quality.kernels import compiled, repeated_ranges, same_run

# Per code point: str.splitlines' line boundaries, the sentence-ending punctuation and the closing
# quotes/brackets of c4._INNER_SENTENCE_END_RE ([.!?…] and ["'’”)\]])
LINE_BREAK, TERMINAL, CLOSER = 1, 2, 4
_TABLES: dict[int, np.ndarray] = {}


def _flags(size: int) -> np.ndarray:
    """The flag table for code points below `size` (256 for ASCII text, 0x10000 for the BMP)."""
    table = _TABLES.get(size)
    if table is None:
        table = np.zeros(size, dtype=np.uint8)
        for c in range(size):
            if len(f"a{chr(c)}b".splitlines()) == 2:
                table[c] |= LINE_BREAK
        for c in ".!?…":
            if ord(c) < size:
                table[ord(c)] |= TERMINAL
        for c in "\"'’”)]":
            if ord(c) < size:
                table[ord(c)] |= CLOSER
        _TABLES[size] = table
    return table


class KeptLines(NamedTuple):
    starts: np.ndarray
    """Each kept line's stripped range in the text: [starts[i], ends[i])."""
    ends: np.ndarray
    lines: int
    """How many lines str.splitlines gives."""
    longest: int
    """The longest stripped line, in characters (0 without lines)."""
    sentences: int
    """c4.py's sentence count over the kept lines."""
    unchanged: bool
    """The kept lines joined with "\\n" are the text itself (every line kept, none stripped, each
    ended by a single "\\n", the last by none)."""


def load() -> None:
    """The kernels and both tables, once per process (kernels.load's counterpart; ~0.1 s)."""
    spaces = np.zeros(256, dtype=np.bool_)
    for chars in (np.frombuffer(b"a", dtype=np.uint8), np.frombuffer("a".encode("utf-32-le"), dtype=np.uint32)):
        flags = _flags(256 if chars.dtype == np.uint8 else 0x10000)
        breaks, newlines = line_break_positions(chars, flags), newline_positions(chars)
        _kept_lines_at(chars, spaces, flags, breaks, 1)
        _bullet_ellipsis_lines_at(chars, spaces, flags, breaks, *_bullet_table(("-",)))
        other_line_breaks(chars)
        _nonblank_line_stats_at(chars, spaces, _char_table(frozenset("."), flags.size), 30, newlines)
        piece_duplicates_at(chars, spaces, newlines, 1, False)


def bullet_ellipsis_lines(points, bullets: tuple[str, ...], breaks: np.ndarray | None = None) -> tuple[int, int, int]:
    """(lines, lines starting with one of `bullets` once str.lstrip-ped, lines ending with "..." or
    "…" once str.rstrip-ped) of a text from array_vocab.CodePoints, over str.splitlines' lines
    (`breaks`: line_breaks(points), if already made)."""
    chars = points.chars
    flags = _flags(256 if chars.dtype == np.uint8 else 0x10000)
    breaks = breaks if breaks is not None else line_break_positions(chars, flags)
    return _bullet_ellipsis_lines_at(chars, points.spaces, flags, breaks, *_bullet_table(bullets))


def nonblank_line_stats(points, stop_chars: frozenset[str], short_length: int,
                        newlines: np.ndarray | None = None) -> tuple[int, int, int, int]:
    """Over text.split("\\n")'s lines that are not all whitespace (TextView.nonblank_lines): (lines,
    lines whose last character is in `stop_chars`, lines of at most `short_length` characters,
    characters in lines equal to an earlier one: text_view.duplicates(lines)[1]). `newlines`:
    newline_positions(points.chars), if already made."""
    chars = points.chars
    newlines = newlines if newlines is not None else newline_positions(chars)
    return _nonblank_line_stats_at(chars, points.spaces, _char_table(stop_chars, 256 if chars.dtype == np.uint8 else
                                                                     0x10000), short_length, newlines)


@lru_cache(maxsize=16)
def _char_table(members: frozenset[str], size: int) -> np.ndarray:
    """bool per code point below `size`: is it one of the single characters `members`?"""
    table = np.zeros(size, dtype=np.bool_)
    table[[ord(c) for c in members if len(c) == 1 and ord(c) < size]] = True
    return table


@lru_cache(maxsize=16)
def _bullet_table(bullets: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray]:
    """The bullets' code points, concatenated, and where each ends."""
    ends = np.cumsum([0, *map(len, bullets)]).astype(np.int64)
    return np.array([ord(c) for b in bullets for c in b], dtype=np.int64), ends


def kept_lines(points, min_words: int, breaks: np.ndarray | None = None) -> KeptLines:
    """KeptLines of a text from array_vocab.CodePoints (`breaks`: line_breaks(points), if already made)."""
    chars = points.chars
    flags = _flags(256 if chars.dtype == np.uint8 else 0x10000)
    breaks = breaks if breaks is not None else line_break_positions(chars, flags)
    return KeptLines(*_kept_lines_at(chars, points.spaces, flags, breaks, min_words))


def line_breaks(points, newlines: np.ndarray | None = None) -> np.ndarray:
    """Where str.splitlines ends each line of a text from array_vocab.CodePoints: the positions of its
    boundary characters, a "\r\n" once (at the "\r"). Where "\n" is the only boundary the text holds
    (other_line_breaks: one vectorised test), its `newlines` (newline_positions) if given: the
    per-character flag lookups of line_break_positions are then not needed at all."""
    chars = points.chars
    if newlines is not None and not other_line_breaks(chars):
        return newlines
    return line_break_positions(chars, _flags(256 if chars.dtype == np.uint8 else 0x10000))


@compiled
def other_line_breaks(chars):
    """Does `chars` hold a str.splitlines boundary other than "\n"? (\x0b \x0c \r \x1c \x1d \x1e,
    and beyond ASCII \x85 \u2028 \u2029: _flags' LINE_BREAK, spelt as unsigned range tests so that
    the loop vectorises; tests compare it with the table.)"""
    found = False
    for i in range(chars.size):
        c = np.uint32(chars[i])
        found |= ((c - np.uint32(11)) < np.uint32(3)) | ((c - np.uint32(28)) < np.uint32(3)) | (
            c == np.uint32(0x85)) | ((c - np.uint32(0x2028)) < np.uint32(2))
    return found


@compiled
def line_break_positions(chars, flags):
    """The positions of `chars`' str.splitlines boundaries, "\r\n" once (at the "\r")."""
    size = chars.size
    n = 0
    for i in range(size):
        n += (flags[chars[i]] & LINE_BREAK) != 0
    positions = np.empty(n, dtype=np.int64)
    j = 0
    for i in range(size):
        if flags[chars[i]] & LINE_BREAK and not (chars[i] == 10 and i > 0 and chars[i - 1] == 13):
            positions[j] = i
            j += 1
    return positions[:j]


@compiled
def _kept_lines_at(chars, spaces, flags, breaks, min_words):
    """KeptLines' fields given the line boundaries (line_breaks): each line is found from them, not by
    a flag lookup per character."""
    size = chars.size
    n_breaks = breaks.size
    starts = np.empty(n_breaks + 1, dtype=np.int64)
    ends = np.empty(n_breaks + 1, dtype=np.int64)
    lines = kept = longest = sentences = 0
    unchanged = size == 0 or not flags[chars[size - 1]] & LINE_BREAK
    i = 0
    k = 0  # the next boundary
    while i < size:
        j = breaks[k] if k < n_breaks else size
        k += 1
        a, b = i, j
        while a < b and spaces[chars[a]]:
            a += 1
        while b > a and spaces[chars[b - 1]]:
            b -= 1
        lines += 1
        longest = max(longest, b - a)
        words = 0
        for q in range(a, b):
            if not spaces[chars[q]] and (q == a or spaces[chars[q - 1]]):
                words += 1
                if words == min_words:
                    break  # enough: only `words >= min_words` matters
        if words >= min_words:
            starts[kept], ends[kept] = a, b
            kept += 1
            sentences += _inner_boundaries(chars, spaces, flags, a, b) + (b > a)
            unchanged = unchanged and a == i and b == j
        else:
            unchanged = False
        if j < size:  # "\r\n" is one boundary
            unchanged = unchanged and chars[j] == 10
            j += 2 if chars[j] == 13 and j + 1 < size and chars[j + 1] == 10 else 1
        i = j
    return starts[:kept].copy(), ends[:kept].copy(), lines, longest, sentences, unchanged


@compiled
def _inner_boundaries(chars, spaces, flags, a, b):
    """Matches of c4._INNER_SENTENCE_END_RE inside the stripped line [a, b) (preceded, in the joined
    text, by a newline or the start): a run of [.!?…] not preceded by one, then ["'’”)\\]]*, then a
    whitespace character (a newline cannot occur inside a line)."""
    found = 0
    k = a
    while k < b:
        if flags[chars[k]] & TERMINAL and (k == a or not flags[chars[k - 1]] & TERMINAL):
            m = k + 1
            while m < b and flags[chars[m]] & TERMINAL:
                m += 1
            while m < b and flags[chars[m]] & CLOSER:
                m += 1
            if m < b and spaces[chars[m]]:
                found += 1
                k = m + 1
            else:
                k = m  # possessive: no match starts inside the run; one may start right after it
            continue
        k += 1
    return found


@compiled
def _bullet_ellipsis_lines_at(chars, spaces, flags, breaks, bullets, bullet_ends):
    """bullet_ellipsis_lines given the line boundaries (line_breaks)."""
    size = chars.size
    n_breaks = breaks.size
    lines = bulleted = ellipsis = 0
    i = 0
    k = 0  # the next boundary
    while i < size:
        j = breaks[k] if k < n_breaks else size
        k += 1
        a = i  # str.lstrip
        while a < j and spaces[chars[a]]:
            a += 1
        b = j  # str.rstrip, of the whole line
        while b > i and spaces[chars[b - 1]]:
            b -= 1
        lines += 1
        for q in range(bullet_ends.size - 1):
            lo, hi = bullet_ends[q], bullet_ends[q + 1]
            if a + hi - lo <= j and same_run(chars, a, bullets, lo, hi - lo):
                bulleted += 1
                break
        if (b > i and chars[b - 1] == 0x2026) or (b - i >= 3 and chars[b - 1] == 46 and chars[b - 2] == 46
                                                  and chars[b - 3] == 46):
            ellipsis += 1
        if j < size:  # "\r\n" is one boundary
            j += 2 if chars[j] == 13 and j + 1 < size and chars[j + 1] == 10 else 1
        i = j
    return lines, bulleted, ellipsis


@compiled
def _nonblank_line_stats_at(chars, spaces, stop, short_length, newlines):
    """nonblank_line_stats given the text's newline positions (newline_positions): each line is found
    from them, not by a test per character."""
    size = chars.size
    starts = np.empty(newlines.size + 1, dtype=np.int64)
    ends = np.empty(newlines.size + 1, dtype=np.int64)
    n = punctuated = short = 0
    i = 0
    for k in range(newlines.size + 1):
        j = newlines[k] if k < newlines.size else size
        for q in range(i, j):
            if not spaces[chars[q]]:  # not blank
                starts[n], ends[n] = i, j
                n += 1
                punctuated += stop[chars[j - 1]]
                short += j - i <= short_length
                break
        i = j + 1
    return n, punctuated, short, repeated_ranges(chars, starts, ends, n)[1]


@compiled
def newline_positions(chars):
    """Where `chars` holds "\n", in order: one branch-free pass (every position is written, the
    index moves on at a newline), where a per-character loop that stops at each newline ran at ~1 ns
    a character; the lines and the paragraphs of Gopher repetition are both read off it."""
    size = chars.size
    n = 0
    for i in range(size):
        n += chars[i] == 10
    positions = np.empty(n + 1, dtype=np.int64)  # + 1: the store after the last newline
    j = 0
    for i in range(size):
        positions[j] = i
        j += chars[i] == 10
    return positions[:n]


@compiled
def piece_duplicates_at(chars, spaces, newlines, min_newlines, strip):
    """text_view.duplicates of the pieces between maximal runs of at least `min_newlines` newlines
    (re.split(r"\n+") for 1, re.split(r"\n{2,}") for 2), of the text str.strip-ped first if `strip`
    (`spaces`: str.isspace per code point): (pieces, repeated pieces, characters in them). The pieces
    are found from the text's newline positions (newline_positions(chars)) alone, ~1 per 50 characters
    of prose, not from every character."""
    lo, hi = 0, chars.size
    if strip:
        while lo < hi and spaces[chars[lo]]:
            lo += 1
        while hi > lo and spaces[chars[hi - 1]]:
            hi -= 1
    k, stop = np.searchsorted(newlines, lo), np.searchsorted(newlines, hi)  # the newlines in [lo, hi)
    starts = np.empty(stop - k + 1, dtype=np.int64)  # a piece ends at a newline or at the end
    ends = np.empty(stop - k + 1, dtype=np.int64)
    n = 0
    start = lo
    while k < stop:
        j = k + 1  # the maximal run of consecutive newlines from newlines[k]
        while j < stop and newlines[j] == newlines[j - 1] + 1:
            j += 1
        if j - k >= min_newlines:
            starts[n], ends[n] = start, newlines[k]
            n += 1
            start = newlines[j - 1] + 1
        k = j
    starts[n], ends[n] = start, hi
    n += 1
    repeated, repeated_chars = repeated_ranges(chars, starts, ends, n)
    return n, repeated, repeated_chars
