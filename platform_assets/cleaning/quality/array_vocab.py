"""The vocabulary of a text (text_view.Vocab) from its characters as a numpy array, without a Python
string per token: the same tokens as text_view's patterns, the same ids, counts and first positions.

Tokenising with `re`/`regex` (~20 MB/s: a string object per token) and numbering the tokens with a dict
were ~40% of the quality step on real English text. Here a token is a run of one kind of character:
word characters (and a joiner [-'’.] between two of them: the pattern's `\\w+(?:[-'’.]\\w+)*`) or other
non-space characters (its `[^\\w\\s]+`); the pattern's matches are exactly those maximal runs, since a
word match takes every joiner it can and a punctuation match every non-word character. The kinds come
from tables: for ASCII the `re` pattern's classes, for the rest of the Basic Multilingual Plane the
`regex` module's own \\w, \\s and \\p{L} evaluated once per code point (text beyond it keeps the regex
path). A token of up to 7 ASCII characters is numbered by its bytes packed into an int64 (with its
length), any other (~1 in 10 in English) through a dict of its string; one argsort of the keys then
gives dense ids, renumbered in order of first appearance as the dict-based vocabulary numbers them.
Only the distinct tokens become strings, and only if asked for.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from platform_assets.cleaning.quality.text_view import Vocab

_SPACE, _WORD, _JOINER, _OTHER = 0, 1, 2, 3
_KIND = np.full(256, _OTHER, dtype=np.uint8)
_KIND[list(b"\t\n\x0b\x0c\r ")] = _SPACE  # the pattern's whitespace: not \x1c-\x1f, which `re` calls space
_KIND[list(b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ_abcdefghijklmnopqrstuvwxyz")] = _WORD
_KIND[list(b"-'.")] = _JOINER
_LONG = np.int64(1) << 60  # key space of the tokens numbered through the dict
_LETTER = np.zeros(256, dtype=np.int32)
_LETTER[list(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")] = 1
_UPPER = np.zeros(256, dtype=np.uint8)
_UPPER[list(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ")] = 1
_MASKS = np.array([(1 << (8 * k)) - 1 for k in range(8)], dtype=np.uint64)


_BMP: tuple[np.ndarray, np.ndarray] | None = None


def _bmp_tables() -> tuple[np.ndarray, np.ndarray]:
    """(kind, letter) of every BMP code point by the `regex` module itself (~50 ms, once)."""
    global _BMP
    if _BMP is None:
        import regex

        plane = "".join(map(chr, range(0x10000)))
        kind = np.full(0x10000, _OTHER, dtype=np.uint8)
        kind[[ord(c) for c in regex.findall(r"\s", plane)]] = _SPACE
        kind[[ord(c) for c in regex.findall(r"\w", plane)]] = _WORD
        kind[[ord(c) for c in "-'’."]] = _JOINER
        letter = np.zeros(0x10000, dtype=np.int32)
        letter[[ord(c) for c in regex.findall(r"\p{L}", plane)]] = 1
        _BMP = kind, letter
    return _BMP


def array_vocab(text: str) -> Vocab | None:
    """text_view.TextView(text).vocab computed from the characters; None for text beyond the BMP."""
    if text.isascii():
        raw = text.encode("ascii")
        size = len(raw)
        data = np.frombuffer(raw + bytes(8), dtype=np.uint8)  # 8 spare bytes: unaligned 8-byte reads
        kind = _KIND[data[:size]]
        codes = None
    else:
        try:
            codes = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
        except UnicodeEncodeError:  # a lone surrogate
            return None
        if int(codes.max()) > 0xFFFF:
            return None
        size = codes.size
        kind = _bmp_tables()[0][codes]
        data = np.zeros(size + 8, dtype=np.uint8)
        data[:size] = np.minimum(codes, 0xFF)  # byte lanes for packing the ASCII-only tokens
    word = kind == _WORD
    # 1 = part of a word (a word character, or a joiner with word characters on both sides), 2 = other
    run = np.where(kind == _SPACE, 0, 2).astype(np.int8)
    run[word] = 1
    if size > 2:
        inside = (kind[1:-1] == _JOINER) & word[:-2] & word[2:]
        run[1:-1][inside] = 1
    edge = np.empty(size + 1, dtype=bool)
    edge[0] = edge[size] = True
    np.not_equal(run[1:], run[:-1], out=edge[1:size])
    bounds = np.flatnonzero(edge)  # run starts, then the end
    starts, ends = bounds[:-1], bounds[1:]
    keep = run[starts] != 0
    starts, ends = starts[keep], ends[keep]
    lengths = ends - starts
    n = starts.size
    if n == 0:
        empty = np.empty(0, dtype=np.int64)
        return Vocab([], empty, empty.copy(), empty.copy(), empty.copy())
    # 8 bytes from each start, as one little-endian integer (a strided view of the buffer)
    words8 = np.ndarray((size,), dtype="<u8", buffer=data, strides=(1,))[starts]
    short = lengths <= 7
    if codes is not None:  # only tokens of ASCII characters are packed
        wide = np.zeros(size + 1, dtype=np.int64)
        np.cumsum(codes >= 0x80, out=wide[1:])
        short &= wide[ends] == wide[starts]
    packed = (words8 & _MASKS[np.minimum(lengths, 7)]) | (lengths.astype(np.uint64) << np.uint64(56))
    keys = packed.view(np.int64)  # < 2^59 for the short tokens; the long ones are replaced below
    if not short.all():
        index: dict[str, int] = {}
        long_at = np.flatnonzero(~short)
        strings = [text[a:b] for a, b in zip(starts[long_at].tolist(), ends[long_at].tolist(), strict=True)]
        keys[long_at] = _LONG + np.fromiter(map(index.setdefault, strings, range(len(strings))), np.int64,
                                            count=len(strings))
    # Equal keys made adjacent by numpy's (SIMD, unstable) argsort, ~2x np.unique's stable one: a
    # key's first occurrence is the smallest position in its run, whatever order the run is in.
    by_key = np.argsort(keys)
    sorted_keys = keys[by_key]
    run_start = np.empty(n, dtype=bool)
    run_start[0] = True
    np.not_equal(sorted_keys[1:], sorted_keys[:-1], out=run_start[1:])
    runs = np.flatnonzero(run_start)
    first_at = np.minimum.reduceat(by_key, runs)
    key_rank = np.empty(n, dtype=np.int64)
    key_rank[by_key] = np.cumsum(run_start) - 1
    order = np.argsort(first_at)  # distinct tokens in order of first appearance
    renumber = np.empty(runs.size, dtype=np.int64)
    renumber[order] = np.arange(runs.size, dtype=np.int64)
    ids = renumber[key_rank]
    first = first_at[order]
    spans = Spans(text, kind, codes, data, starts[first], ends[first])
    return Vocab(_Strings(spans), ids, np.bincount(ids, minlength=runs.size), lengths[first], first, spans)


class Spans:
    """Distinct tokens as character ranges of one text, and the word figures read from the arrays."""

    __slots__ = ("text", "kind", "codes", "data", "starts", "ends")

    def __init__(self, text: str, kind: np.ndarray, codes: np.ndarray | None, data: np.ndarray,
                 starts: np.ndarray, ends: np.ndarray):
        self.text, self.kind, self.codes, self.data = text, kind, codes, data
        self.starts, self.ends = starts, ends

    def strings(self) -> list[str]:
        text = self.text
        return [text[a:b] for a, b in zip(self.starts.tolist(), self.ends.tolist(), strict=True)]

    def starts_word(self) -> np.ndarray:
        """A token is a word iff its first character is a word character (a joiner only sits inside one)."""
        return self.kind[self.starts] == _WORD

    def subset(self, mask: np.ndarray) -> Spans:
        return Spans(self.text, self.kind, self.codes, self.data, self.starts[mask], self.ends[mask])

    def has_letter(self) -> np.ndarray:
        """Per token: a letter (\\p{L}) among its characters."""
        flags = _LETTER[self.data[: self.kind.size]] if self.codes is None else _bmp_tables()[1][self.codes]
        letters = np.zeros(self.kind.size + 1, dtype=np.int32)
        np.cumsum(flags, out=letters[1:])
        return letters[self.ends] > letters[self.starts]

    def lowered_in(self, words: frozenset[str]) -> set[str] | None:
        """The members of `words` equal to a lower-cased token; None when one of them is not ASCII or
        is longer than 7 characters (the caller then compares strings)."""
        if not words or not all(w.isascii() and 0 < len(w) <= 7 for w in words):
            return None if words else set()
        lengths = self.ends - self.starts
        sizes = [len(w) for w in words]
        pick = np.flatnonzero((lengths >= min(sizes)) & (lengths <= max(sizes)))  # only those that can equal one
        if self.codes is not None:  # str.lower of other characters can give ASCII (K, the Kelvin sign)
            text = self.text
            return words.intersection(text[a:b].lower() for a, b in
                                      zip(self.starts[pick].tolist(), self.ends[pick].tolist(), strict=True))
        at, short = self.starts[pick], lengths[pick]
        lanes = np.ndarray((self.data.size - 8,), dtype="<u8", buffer=self.data, strides=(1,))[at]
        lanes = lanes.view(np.uint8).reshape(-1, 8)
        lanes = lanes + _UPPER[lanes] * np.uint8(32)  # str.lower of ASCII: A-Z to a-z
        keys = (lanes.reshape(-1).view("<u8") & _MASKS[short]) | (short.astype(np.uint64) << np.uint64(56))
        present = set(keys.tolist())  # a few hundred short words: a set beats np.isin's sorting
        return {w for w in words if _pack(w) in present}


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


def _pack(word: str) -> int:
    return int.from_bytes(word.encode("ascii"), "little") | (len(word) << 56)
