"""Heuristic quality rule sets (Gopher quality, Gopher repetition, C4, FineWeb and our own).

Each rule set is a small class with ``check(view) -> Drop | str | None``: a Drop removes the document
(rule ``<preset>.<check>``, value "measured <op> threshold"), a string replaces its text (C4 removes
lines), None keeps it. :class:`QualityStep` runs a list of rule sets over a batch as one step, sharing
one :class:`TextView` per document so the text is tokenised once, not once per rule set (tokenising is
the dominant cost: ~15-20 MB/s, where ``str.split`` runs at ~60 MB/s).

Where the time goes, and what keeps it down (FineWeb's four rule sets on 43 MB of the real corpus,
one core: ~6 MB/s, 1.8x the first version, 14x datatrove; benchmarks/cleaning_quality_rules.py):
tokenising (~25%; `re` instead of `regex` for ASCII text, the same tokens), the n-gram repetition
checks (~30%; exact n-gram ids by sorting packed int64 keys, and level n only looks at positions where
level n-1 repeats), per-word figures over distinct tokens weighted by counts, per-line tests as map()
chains (C loops), and bounds that skip work that cannot change the outcome (a duplicate n-gram walk
whose every repeat together stays under the limit).

The checks and their order follow datatrove 0.10.1 (what FineWeb ran), so the first failing check is
the reported reason, as there. Every regex here is linear in the input: no nested unbounded
quantifiers, and patterns that could fail after consuming a run of one character are anchored with a
lookbehind so that they are not retried at every position inside the run.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections import Counter
from collections.abc import Iterator, Sequence
from functools import cached_property
from itertools import count
from operator import itemgetter, methodcaller
from typing import ClassVar, Literal, NamedTuple

import numpy as np
import regex

from platform_assets.cleaning import presets
from platform_assets.cleaning.settings import (
    C4Settings,
    CodeRatioSettings,
    CustomSettings,
    FineWebSettings,
    GopherQualitySettings,
    GopherRepetitionSettings,
    LengthSettings,
    QualityPreset,
    SymbolRatioSettings,
)
from platform_assets.cleaning.steps import ERROR_RULE, Doc, DocumentStep, Drop, above, below

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
_ALPHA_RE = regex.compile(r"\p{L}")
_WORD_START_RE = regex.compile(r"\w")
_ENDS_WITH_ELLIPSIS = methodcaller("endswith", ("...", "…"))
_LAST_CHAR = itemgetter(-1)
_FIRST_CHAR = itemgetter(0)
_ASCII_WORD_CHARS = frozenset("0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ_abcdefghijklmnopqrstuvwxyz")


def split_words(text: str) -> list[str]:
    """Words and punctuation tokens, e.g. "Hello, world..." -> ["Hello", ",", "world", "..."]."""
    return (_ASCII_TOKEN_RE if text.isascii() else _TOKEN_RE).findall(text)


class Vocab(NamedTuple):
    """The distinct tokens of a text and where each occurs."""

    tokens: list[str]
    """Distinct tokens, in order of first appearance."""
    ids: np.ndarray
    """int64, one per token of the text: its index in `tokens`."""
    counts: np.ndarray
    """How often each distinct token occurs."""
    lengths: np.ndarray
    """Each distinct token's length in characters."""
    first: np.ndarray
    """Each distinct token's first position."""


class WordStats(NamedTuple):
    """Word-level figures of a text (words: tokens that are not punctuation or symbols)."""

    count: int
    chars: int
    distinct: list[str]
    """Distinct words, in order of first appearance."""
    distinct_counts: np.ndarray


class TextView:
    """Derived views of one text, each computed on first use and shared by the rule sets.

    The text is tokenised once; per-word figures are computed over the distinct tokens (a few
    thousand in a long document) and weighted by their counts, not word by word.
    """

    __slots__ = ("text", "__dict__")

    def __init__(self, text: str):
        self.text = text

    @cached_property
    def tokens(self) -> list[str]:
        return split_words(self.text)

    @cached_property
    def vocab(self) -> Vocab:
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

    @cached_property
    def word_stats(self) -> WordStats:
        vocab = self.vocab
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
            [t for t, w in zip(vocab.tokens, is_word.tolist(), strict=True) if w],
            counts,
        )

    @cached_property
    def words(self) -> list[str]:
        """Tokens that are words (not punctuation or symbols), in order."""
        # inlined test (a function call per token costs more than the rest of the loop)
        match = _WORD_START_RE.match
        return [t for t in self.tokens if t[0].isalnum() or t[0] == "_" or (not t[0].isascii() and match(t))]

    @cached_property
    def lines(self) -> list[str]:
        return self.text.splitlines()

    @cached_property
    def nonblank_lines(self) -> list[str]:
        return list(filter(str.strip, self.text.split("\n")))


def _duplicates(items: list[str]) -> tuple[int, int]:
    """(number of repeated elements, characters in them), counting every occurrence after the first."""
    distinct = set(items)
    return len(items) - len(distinct), sum(map(len, items)) - sum(map(len, distinct))


class RuleSet:
    """One named preset: `check` returns a Drop, a rewritten text, or None."""

    preset: ClassVar[str]

    def __init__(self, settings: QualityPreset):
        self.s = settings
        self.modalities = frozenset(settings.modalities) if settings.modalities is not None else None
        self.languages = frozenset(settings.languages) if settings.languages is not None else None

    def applies(self, modality: str | None, lang: str | None) -> bool:
        return (self.modalities is None or modality in self.modalities) and (
            self.languages is None or lang in self.languages
        )

    def drop_above(self, check: str, measured: float, limit: float | None) -> Drop | None:
        return (
            above(f"{self.preset}.{check}", measured, limit)
            if limit is not None and measured > limit
            else None
        )

    def drop_below(self, check: str, measured: float, limit: float | None) -> Drop | None:
        return (
            below(f"{self.preset}.{check}", measured, limit)
            if limit is not None and measured < limit
            else None
        )

    def check(self, view: TextView, counters: Counter[str]) -> Drop | str | None:
        raise NotImplementedError


class GopherQuality(RuleSet):
    """Rae et al. 2021, A.1.1 (see presets.GOPHER_QUALITY)."""

    preset = "gopher_quality"
    s: GopherQualitySettings

    def __init__(self, settings: GopherQualitySettings | None = None):
        super().__init__(settings or GopherQualitySettings())
        self.stop_words = frozenset(w.lower() for w in self.s.stop_words)
        self._bullets = tuple(self.s.bullets)

    def check(self, view: TextView, counters: Counter[str]) -> Drop | None:
        s, text = self.s, view.text
        stats = view.word_stats
        n_words = stats.count
        if d := self.drop_below("too_few_words", n_words, s.min_doc_words):
            return d
        if d := self.drop_above("too_many_words", n_words, s.max_doc_words):
            return d
        if n_words == 0:
            return Drop(f"{self.preset}.no_words")
        mean_len = stats.chars / n_words
        if d := self.drop_below("mean_word_length_low", mean_len, s.min_avg_word_length):
            return d
        if d := self.drop_above("mean_word_length_high", mean_len, s.max_avg_word_length):
            return d
        # Ratios are per word, punctuation tokens not counted: the paper's "80% of words contain an
        # alphabetic character" read over all tokens, as datatrove does (every comma a word), fails 28%
        # of the Debian handbook and 91% of the kernel docs on that rule alone (3,000 sampled documents);
        # read over words, 0% and 3% (tables, hex dumps).
        if d := self.drop_above("hash_word_ratio", text.count("#") / n_words, s.max_symbol_word_ratio):
            return d
        ellipses = text.count("...") + text.count("…")
        if d := self.drop_above("ellipsis_word_ratio", ellipses / n_words, s.max_symbol_word_ratio):
            return d
        lines = view.lines or [""]
        # per-line tests as map() chains: C loops, no Python frame per line
        if s.max_bullet_lines_ratio is not None and self._bullets:
            starts = sum(map(methodcaller("startswith", self._bullets), map(str.lstrip, lines)))
            if d := self.drop_above("bullet_lines_ratio", starts / len(lines), s.max_bullet_lines_ratio):
                return d
        if s.max_ellipsis_lines_ratio is not None:
            ends = sum(map(_ENDS_WITH_ELLIPSIS, map(str.rstrip, lines)))
            if d := self.drop_above("ellipsis_lines_ratio", ends / len(lines), s.max_ellipsis_lines_ratio):
                return d
        if s.min_alpha_words_ratio is not None:
            # over distinct words, weighted by their counts
            has_letter = np.fromiter(
                map(bool, map(_ALPHA_RE.search, stats.distinct)), dtype=bool, count=len(stats.distinct)
            )
            alpha = int(stats.distinct_counts[has_letter].sum())
            if d := self.drop_below("alpha_words_ratio", alpha / n_words, s.min_alpha_words_ratio):
                return d
        if s.min_stop_words is not None:
            # Case-folded (the paper lists the words; datatrove compares case-sensitively).
            found = self.stop_words.intersection(map(str.lower, stats.distinct))
            if d := self.drop_below("stop_words", len(found), s.min_stop_words):
                return d
        return None


class _Level(NamedTuple):
    """The n-grams of one size, restricted to the positions where one can repeat.

    `pos` (increasing) are start positions in the token list; `ids[i]` numbers the n-gram at `pos[i]`
    (equal n-grams, equal ids); `counts[g]` is how often n-gram `g` occurs, `first[g]` the index into
    `pos` of its first occurrence. An n-gram that occurs twice or more is counted exactly: all of its
    occurrences are in `pos` (see :func:`_ngram_levels`).
    """

    n: int
    pos: np.ndarray
    ids: np.ndarray
    counts: np.ndarray
    first: np.ndarray


def _group(keys: np.ndarray, bound: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(ids, counts, first) of non-negative `keys` < `bound`, as in :class:`_Level`.

    One sort of key * 2^B + index (numpy's SIMD sort of int64: ~1.5 ms for 200k values, where a
    stable argsort takes ~24 ms and np.unique(return_index=True) ~58 ms): equal keys end up adjacent
    and in position order, so the first of each run is the key's first occurrence.
    """
    m = keys.size
    bits = m.bit_length()
    if bound << bits < 2**63:
        packed = keys << bits
        packed |= np.arange(m, dtype=np.int64)
        packed.sort()
        sorted_keys, order = packed >> bits, packed & ((1 << bits) - 1)
    else:  # a key too wide to pack (several million tokens): the stable argsort
        order = np.argsort(keys, kind="stable")
        sorted_keys = keys[order]
    run_start = np.empty(m, dtype=bool)
    run_start[0] = True
    np.not_equal(sorted_keys[1:], sorted_keys[:-1], out=run_start[1:])
    starts = np.flatnonzero(run_start)
    ids = np.empty(m, dtype=np.int64)
    ids[order] = np.cumsum(run_start) - 1
    counts = np.empty(starts.size, dtype=np.int64)
    np.subtract(starts[1:], starts[:-1], out=counts[:-1])
    counts[-1] = m - starts[-1]
    return ids, counts, order[starts]


def _ngram_levels(vocab: Vocab, max_n: int) -> Iterator[_Level]:
    """The levels n = 1, 2, ..., max_n; stops early once no n-gram occurs twice (no longer one can).

    An n-gram that occurs twice starts with an (n-1)-gram that occurs twice, so level n only looks at
    the positions where level n-1 found a repeat: in prose, a few percent of the positions by n = 5.
    N-grams are numbered exactly (no hashing): the n-gram at a position is the pair (id of its
    (n-1)-gram, id of its last token), packed into one int64.
    """
    word_ids = vocab.ids
    n_tokens, n_distinct = len(word_ids), len(vocab.tokens)
    level = _Level(1, np.arange(n_tokens, dtype=np.int64), word_ids, vocab.counts, vocab.first)
    while True:
        yield level
        n = level.n + 1
        if n > max_n:
            return
        repeated = level.counts[level.ids] >= 2
        pos, prefix = level.pos[repeated], level.ids[repeated]
        end = int(np.searchsorted(pos, n_tokens - n, side="right"))  # the n-gram must fit
        pos, prefix = pos[:end], prefix[:end]
        if pos.size < 2:
            return
        keys = prefix * n_distinct + word_ids[pos + (n - 1)]
        level = _Level(n, pos, *_group(keys, len(level.counts) * n_distinct))


def _top_ngram_chars(level: _Level, cum: np.ndarray) -> int | None:
    """Characters in the most frequent n-gram's occurrences (joined with spaces, as datatrove's
    n-gram strings are), or None if no n-gram occurs twice. Ties go to the n-gram seen first, as with
    datatrove's Counter.most_common."""
    top = int(level.counts.max())
    if top < 2:
        return None
    tied = np.flatnonzero(level.counts == top)
    i = int(level.pos[level.first[tied].min()])
    n = level.n
    return (int(cum[i + n] - cum[i]) + n - 1) * top


def _later_occurrences(level: _Level) -> np.ndarray:
    """Indices into `level.pos` of the n-grams that occurred earlier (every occurrence but the first)."""
    later = np.ones(level.pos.size, dtype=bool)
    later[level.first] = False
    return np.flatnonzero(later)


def _repeat_bound(starts: np.ndarray, cum: np.ndarray, m: int) -> int:
    """Characters in the m-grams at `starts` (those that fit): an upper bound of the duplicate m-gram
    characters when `starts` are the later occurrences of some level n <= m (see GopherRepetition)."""
    fits = starts[: int(np.searchsorted(starts, len(cum) - 1 - m, side="right"))]
    return int((cum[fits + m] - cum[fits]).sum())


def _dup_ngram_chars(
    level: _Level, cum: np.ndarray, stop_above: float, candidates: np.ndarray | None = None
) -> int | None:
    """datatrove's find_all_duplicate on one level: walk the n-grams, and at one seen before add its
    characters and jump n tokens ahead (overlapping repeats are not counted twice; the n-grams jumped
    over are not remembered as seen). Stops once the total passes `stop_above`.

    Same result as that walk, but only the positions whose n-gram occurred earlier are visited (in
    prose a few percent): a position is "seen" if the n-gram's first occurrence was not jumped over,
    or if an earlier repeat of it was visited. None when no n-gram occurs twice. `candidates`:
    :func:`_later_occurrences` of the level, if already computed.
    """
    if candidates is None:
        candidates = _later_occurrences(level)
    if candidates.size == 0:
        return None
    n = level.n
    positions = level.pos[candidates]
    grams = level.ids[candidates]
    firsts = level.pos[level.first[grams]]
    lengths = cum[positions + n] - cum[positions]
    jumped_starts: list[int] = []  # jumped-over ranges are [start, start + n - 2], increasing
    visited_repeats: set[int] = set()
    next_visited = 0
    repeated = 0
    for p, gram, f, length in zip(
        positions.tolist(), grams.tolist(), firsts.tolist(), lengths.tolist(), strict=True
    ):
        if p < next_visited:
            continue  # jumped over
        i = bisect_right(jumped_starts, f) - 1
        first_jumped = i >= 0 and f <= jumped_starts[i] + n - 2
        if not first_jumped or gram in visited_repeats:
            repeated += length
            if repeated > stop_above:
                return repeated
            jumped_starts.append(p + 1)
            next_visited = p + n
        else:
            visited_repeats.add(gram)
    return repeated


def _split_lines(text: str) -> list[str]:
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


class GopherRepetition(RuleSet):
    """Rae et al. 2021, table A1 (see presets.GOPHER_REPETITION)."""

    preset = "gopher_repetition"
    s: GopherRepetitionSettings
    _PARAGRAPH_RE = re.compile(r"\n{2,}")

    def __init__(self, settings: GopherRepetitionSettings | None = None):
        super().__init__(settings or GopherRepetitionSettings())
        # datatrove's order: every top n-gram check (by n), then every duplicate n-gram check (by n)
        self._ngram_checks = [("top", n, lim) for n, lim in sorted(self.s.top_n_grams.items())] + [
            ("dup", n, lim) for n, lim in sorted(self.s.dup_n_grams.items())
        ]
        self._max_n = max((n for _, n, _ in self._ngram_checks), default=0)

    def check(self, view: TextView, counters: Counter[str]) -> Drop | None:
        s, text = self.s, view.text
        n_chars = len(text)
        if n_chars == 0:
            return Drop(f"{self.preset}.empty")
        # no blank line: one paragraph (the regex split would return the same single item)
        paragraphs = self._PARAGRAPH_RE.split(text.strip()) if "\n\n" in text else [text.strip()]
        dup, dup_chars = _duplicates(paragraphs)
        if d := self.drop_above("dup_para_frac", dup / len(paragraphs), s.dup_para_frac):
            return d
        if d := self.drop_above("dup_para_char_frac", dup_chars / n_chars, s.dup_para_char_frac):
            return d
        lines = _split_lines(text)
        dup, dup_chars = _duplicates(lines)
        if d := self.drop_above("dup_line_frac", dup / len(lines), s.dup_line_frac):
            return d
        if d := self.drop_above("dup_line_char_frac", dup_chars / n_chars, s.dup_line_char_frac):
            return d
        if len(view.tokens) < 2 or not self._max_n:
            return None
        vocab = view.vocab
        cum = np.zeros(len(vocab.ids) + 1, dtype=np.int64)  # characters before each token
        np.cumsum(vocab.lengths[vocab.ids], out=cum[1:])
        # The checks run in datatrove's order, each as soon as its level is computed; levels past the
        # last one with a repeat are never computed (no check can fire there).
        pending = iter(self._ngram_checks)
        measured: dict[tuple[str, int], int | None] = {}
        check = next(pending)
        for level in _ngram_levels(vocab, self._max_n):
            n = level.n
            if n in s.top_n_grams:
                measured["top", n] = _top_ngram_chars(level, cum)
            if n in s.dup_n_grams and ("dup", n) not in measured:
                later = _later_occurrences(level)
                rest = [m for m in s.dup_n_grams if m >= n]
                # A duplicate m-gram (m >= n) starts where an n-gram occurred before, so the m-grams at
                # those positions bound what the dup checks from n on can count. Below every limit (most
                # prose), none of them can fire: no walk, and no larger level is needed for them.
                starts = level.pos[later]
                if later.size == 0 or all(
                    _repeat_bound(starts, cum, m) <= s.dup_n_grams[m] * n_chars for m in rest
                ):
                    measured.update({("dup", m): None for m in rest})  # None: cannot fire
                else:
                    measured["dup", n] = _dup_ngram_chars(level, cum, s.dup_n_grams[n] * n_chars, later)
            while check is not None and (check[0], check[1]) in measured:
                if d := self._ngram_drop(check, measured[check[0], check[1]], n_chars):
                    return d
                check = next(pending, None)
            if check is None:
                return None
        # The levels stopped early: nothing repeats at the sizes not measured, so only the checks
        # measured already (a dup check ordered after a top check of a larger n) can still fire.
        while check is not None:
            if d := self._ngram_drop(check, measured.get((check[0], check[1])), n_chars):
                return d
            check = next(pending, None)
        return None

    def _ngram_drop(self, check: tuple[str, int, float], value: int | None, n_chars: int) -> Drop | None:
        kind, n, limit = check
        if value is None:
            return None
        return self.drop_above(f"{kind}_{n}_gram_char_frac", value / n_chars, limit)


# A sentence boundary inside a line: terminal punctuation (a run, with closing quotes/brackets) then
# whitespace. The lookbehind starts a match only at the first character of a punctuation run.
_SENTENCE_END_RE = re.compile(r"(?<![.!?…])[.!?…]++[\"'’”)\]]*+\s")
# The same boundary, not followed by a newline: on lines joined with "\n", the boundaries inside them
_INNER_SENTENCE_END_RE = re.compile(r"(?<![.!?…])[.!?…]++[\"'’”)\]]*+[^\S\n]")
_CITATION_RE = re.compile(r"\[\d*\]|\[edit\]|\[citation needed\]")


def count_sentences(line: str) -> int:
    """Sentences in one line: 1 + inner boundaries (nltk's punkt would also skip abbreviations)."""
    return 1 + len(_SENTENCE_END_RE.findall(line)) if line.strip() else 0


class C4(RuleSet):
    """Raffel et al. 2020, 2.2 (see presets.C4). Removes lines, so it rewrites the text it keeps."""

    preset = "c4"
    s: C4Settings

    def __init__(self, settings: C4Settings | None = None):
        super().__init__(settings or C4Settings())
        s = self.s
        # "a word longer than max_word_length": a run of that many + 1 non-spaces that starts a word
        # (the lookbehind keeps the search linear: it is not retried inside a long run)
        self._long_word_re = (
            re.compile(rf"(?<!\S)\S{{{s.max_word_length + 1}}}") if s.max_word_length is not None else None
        )
        # len(line.split(None, k)) < min_words_per_line  <=>  the line has fewer words: no full split
        self._min_words_split = s.min_words_per_line - 1 if s.min_words_per_line else None
        self._phrases = (
            (("lorem ipsum",) if s.filter_lorem_ipsum else ())
            + (("javascript",) if s.filter_javascript else ())
            + (presets.C4_POLICY_SUBSTRINGS if s.filter_policy else ())
        )

    def check(self, view: TextView, counters: Counter[str]) -> Drop | str | None:
        s, text = self.s, view.text
        kept: list[str] = []
        removed: Counter[str] = Counter()
        end_punct = presets.C4_END_PUNCTUATION
        long_word, max_word = self._long_word_re, s.max_word_length
        min_words, split_at = s.min_words_per_line or 0, self._min_words_split
        cite = s.remove_citations and "[" in text
        # Lines only need lower-casing if the document holds one of the phrases at all (citations
        # removed first, as per line: a line's lower-cased text is a substring of the document's).
        phrases = self._phrases
        if phrases:
            low_text = (_CITATION_RE.sub("", text) if cite else text).lower()
            phrases = tuple(p for p in phrases if p in low_text)
        curly = s.filter_curly_bracket and "{" in text
        for raw in view.lines:
            line = raw.strip()
            # no word can be longer than its line: the search only runs on very long lines
            if long_word is not None and len(line) > max_word and long_word.search(line):
                removed["too_long_word"] += 1
                continue
            n_words_ok = split_at is None or len(line.split(None, split_at)) >= min_words  # before citations
            if cite and "[" in line:
                line = _CITATION_RE.sub("", line)
            if s.filter_no_terminal_punct and (
                not line.endswith(end_punct) or line.endswith(presets.C4_ELLIPSIS)
            ):
                removed["no_terminal_punct"] += 1
                continue
            if not n_words_ok:
                removed["too_few_words"] += 1
                continue
            if phrases:
                low = line.lower()
                if s.filter_lorem_ipsum and "lorem ipsum" in low:
                    return Drop(f"{self.preset}.lorem_ipsum", line[:80])
                if s.filter_javascript and "javascript" in low:
                    removed["javascript"] += 1
                    continue
            if curly and "{" in line:
                return Drop(f"{self.preset}.curly_bracket", line[:80])
            if phrases and s.filter_policy and any(p in low for p in presets.C4_POLICY_SUBSTRINGS):
                removed["policy"] += 1
                continue
            kept.append(line)
        joined = "\n".join(kept)
        if s.min_num_sentences is not None:
            # count_sentences summed over the kept lines, in one pass: each non-blank line is one
            # sentence plus its inner boundaries (a boundary never spans the joining newlines)
            sentences = sum(map(bool, map(str.strip, kept))) + len(_INNER_SENTENCE_END_RE.findall(joined))
            if d := self.drop_below("too_few_sentences", sentences, s.min_num_sentences):
                return d
        for reason, n in removed.items():
            counters[f"{self.preset}.lines_removed.{reason}"] += n
        new_text = joined.strip()
        return new_text if new_text != text else None


class FineWeb(RuleSet):
    """Penedo et al. 2024, 3.4 (see presets.FINEWEB)."""

    preset = "fineweb"
    s: FineWebSettings

    def __init__(self, settings: FineWebSettings | None = None):
        super().__init__(settings or FineWebSettings())
        self.stop_chars = presets.TERMINAL_PUNCTUATION  # single characters: a set lookup of the last one

    def check(self, view: TextView, counters: Counter[str]) -> Drop | None:
        s, text = self.s, view.text
        lines = view.nonblank_lines
        if not lines:
            return Drop(f"{self.preset}.empty")
        if s.line_punct_thr is not None:
            stop = self.stop_chars
            ratio = sum(map(stop.__contains__, map(_LAST_CHAR, lines))) / len(lines)
            if ratio < s.line_punct_thr and not (ratio == 0 and s.line_punct_exclude_zero):
                return below(f"{self.preset}.line_punct_ratio", ratio, s.line_punct_thr)
        if s.short_line_thr is not None:
            ratio = sum(map(s.short_line_length.__ge__, map(len, lines))) / len(lines)
            if d := self.drop_above("short_line_ratio", ratio, s.short_line_thr):
                return d
        if s.char_duplicates_ratio is not None:
            denominator = len(text) - text.count("\n")
            ratio = _duplicates(lines)[1] / denominator if denominator else 0.0
            if d := self.drop_above("char_dup_ratio", ratio, s.char_duplicates_ratio):
                return d
        if s.new_line_ratio is not None:
            n_tokens = len(view.tokens)
            ratio = text.count("\n") / n_tokens if n_tokens else float("inf")
            if d := self.drop_above("list_ratio", ratio, s.new_line_ratio):
                return d
        return None


class Length(RuleSet):
    preset = "length"
    s: LengthSettings

    def __init__(self, settings: LengthSettings | None = None):
        super().__init__(settings or LengthSettings())

    def check(self, view: TextView, counters: Counter[str]) -> Drop | None:
        s = self.s
        n_chars = len(view.text)
        if d := self.drop_below("too_few_chars", n_chars, s.min_chars) or self.drop_above(
            "too_many_chars", n_chars, s.max_chars
        ):
            return d
        if s.min_words is not None or s.max_words is not None:
            n_words = view.word_stats.count
            if d := self.drop_below("too_few_words", n_words, s.min_words) or self.drop_above(
                "too_many_words", n_words, s.max_words
            ):
                return d
        if s.min_lines is not None or s.max_lines is not None:
            n_lines = len(view.nonblank_lines)
            if d := self.drop_below("too_few_lines", n_lines, s.min_lines) or self.drop_above(
                "too_many_lines", n_lines, s.max_lines
            ):
                return d
        return None


class SymbolRatio(RuleSet):
    preset = "symbol_ratio"
    s: SymbolRatioSettings

    def __init__(self, settings: SymbolRatioSettings | None = None):
        super().__init__(settings or SymbolRatioSettings())

    def check(self, view: TextView, counters: Counter[str]) -> Drop | None:
        n_tokens = len(view.tokens)
        if n_tokens == 0:
            return Drop(f"{self.preset}.no_words")
        symbols = sum(view.text.count(sym) for sym in self.s.symbols)
        return self.drop_above("symbol_word_ratio", symbols / n_tokens, self.s.max_symbol_word_ratio)


# A line looks like code if it ends with ; { or }, or starts (after indentation) with a construct that
# prose lines do not start with. reST's "Example::" and Markdown are deliberately not code.
_CODE_LINE_RE = re.compile(
    r"[;{}][ \t]*+$"
    r"|^[ \t]*+(?:#include\b|#define\b|#!/|<\?php|import\s+[\w.]+|from\s+[\w.]+\s+import\b"
    r"|def\s+\w+\s*\(|class\s+\w+\s*[(:{]|function\s*\w*\s*\(|(?:var|let|const)\s+\w+\s*="
    r"|(?:public|private|protected|static)\s+\w|return\b|if\s*\(|for\s*\(|while\s*\(|[})\]];?$)"
)


class CodeRatio(RuleSet):
    preset = "code_ratio"
    s: CodeRatioSettings

    def __init__(self, settings: CodeRatioSettings | None = None):
        super().__init__(settings or CodeRatioSettings())

    def check(self, view: TextView, counters: Counter[str]) -> Drop | None:
        lines = view.nonblank_lines
        if len(lines) < self.s.min_lines:
            return None
        code = sum(1 for ln in lines if _CODE_LINE_RE.search(ln))
        return self.drop_above("code_line_ratio", code / len(lines), self.s.max_code_line_ratio)


_URL_RE = re.compile(r"(?<!\S)(?:https?://|www\.)\S")
_UPPER_RE = regex.compile(r"\p{Lu}+")
_LETTER_RE = regex.compile(r"\p{L}+")
_DIGIT_RE = re.compile(r"\d+")
_SPACE_RE = re.compile(r"\s+")


def _chars_matching(pattern: re.Pattern[str] | regex.Pattern[str], text: str) -> int:
    """How many characters of `text` the pattern matches (runs matched whole: C speed, no lists)."""
    return len(text) - len(pattern.sub("", text))


class Custom(RuleSet):
    preset = "custom"
    s: CustomSettings

    def __init__(self, settings: CustomSettings | None = None):
        super().__init__(settings or CustomSettings())

    def check(self, view: TextView, counters: Counter[str]) -> Drop | None:
        s, text = self.s, view.text
        if s.max_replacement_char_ratio is not None and text:
            ratio = text.count("\ufffd") / len(text)
            if d := self.drop_above("replacement_char_ratio", ratio, s.max_replacement_char_ratio):
                return d
        if s.max_uppercase_ratio is not None:
            letters = _chars_matching(_LETTER_RE, text)
            if letters >= s.min_letters_for_case:
                ratio = _chars_matching(_UPPER_RE, text) / letters
                if d := self.drop_above("uppercase_ratio", ratio, s.max_uppercase_ratio):
                    return d
        if s.max_digit_ratio is not None:
            visible = len(text) - _chars_matching(_SPACE_RE, text)
            if visible:
                ratio = _chars_matching(_DIGIT_RE, text) / visible
                if d := self.drop_above("digit_ratio", ratio, s.max_digit_ratio):
                    return d
        if s.max_url_word_ratio is not None:
            n_words = len(text.split())
            if n_words:
                ratio = len(_URL_RE.findall(text)) / n_words
                if d := self.drop_above("url_word_ratio", ratio, s.max_url_word_ratio):
                    return d
        return None


RULE_SETS: dict[str, type[RuleSet]] = {
    cls.preset: cls
    for cls in (GopherQuality, GopherRepetition, C4, FineWeb, Length, SymbolRatio, CodeRatio, Custom)
}


def rule_set(settings: QualityPreset) -> RuleSet:
    """The rule set for a preset's settings."""
    return RULE_SETS[settings.preset](settings)  # type: ignore[arg-type]


class QualityStep(DocumentStep):
    """Runs rule sets in order over each document; the first that removes it gives the reason.

    A rule set that rewrites the text (C4) hands the rewritten text to the ones after it, as a
    datatrove pipeline does. A document that no rule set applies to is counted as skipped.
    """

    name = "quality"

    def __init__(
        self,
        rule_sets: Sequence[RuleSet | QualityPreset],
        *,
        on_error: Literal["exclude", "raise"] = "exclude",
    ):
        super().__init__(on_error=on_error)
        self.rule_sets = [r if isinstance(r, RuleSet) else rule_set(r) for r in rule_sets]

    def rule(self, local: str) -> str:
        # rule sets already name their rules "<preset>.<check>"
        return local if local != ERROR_RULE else f"{self.name}.{local}"

    def applies(self, modality: str | None, lang: str | None) -> bool:
        return any(r.applies(modality, lang) for r in self.rule_sets)

    def process(self, doc: Doc, counters: Counter[str]) -> Drop | None:
        view = TextView(doc.text)
        for r in self.rule_sets:
            if not r.applies(doc.modality, doc.lang):
                continue
            outcome = r.check(view, counters)
            if isinstance(outcome, Drop):
                return outcome
            if isinstance(outcome, str):
                counters[f"{r.preset}.docs_rewritten"] += 1
                if not outcome.strip():
                    return Drop(f"{r.preset}.empty_after_rewrite")
                view = TextView(outcome)
        doc.text = view.text
        return None
