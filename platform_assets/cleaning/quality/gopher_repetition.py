"""Gopher repetition filter (Rae et al. 2021, table A1; numbers in presets.GOPHER_REPETITION): duplicate
lines and paragraphs, top and duplicate n-gram character fractions (n-grams: ngram_kernels.ngram_check_values,
one compiled call per document, defined by and tested against ngrams.py)."""

from __future__ import annotations

from collections import Counter
from typing import Annotated, Literal

import numpy as np
from pydantic import Field

from platform_assets.cleaning import presets
from platform_assets.cleaning.quality.base import ENGLISH, Langs, Preset, Ratio, RuleSet, ScopedSettings
from platform_assets.cleaning.quality.text_view import TextView
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
        self._check_kinds = np.array([kind == "dup" for kind, _, _ in self._ngram_checks], dtype=np.int64)
        self._check_ns = np.array([n for _, n, _ in self._ngram_checks], dtype=np.int64)
        self._check_limits = np.array([limit for _, _, limit in self._ngram_checks], dtype=np.float64)

    def check(self, view: TextView, counters: Counter[str]) -> Drop | None:
        s, text = self.s, view.text
        n_chars = len(text)
        if n_chars == 0:
            return Drop(f"{self.preset}.empty")
        n_paragraphs, dup, dup_chars = view.repeated_pieces(paragraphs=True)
        if d := self.drop_above("dup_para_frac", dup / n_paragraphs, s.dup_para_frac):
            return d
        if d := self.drop_above("dup_para_char_frac", dup_chars / n_chars, s.dup_para_char_frac):
            return d
        n_lines, dup, dup_chars = view.repeated_pieces(paragraphs=False)
        if d := self.drop_above("dup_line_frac", dup / n_lines, s.dup_line_frac):
            return d
        if d := self.drop_above("dup_line_char_frac", dup_chars / n_chars, s.dup_line_char_frac):
            return d
        if view.vocab.ids.size < 2 or not self._max_n:  # the vocabulary: the n-grams read it next
            return None
        # numba takes ~0.15 s to import: only where the rules run, not wherever the settings are read
        from platform_assets.cleaning.quality.ngram_kernels import NO_VALUE, ngram_check_values

        vocab = view.vocab
        # Every n-gram check in datatrove's order, in one compiled call: values up to the first check
        # that fires (the same values and decisions as the levels, bounds and walks of ngrams.py)
        values = ngram_check_values(vocab.ids, vocab.counts, vocab.first, vocab.lengths, self._check_kinds,
                                    self._check_ns, self._check_limits, n_chars)
        for check, value in zip(self._ngram_checks, values.tolist(), strict=True):
            if d := self._ngram_drop(check, None if value == NO_VALUE else value, n_chars):
                return d
        return None

    def _ngram_drop(self, check: tuple[str, int, float], value: int | None, n_chars: int) -> Drop | None:
        kind, n, limit = check
        if value is None:
            return None
        return self.drop_above(f"{kind}_{n}_gram_char_frac", value / n_chars, limit)


PRESET = Preset("gopher_repetition", GopherRepetition)
