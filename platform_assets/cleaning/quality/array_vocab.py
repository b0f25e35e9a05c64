"""The vocabulary of a text (text_view.Vocab) from its characters as an array, without a Python string
per token: the same tokens as text_view's patterns, the same ids, counts and first positions.

Tokenising with `re`/`regex` (~20 MB/s: a string object per token) and numbering the tokens with a dict
were ~40% of the quality step on real English text. Here a token is a run of one kind of character:
word characters (and a joiner [-'’.] between two of them: the pattern's `\\w+(?:[-'’.]\\w+)*`) or other
non-space characters (its `[^\\w\\s]+`); the pattern's matches are exactly those maximal runs, since a
word match takes every joiner it can and a punctuation match every non-word character. The kinds come
from tables: for ASCII the `re` pattern's classes, for the rest of the Basic Multilingual Plane the
`regex` module's own \\w, \\s and \\p{L} evaluated once per code point (text beyond it keeps the regex
path). kernels.token_vocab finds the runs and numbers them in order of first appearance in one
compiled pass (a hash table over each token's characters). Only the distinct tokens become strings,
and only if asked for.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import NamedTuple

import numpy as np

from platform_assets.cleaning.quality.kernels import (
    JOINER,
    NOT_ASCII_LOWER,
    OTHER,
    SPACE,
    WORD,
    lowered_present,
    ranges_with_flag,
    token_vocab,
)
from platform_assets.cleaning.quality.text_view import Vocab
from platform_assets.code_point_tables import BMP_END, class_bits, every_code_point

_KIND = np.full(256, OTHER, dtype=np.uint8)
_KIND[list(b"\t\n\x0b\x0c\r ")] = SPACE  # the pattern's whitespace: not \x1c-\x1f, which `re` calls space
_KIND[list(b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ_abcdefghijklmnopqrstuvwxyz")] = WORD
_KIND[list(b"-'.")] = JOINER
_LETTER = np.zeros(256, dtype=np.int32)
_LETTER[list(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")] = 1


_SPACE = np.array([chr(c).isspace() for c in range(256)], dtype=np.bool_)  # str.strip's whitespace


class CodePoints(NamedTuple):
    """A text's characters as an array, with the tables the kernels read them through."""

    chars: np.ndarray
    """uint8 for ASCII text, else uint32 code points (all below 0x10000)."""
    kinds: np.ndarray
    """Token character kind per code point (kernels.SPACE, WORD, JOINER, OTHER)."""
    letters: np.ndarray
    """int32 1 where a code point is a letter (\\p{L})."""
    spaces: np.ndarray
    """bool, str.isspace per code point (what str.strip removes)."""


_BMP: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None


def _bmp_tables() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(kind, letter, space) of every BMP code point by the `regex` module and str.isspace (~50 ms, once)."""
    global _BMP
    if _BMP is None:
        import regex

        is_space, is_word, is_letter = 1, 2, 4
        classes = class_bits(((regex.compile(r"\s"), is_space), (regex.compile(r"\w"), is_word),
                              (regex.compile(r"\p{L}"), is_letter)), end=BMP_END)
        kind = np.full(BMP_END, OTHER, dtype=np.uint8)
        kind[(classes & is_space) != 0] = SPACE
        kind[(classes & is_word) != 0] = WORD
        kind[[ord(c) for c in "-'’."]] = JOINER
        letter = ((classes & is_letter) != 0).astype(np.int32)
        space = np.fromiter(map(str.isspace, every_code_point(BMP_END)), dtype=np.bool_, count=BMP_END)
        _BMP = kind, letter, space
    return _BMP


def load() -> None:
    """The BMP tables, once per process (the quality step's load calls it)."""
    _bmp_tables()
    lower_to_ascii(4)


@lru_cache(maxsize=2)
def lower_to_ascii(itemsize: int) -> np.ndarray | None:
    """Per code point of ASCII text (`itemsize` 1) or of the BMP (4): the one ASCII character str.lower
    makes of it, or kernels.NOT_ASCII_LOWER (the kernel's table for a token equal to an ASCII word once
    lower-cased: beyond ASCII, only the Kelvin sign in Python 3.11's Unicode data); None where a
    character lowers to more than one character all ASCII (then no table holds it: strings decide).
    ~15 ms for the BMP, once."""
    size = 256 if itemsize == 1 else 0x10000  # 128-255 never occur in ASCII text: NOT_ASCII_LOWER
    table = np.full(size, NOT_ASCII_LOWER, dtype=np.uint8)
    for c in range(size):
        lowered = chr(c).lower()
        if lowered.isascii():
            if len(lowered) != 1:
                return None
            table[c] = ord(lowered)
    return table


def code_points(text: str) -> CodePoints | None:
    """The text as an array; None beyond the BMP or with a lone surrogate (the string paths stay)."""
    if text.isascii():
        return CodePoints(np.frombuffer(text.encode("ascii"), dtype=np.uint8), _KIND, _LETTER, _SPACE)
    try:
        chars = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
    except UnicodeEncodeError:  # a lone surrogate
        return None
    if int(chars.max()) > 0xFFFF:
        return None
    return CodePoints(chars, *_bmp_tables())


def array_vocab(text: str, points: CodePoints | None = None) -> Vocab | None:
    """text_view.TextView(text).vocab computed from the characters (`points`: code_points(text) if
    already made); None for text beyond the BMP."""
    points = points if points is not None else code_points(text)
    if points is None:
        return None
    ids, counts, first, starts, ends = token_vocab(points.chars, points.kinds)
    spans = Spans(text, points, starts, ends)
    return Vocab(_Strings(spans), ids, counts, ends - starts, first, spans)


class Spans:
    """Distinct tokens as character ranges of one text, and the word figures read from the arrays."""

    __slots__ = ("text", "points", "starts", "ends")

    def __init__(self, text: str, points: CodePoints, starts: np.ndarray, ends: np.ndarray):
        self.text, self.points, self.starts, self.ends = text, points, starts, ends

    def strings(self) -> list[str]:
        text = self.text
        return [text[a:b] for a, b in zip(self.starts.tolist(), self.ends.tolist(), strict=True)]

    def starts_word(self) -> np.ndarray:
        """A token is a word iff its first character is a word character (a joiner only sits inside one)."""
        return self.points.kinds[self.points.chars[self.starts]] == WORD

    def subset(self, mask: np.ndarray) -> Spans:
        return Spans(self.text, self.points, self.starts[mask], self.ends[mask])

    def has_letter(self) -> np.ndarray:
        """Per token: a letter (\\p{L}) among its characters."""
        return ranges_with_flag(self.points.chars, self.points.letters, self.starts, self.ends)

    def lowered_in(self, words: frozenset[str]) -> set[str] | None:
        """The members of `words` equal to a lower-cased token; None when one of them is not ASCII or
        is longer than 7 characters (the caller then compares strings)."""
        if not words or not all(w.isascii() and 0 < len(w) <= 7 for w in words):
            return None if words else set()
        chars = self.points.chars
        lower = lower_to_ascii(chars.itemsize)
        if lower is None:  # str.lower of a character gives more than one ASCII character: strings
            lengths = self.ends - self.starts
            sizes = [len(w) for w in words]
            pick = np.flatnonzero((lengths >= min(sizes)) & (lengths <= max(sizes)))  # only those that can equal one
            text = self.text
            return words.intersection(text[a:b].lower() for a, b in
                                      zip(self.starts[pick].tolist(), self.ends[pick].tolist(), strict=True))
        ordered, targets = _packed(words)
        found = lowered_present(chars, self.starts, self.ends, targets, lower)
        return {ordered[i] for i in np.flatnonzero(found).tolist()}


class _Strings(Sequence):
    """The distinct tokens as strings, made when first asked for (word figures do not need them)."""

    def __init__(self, spans: Spans):
        self._spans, self._list = spans, None

    def _strings(self) -> list[str]:
        if self._list is None:
            self._list = self._spans.strings()
        return self._list

    def __len__(self) -> int:
        return self._spans.starts.size

    def __getitem__(self, i):
        return self._strings()[i]

    def __iter__(self):
        return iter(self._strings())

    def __eq__(self, other) -> bool:
        return list(self) == list(other)


@lru_cache(maxsize=64)
def _packed(words: frozenset[str]) -> tuple[tuple[str, ...], np.ndarray]:
    """`words` ordered by their packed form, and those forms (a rule set asks with the same set for
    every document: packed once)."""
    ordered = tuple(sorted(words, key=_pack))
    return ordered, np.array(list(map(_pack, ordered)), dtype=np.uint64)


def _pack(word: str) -> int:
    return int.from_bytes(word.encode("ascii"), "little") | (len(word) << 56)
