"""Plain length bounds in characters, words and lines (numbers in presets.LENGTH)."""

from __future__ import annotations

from collections import Counter
from typing import Literal

from platform_assets.cleaning import presets
from platform_assets.cleaning.quality.base import Count, Preset, RuleSet, ScopedSettings
from platform_assets.cleaning.quality.text_view import TextView
from platform_assets.cleaning.steps import Drop


class LengthSettings(ScopedSettings):
    """Plain length bounds (every language; characters are counted after normalisation)."""

    preset: Literal["length"] = "length"
    min_chars: Count | None = presets.LENGTH["min_chars"]
    max_chars: Count | None = presets.LENGTH["max_chars"]
    min_words: Count | None = presets.LENGTH["min_words"]
    max_words: Count | None = presets.LENGTH["max_words"]
    min_lines: Count | None = presets.LENGTH["min_lines"]
    max_lines: Count | None = presets.LENGTH["max_lines"]


class Length(RuleSet):
    preset = "length"
    s: LengthSettings
    settings_type = LengthSettings

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


PRESET = Preset("length", Length)
