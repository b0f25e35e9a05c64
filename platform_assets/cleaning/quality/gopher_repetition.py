"""Gopher repetition filter (Rae et al. 2021, table A1; numbers in presets.GOPHER_REPETITION): duplicate
lines and paragraphs, top and duplicate n-gram character fractions (n-grams in ngrams.py)."""

from __future__ import annotations

from collections import Counter
from typing import Annotated, Literal

import numpy as np
from pydantic import Field

from platform_assets.cleaning import presets
from platform_assets.cleaning.quality.base import ENGLISH, Langs, Preset, Ratio, RuleSet, ScopedSettings
from platform_assets.cleaning.quality.ngrams import (
    dup_ngram_chars,
    later_occurrences,
    ngram_levels,
    repeat_bound,
    top_ngram_chars,
    union_bound,
)
from platform_assets.cleaning.quality.text_view import TextView, duplicates, split_lines, split_paragraphs
from platform_assets.cleaning.steps import Drop


class GopherRepetitionSettings(ScopedSettings):
    preset: Literal["gopher_repetition"] = "gopher_repetition"
    languages: Langs = ENGLISH
    dup_line_frac: Ratio | None = presets.GOPHER_REPETITION["dup_line_frac"]
    dup_para_frac: Ratio | None = presets.GOPHER_REPETITION["dup_para_frac"]
    dup_line_char_frac: Ratio | None = presets.GOPHER_REPETITION["dup_line_char_frac"]
    dup_para_char_frac: Ratio | None = presets.GOPHER_REPETITION["dup_para_char_frac"]
    top_n_grams: dict[Annotated[int, Field(ge=1, le=20)], Ratio] = Field(
        default_factory=lambda: dict(presets.GOPHER_REPETITION["top_n_grams"])
    )
    dup_n_grams: dict[Annotated[int, Field(ge=1, le=20)], Ratio] = Field(
        default_factory=lambda: dict(presets.GOPHER_REPETITION["dup_n_grams"])
    )


class GopherRepetition(RuleSet):
    """Rae et al. 2021, table A1 (see presets.GOPHER_REPETITION)."""

    preset = "gopher_repetition"
    s: GopherRepetitionSettings
    settings_type = GopherRepetitionSettings

    def __init__(self, settings: GopherRepetitionSettings | None = None):
        super().__init__(settings)
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
        paragraphs = split_paragraphs(text)
        dup, dup_chars = duplicates(paragraphs)
        if d := self.drop_above("dup_para_frac", dup / len(paragraphs), s.dup_para_frac):
            return d
        if d := self.drop_above("dup_para_char_frac", dup_chars / n_chars, s.dup_para_char_frac):
            return d
        lines = split_lines(text)
        dup, dup_chars = duplicates(lines)
        if d := self.drop_above("dup_line_frac", dup / len(lines), s.dup_line_frac):
            return d
        if d := self.drop_above("dup_line_char_frac", dup_chars / n_chars, s.dup_line_char_frac):
            return d
        if view.n_tokens < 2 or not self._max_n:
            return None
        vocab = view.vocab
        cum = np.zeros(len(vocab.ids) + 1, dtype=np.int64)  # characters before each token
        np.cumsum(vocab.lengths[vocab.ids], out=cum[1:])
        # The checks run in datatrove's order, each as soon as its level is computed; levels past the
        # last one with a repeat are never computed (no check can fire there).
        pending = iter(self._ngram_checks)
        measured: dict[tuple[str, int], int | None] = {}
        check = next(pending)
        for level in ngram_levels(vocab, self._max_n):
            n = level.n
            if n in s.top_n_grams:
                measured["top", n] = top_ngram_chars(level, cum)
            if n in s.dup_n_grams and ("dup", n) not in measured:
                later = later_occurrences(level)
                rest = [m for m in s.dup_n_grams if m >= n]
                # A duplicate m-gram (m >= n) starts where an n-gram occurred before, so the m-grams at
                # those positions bound what the dup checks from n on can count. Below every limit (most
                # prose), none of them can fire: no walk, and no larger level is needed for them.
                # The sum first (cheap), the union of the m-grams where the sum is not enough.
                starts = level.pos[later]
                if later.size == 0 or all(
                    repeat_bound(starts, cum, m) <= s.dup_n_grams[m] * n_chars
                    or union_bound(starts, cum, m) <= s.dup_n_grams[m] * n_chars
                    for m in rest
                ):
                    measured.update({("dup", m): None for m in rest})  # None: cannot fire
                else:
                    measured["dup", n] = dup_ngram_chars(level, cum, s.dup_n_grams[n] * n_chars, later)
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


PRESET = Preset("gopher_repetition", GopherRepetition)
