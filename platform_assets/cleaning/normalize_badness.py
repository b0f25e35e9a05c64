"""ftfy's mojibake detector (`ftfy.badness.is_bad`: BADNESS_RE.search) as one compiled pass over a
text's code points (issue #13).

normalize.py ran BADNESS_RE (37 alternatives, no literal prefix) in windows around the characters one
of which every match holds: on cleaning_stage's 93 candidate texts (Polish, French, Cyrillic...) those
characters include common accented letters, so ~9,900 windows were searched at ~2.5 us each, after a
class regex over the text to find them (0.041 CPU-s in all). Here every alternative of BADNESS_RE,
read with `re`'s own parser, is a fixed sequence of single-character sets (an optional element makes
two sequences; "^" only at the text's start), each set evaluated once per BMP code point by `re`
itself (a one-element pattern compiled from the parsed element), and a compiled pass tries, at each
character of a sequence's rarest set, that sequence around it: the same answer as the search, by
construction and as tested on random and mojibake text (tests/unit/test_cleaning_normalize_forms.py).

Where BADNESS_RE has another shape (a future ftfy), `matcher()` is None and normalize keeps its
windowed search; text beyond the BMP also keeps it (the tables cover the BMP).
"""

from __future__ import annotations

import re
from functools import cache
from typing import NamedTuple

import numpy as np

from platform_assets.code_point_tables import BMP_END, every_code_point

_MAX_VARIANTS = 64  # sequences, one bit each in the per-character anchor mask


class BadnessMatcher(NamedTuple):
    members: np.ndarray
    """(0x10000, words) uint64: bit e of a code point's row set when element set e holds it."""
    anchor_starts: np.ndarray
    """(0x10001,) int64: the sequences a code point anchors are anchor_seqs[anchor_starts[c]:anchor_starts[c + 1]]."""
    anchor_seqs: np.ndarray
    """The sequences whose anchor element holds each code point, code point by code point."""
    elements: np.ndarray
    """(sequences, longest) int64: each sequence's element sets, in order (-1 past its end)."""
    lengths: np.ndarray
    """Each sequence's length."""
    anchor_at: np.ndarray
    """Where in its sequence each anchor element is."""
    at_start: np.ndarray
    """bool per sequence: only at the text's start ("^")."""


def _sequences(pattern: re.Pattern[str]) -> tuple[list[list[tuple]], list[bool]] | None:
    """Each alternative of `pattern` as sequences of single-character elements (parsed), and whether
    each is anchored at the start; None for any other shape."""
    import re._constants as c
    import re._parser as sre_parse

    try:
        parsed = sre_parse.parse(pattern.pattern, pattern.flags)
        (op, (_, branches)), = parsed
    except (ValueError, TypeError):
        return None
    if op is not c.BRANCH:
        return None
    single = {c.LITERAL, c.NOT_LITERAL, c.IN, c.ANY, c.CATEGORY}
    sequences: list[list[tuple]] = []
    at_start: list[bool] = []
    for branch in branches:
        variants: list[list[tuple]] = [[]]
        anchored = False
        for position, (op, av) in enumerate(branch):
            if op is c.AT and position == 0 and av in (c.AT_BEGINNING, c.AT_BEGINNING_STRING):
                anchored = True
            elif op in single:
                variants = [v + [(op, av)] for v in variants]
            elif op in (c.MAX_REPEAT, c.MIN_REPEAT) and len(av[2]) == 1 and av[2][0][0] in single \
                    and av[1] is not c.MAXREPEAT and av[1] <= 4:
                element = av[2][0]
                variants = [v + [element] * k for v in variants for k in range(av[0], av[1] + 1)]
            else:
                return None
        if any(not v for v in variants):
            return None  # an empty alternative matches everywhere: not a shape to take apart
        sequences += variants
        at_start += [anchored] * len(variants)
    return sequences, at_start


@cache
def matcher() -> BadnessMatcher | None:
    """The tables of ftfy's BADNESS_RE (~0.3 s, once per process: the step's load calls it), or None
    when its shape is not sequences of single characters."""
    import re._compiler as sre_compile
    import re._parser as sre_parse

    from ftfy.badness import BADNESS_RE

    shape = _sequences(BADNESS_RE)
    if shape is None or len(shape[0]) > _MAX_VARIANTS:
        return None
    sequences, at_start = shape
    state = sre_parse.parse(BADNESS_RE.pattern, BADNESS_RE.flags).state
    every_char = every_code_point(BMP_END)
    index: dict[str, int] = {}
    holders: list[np.ndarray] = []
    for seq in sequences:
        for element in seq:
            key = repr(element)
            if key not in index:
                one = sre_compile.compile(sre_parse.SubPattern(state, [element]), BADNESS_RE.flags)
                index[key] = len(holders)
                holders.append(np.array([m.start() for m in one.finditer(every_char)], dtype=np.int64))
    words = (len(holders) + 63) // 64
    members = np.zeros((BMP_END, words), dtype=np.uint64)
    for e, held in enumerate(holders):
        members[held, e // 64] |= np.uint64(1) << np.uint64(e % 64)
    longest = max(map(len, sequences))
    elements = np.full((len(sequences), longest), -1, dtype=np.int64)
    anchor_at = np.zeros(len(sequences), dtype=np.int64)
    pairs = []  # (code point, sequence) for every code point of every sequence's anchor set
    for s, seq in enumerate(sequences):
        ids = [index[repr(element)] for element in seq]
        elements[s, :len(ids)] = ids
        k = min(range(len(ids)), key=lambda k: holders[ids[k]].size)  # the rarest set anchors it
        anchor_at[s] = k
        pairs.append(np.stack([holders[ids[k]], np.full(holders[ids[k]].size, s, dtype=np.int64)], axis=1))
    pairs_array = np.concatenate(pairs)
    pairs_array = pairs_array[np.lexsort((pairs_array[:, 1], pairs_array[:, 0]))]
    anchor_starts = np.zeros(BMP_END + 1, dtype=np.int64)
    np.cumsum(np.bincount(pairs_array[:, 0], minlength=BMP_END), out=anchor_starts[1:])
    return BadnessMatcher(members, anchor_starts, pairs_array[:, 1].copy(), elements,
                          np.array(list(map(len, sequences)), dtype=np.int64), anchor_at,
                          np.array(at_start, dtype=np.bool_))


def is_bad(text: str) -> bool | None:
    """BADNESS_RE.search(text) is not None, or None where the compiled form does not apply (no
    matcher, or a character beyond the BMP)."""
    m = matcher()
    if m is None:
        return None
    chars = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    if chars.size and int(chars.max()) >= BMP_END:
        return None
    return bool(_kernel()(chars, m.members, m.anchor_starts, m.anchor_seqs, m.elements, m.lengths, m.anchor_at,
                          m.at_start))


def load() -> None:
    """The tables and the kernel, once per process (normalize's step load)."""
    if matcher() is not None:
        is_bad("é")


@cache
def _kernel():
    """badness_search compiled, on first use (numba stays out of this module's import)."""
    from platform_assets.cleaning.quality.kernels import compiled

    return compiled(badness_search)


def badness_search(chars, members, anchor_starts, anchor_seqs, elements, lengths, anchor_at, at_start):
    """Is there a sequence whose every element holds the character at its place, tried where its
    anchor element holds the character (compiled by _kernel; callable as Python)?"""
    size = chars.size
    for j in range(size):
        c = chars[j]
        for q in range(anchor_starts[c], anchor_starts[c + 1]):
            s = anchor_seqs[q]
            i = j - anchor_at[s]
            n = lengths[s]
            if i < 0 or i + n > size or (at_start[s] and i != 0):
                continue
            matched = True
            for k in range(n):
                e = elements[s, k]
                if not (members[chars[i + k], e >> 6] >> np.uint64(e & 63)) & np.uint64(1):
                    matched = False
                    break
            if matched:
                return True
    return False
