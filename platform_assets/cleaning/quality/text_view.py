"""One document's text as the quality rules see it: tokens (words and punctuation), the distinct
tokens with counts, word figures and lines, each computed on first use and shared by every rule set,
so the text is tokenised once per document, not once per rule set. The vocabulary, word figures and
repeated lines/paragraphs come from the text's code points through compiled kernels (array_vocab.py,
kernels.py: ~200 MB/s for ASCII text, where `re` tokenises at ~15-20 MB/s); the `regex`/dict forms here
define them and serve short text and text beyond the BMP."""

from __future__ import annotations

import re
from collections.abc import Sequence
from itertools import count
from operator import itemgetter
from typing import Any, NamedTuple

import numpy as np
import regex

# A word is a run of word characters (letters with their combining marks, digits, '_'), possibly joined
# by - ' ’ . (state-of-the-art, don't, 3.14, e.g); a run of other non-space characters is one
# punctuation token ("," "..." "=====" ".)"). That splits punctuation off words as nltk's word_tokenize
# (datatrove's) does, in one linear pass: the joiners are not word characters, so `(?:[-'’.]\w+)*`
# cannot backtrack (nothing after it can fail: the greedy match is the longest, as a possessive one
# would be, and `regex` runs the greedy form ~10% faster), and `[^\w\s]+` is a single character class.
# The `regex` module because `re`'s \w leaves out combining marks and so cuts Devanagari or Thai words
# into pieces.
_TOKEN_RE = regex.compile(r"\w+(?:[-'’.]\w+)*|[^\w\s]+")
# The same tokens for ASCII text (most documents), with `re`: ~1.5x faster than `regex` here. The
# classes are spelt out because `re`'s \s also matches \x1c-\x1f, which `regex`'s does not.
_ASCII_TOKEN_RE = re.compile(r"[0-9A-Za-z_]+(?:[-'.][0-9A-Za-z_]+)*+|[^0-9A-Za-z_\t\n\x0b\x0c\r ]+")
_WORD_START_RE = regex.compile(r"\w")
_LETTER_RE = regex.compile(r"\p{L}")
# Below this size `regex` and a dict are as fast as the compiled array path (kernels.token_vocab, a
# few microseconds of call overhead): per text of English words with word figures, 50 chars ~17 us
# either way; 500 chars 45 us against 12 us; 2,000 chars 167 us against 24 us
ARRAY_VOCAB_MIN_CHARS = 64
_FIRST_CHAR = itemgetter(0)
_ASCII_WORD_CHARS = frozenset("0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ_abcdefghijklmnopqrstuvwxyz")


_NON_ASCII_RE = re.compile(r"[^\x00-\x7f]+")
# Above this many runs of non-ASCII characters a text goes to `regex` whole (the split below costs a
# few microseconds a run); English text with a few curly quotes or accents stays far below.
_MAX_NON_ASCII_RUNS = 256


def split_words(text: str) -> list[str]:
    """Words and punctuation tokens, e.g. "Hello, world..." -> ["Hello", ",", "world", "..."].

    A token never spans whitespace, so a text can be tokenised piecewise at newlines: the lines that
    hold a non-ASCII character go to `regex`, the runs of ASCII lines between them to `re` (~2x
    faster): in English prose with a few curly quotes most of the text is in the ASCII runs.
    """
    if text.isascii():
        return _ASCII_TOKEN_RE.findall(text)
    spans: list[tuple[int, int]] = []  # lines holding non-ASCII characters, merged, in order
    for k, m in enumerate(_NON_ASCII_RE.finditer(text)):
        if k == _MAX_NON_ASCII_RUNS:
            return _TOKEN_RE.findall(text)
        start, end = m.span()
        if spans and start <= spans[-1][1]:
            continue  # on a line already taken (a line's end is past every run in it)
        line_start = text.rfind("\n", 0, start) + 1
        line_end = text.find("\n", end)
        line_end = len(text) if line_end < 0 else line_end
        if spans and line_start <= spans[-1][1] + 1:
            spans[-1] = (spans[-1][0], line_end)
        else:
            spans.append((line_start, line_end))
    tokens: list[str] = []
    done = 0
    for start, end in spans:
        tokens += _ASCII_TOKEN_RE.findall(text, done, start)
        tokens += _TOKEN_RE.findall(text, start, end)
        done = end
    tokens += _ASCII_TOKEN_RE.findall(text, done)
    return tokens


class Vocab(NamedTuple):
    """The distinct tokens of a text and where each occurs."""

    tokens: Sequence[str]
    """Distinct tokens, in order of first appearance (made on first use by the ASCII byte path)."""
    ids: np.ndarray
    """int64, one per token of the text: its index in `tokens`."""
    counts: np.ndarray
    """How often each distinct token occurs."""
    lengths: np.ndarray
    """Each distinct token's length in characters."""
    first: np.ndarray
    """Each distinct token's first position."""
    spans: Any = None
    """array_vocab.Spans when the vocabulary was read from the text's characters as an array: the
    distinct tokens as ranges, from which word figures are computed without a string per token."""


class WordStats:
    """Word-level figures of a text (words: tokens that are not punctuation or symbols)."""

    __slots__ = ("count", "chars", "distinct_counts", "_distinct", "_spans")

    def __init__(self, count: int, chars: int, distinct_counts: np.ndarray, distinct: list[str] | None = None,
                 spans: Any = None):
        self.count, self.chars, self.distinct_counts = count, chars, distinct_counts
        self._distinct, self._spans = distinct, spans

    @property
    def distinct(self) -> list[str]:
        """Distinct words, in order of first appearance."""
        if self._distinct is None:
            self._distinct = self._spans.strings()
        return self._distinct

    def has_letter(self) -> np.ndarray:
        """Per distinct word: does it hold a letter (\\p{L})?"""
        if self._spans is not None:
            return self._spans.has_letter()
        words = self.distinct
        return np.fromiter(map(bool, map(_LETTER_RE.search, words)), dtype=bool, count=len(words))

    def lowered_in(self, words: frozenset[str]) -> set[str]:
        """The members of `words` that some distinct word equals once lower-cased."""
        found = self._spans.lowered_in(words) if self._spans is not None else None
        return found if found is not None else set(words.intersection(map(str.lower, self.distinct)))


class _computed_once:  # noqa: N801 - used as a decorator, like functools.cached_property
    """functools.cached_property without its lock: Python 3.11's takes an RLock on every first access
    (~1 us; 1.6% of a py-spy profile's samples of the cleaning_stage benchmark sat in its __get__, a
    view's properties being computed once per document), and a view is never shared between threads.
    The value goes in the instance's __dict__, which later lookups find before this (non-data)
    descriptor, as cached_property's do."""

    def __init__(self, func):
        self.func, self.__doc__ = func, func.__doc__

    def __set_name__(self, owner, name):
        self.name = name

    def __get__(self, obj, objtype=None):
        if obj is None:
            return self
        value = obj.__dict__[self.name] = self.func(obj)
        return value


class TextView:
    """Derived views of one text, each computed on first use and shared by the rule sets.

    The text is tokenised once; per-word figures are computed over the distinct tokens (a few
    thousand in a long document) and weighted by their counts, not word by word.
    """

    __slots__ = ("text", "doc", "__dict__")

    def __init__(self, text: str, doc: Any = None):
        self.text = text
        self.doc = doc
        """The document (steps.Doc: id, modality, lang, meta) for rules that judge more than the text."""

    @_computed_once
    def tokens(self) -> list[str]:
        return split_words(self.text)

    @_computed_once
    def n_tokens(self) -> int:
        """How many tokens: counted by one compiled pass (kernels.token_count) where the vocabulary is
        not made (FineWeb reads only this of the text C4 rewrote), else the vocabulary's."""
        if "vocab" not in self.__dict__ and len(self.text) >= ARRAY_VOCAB_MIN_CHARS and "tokens" not in self.__dict__:
            points = self.code_points
            if points is not None:
                from platform_assets.cleaning.quality.kernels import token_count  # numba: where rules run

                return token_count(points.chars, points.kinds)
        return len(self.vocab.ids)

    @_computed_once
    def code_points(self) -> Any:
        """array_vocab.CodePoints of the text, or None (beyond the BMP, a lone surrogate)."""
        from platform_assets.cleaning.quality.array_vocab import code_points

        return code_points(self.text)

    @_computed_once
    def vocab(self) -> Vocab:
        if len(self.text) >= ARRAY_VOCAB_MIN_CHARS and "tokens" not in self.__dict__:
            points = self.code_points
            if points is not None:
                from platform_assets.cleaning.quality.array_vocab import array_vocab

                return array_vocab(self.text, points)
        tokens = self.tokens
        n = len(tokens)
        # One C loop over the tokens (map over dict.setdefault): each token's first position...
        index: dict[str, int] = {}
        first = np.fromiter(map(index.setdefault, tokens, count()), dtype=np.int64, count=n)
        # ...then dense ids, numbered in order of first appearance
        is_first = first == np.arange(n)
        ids = (np.cumsum(is_first) - 1)[first]
        distinct = list(index)
        lengths = np.fromiter(map(len, distinct), dtype=np.int64, count=len(distinct))
        counts = np.bincount(ids, minlength=len(distinct))
        return Vocab(distinct, ids, counts, lengths, np.flatnonzero(is_first))

    @_computed_once
    def word_stats(self) -> WordStats:
        vocab = self.vocab
        if vocab.spans is not None:
            is_word = vocab.spans.starts_word()
            counts = vocab.counts[is_word]
            return WordStats(int(counts.sum()), int(counts @ vocab.lengths[is_word]), counts,
                             spans=vocab.spans.subset(is_word))
        n = len(vocab.tokens)
        # a token is a word iff it starts with a word character (punctuation tokens have none): a set
        # lookup of the first character for ASCII ones, the regex for the others
        initials = list(map(_FIRST_CHAR, vocab.tokens))
        is_word = np.fromiter(map(_ASCII_WORD_CHARS.__contains__, initials), dtype=bool, count=n)
        if not "".join(initials).isascii():
            for i, c in enumerate(initials):
                if not c.isascii():
                    is_word[i] = _WORD_START_RE.match(c) is not None
        counts = vocab.counts[is_word]
        return WordStats(
            int(counts.sum()),
            int(counts @ vocab.lengths[is_word]),
            counts,
            [t for t, w in zip(vocab.tokens, is_word.tolist(), strict=True) if w],
        )

    @_computed_once
    def words(self) -> list[str]:
        """Tokens that are words (not punctuation or symbols), in order."""
        # inlined test (a function call per token costs more than the rest of the loop)
        match = _WORD_START_RE.match
        return [t for t in self.tokens if t[0].isalnum() or t[0] == "_" or (not t[0].isascii() and match(t))]

    def repeated_pieces(self, paragraphs: bool) -> tuple[int, int, int]:
        """(pieces, repeated pieces, characters in them) of split_paragraphs(text) or split_lines(text),
        as duplicates() counts them: compiled, from the newline positions (line_stats.piece_duplicates_at;
        one pass over the characters serves both), no string per line; the string forms for text
        beyond the BMP."""
        points = self.code_points
        if points is None:
            pieces = split_paragraphs(self.text) if paragraphs else split_lines(self.text)
            return (len(pieces), *duplicates(pieces))
        from platform_assets.cleaning.quality.line_stats import piece_duplicates_at  # numba: where rules run

        return piece_duplicates_at(points.chars, points.spaces, self.newlines, 2 if paragraphs else 1, paragraphs)

    @_computed_once
    def newlines(self) -> Any:
        """Positions of "\n" in the text (int64 array; needs code_points)."""
        from platform_assets.cleaning.quality.line_stats import newline_positions  # numba: where rules run

        return newline_positions(self.code_points.chars)

    @_computed_once
    def line_breaks(self) -> Any:
        """Where str.splitlines ends each line (line_stats.line_breaks; needs code_points): the newline
        positions themselves where "\n" is the text's only line boundary."""
        from platform_assets.cleaning.quality.line_stats import line_breaks  # numba: where rules run

        return line_breaks(self.code_points, self.newlines)

    @_computed_once
    def lines(self) -> list[str]:
        return self.text.splitlines()

    @_computed_once
    def nonblank_lines(self) -> list[str]:
        return list(filter(str.strip, self.text.split("\n")))


def duplicates(items: list[str]) -> tuple[int, int]:
    """(number of repeated elements, characters in them), counting every occurrence after the first."""
    distinct = set(items)
    return len(items) - len(distinct), sum(map(len, items)) - sum(map(len, distinct))


def split_lines(text: str) -> list[str]:
    """re.split(r"\n+", text), which datatrove uses, from str.split (~3x faster): the pieces between
    runs of newlines, and an empty piece at either end that starts or ends with one."""
    parts = text.split("\n")
    if len(parts) == 1:
        return parts
    lines = list(filter(None, parts))
    if not parts[0]:
        lines.append("")  # only counts matter to the checks, not where the empty piece is
    if not parts[-1]:
        lines.append("")
    return lines


def split_paragraphs(text: str) -> list[str]:
    """re.split(r"\n{2,}", text.strip()), which datatrove uses, from str.split (~5x faster): a run of k
    newlines leaves k // 2 - 1 empty pieces and, for odd k, one newline in front of the next paragraph
    (which cannot start with another: the run is maximal, and a stripped text ends in no newline)."""
    text = text.strip()
    if "\n\n" not in text:
        return [text]
    pieces = text.split("\n\n")
    if "\n\n\n" not in text:
        return pieces
    return [p[1:] if p[0] == "\n" else p for p in pieces if p]
