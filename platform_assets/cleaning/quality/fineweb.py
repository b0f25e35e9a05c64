"""FineWeb filters (Penedo et al. 2024, section 3.4; numbers in presets.FINEWEB)."""

from __future__ import annotations

from collections import Counter
from operator import itemgetter
from typing import Literal

from platform_assets.cleaning import presets
from platform_assets.cleaning.quality.base import ENGLISH, Count, Langs, Preset, Ratio, RuleSet, ScopedSettings
from platform_assets.cleaning.quality.text_view import TextView, duplicates
from platform_assets.cleaning.steps import Drop, below

_LAST_CHAR = itemgetter(-1)


class FineWebSettings(ScopedSettings):
    preset: Literal["fineweb"] = "fineweb"
    languages: Langs = ENGLISH
    line_punct_thr: Ratio | None = presets.FINEWEB["line_punct_thr"]
    line_punct_exclude_zero: bool = presets.FINEWEB["line_punct_exclude_zero"]
    short_line_thr: Ratio | None = presets.FINEWEB["short_line_thr"]
    short_line_length: Count = presets.FINEWEB["short_line_length"]
    char_duplicates_ratio: Ratio | None = presets.FINEWEB["char_duplicates_ratio"]
    new_line_ratio: float | None = presets.FINEWEB["new_line_ratio"]


class FineWeb(RuleSet):
    """Penedo et al. 2024, 3.4 (see presets.FINEWEB)."""

    preset = "fineweb"
    s: FineWebSettings
    settings_type = FineWebSettings

    def __init__(self, settings: FineWebSettings | None = None):
        super().__init__(settings)
        self.stop_chars = presets.TERMINAL_PUNCTUATION  # single characters: a set lookup of the last one

    def check(self, view: TextView, counters: Counter[str]) -> Drop | None:
        s, text = self.s, view.text
        points = view.code_points
        if points is not None:  # one compiled pass over the lines (line_stats.py)
            from platform_assets.cleaning.quality.line_stats import nonblank_line_stats  # numba: where rules run

            n_lines, punctuated, short, repeated_chars = nonblank_line_stats(points, self.stop_chars,
                                                                             s.short_line_length, view.newlines)
        else:  # beyond the BMP: map() chains (C loops) over the lines as strings
            lines = view.nonblank_lines
            n_lines = len(lines)
            punctuated = sum(map(self.stop_chars.__contains__, map(_LAST_CHAR, lines)))
            short = sum(map(s.short_line_length.__ge__, map(len, lines)))
            repeated_chars = duplicates(lines)[1]
        if not n_lines:
            return Drop(f"{self.preset}.empty")
        if s.line_punct_thr is not None:
            ratio = punctuated / n_lines
            if ratio < s.line_punct_thr and not (ratio == 0 and s.line_punct_exclude_zero):
                return below(f"{self.preset}.line_punct_ratio", ratio, s.line_punct_thr)
        if s.short_line_thr is not None:
            ratio = short / n_lines
            if d := self.drop_above("short_line_ratio", ratio, s.short_line_thr):
                return d
        if s.char_duplicates_ratio is not None:
            denominator = len(text) - text.count("\n")
            ratio = repeated_chars / denominator if denominator else 0.0
            if d := self.drop_above("char_dup_ratio", ratio, s.char_duplicates_ratio):
                return d
        if s.new_line_ratio is not None:
            n_tokens = view.n_tokens
            ratio = text.count("\n") / n_tokens if n_tokens else float("inf")
            if d := self.drop_above("list_ratio", ratio, s.new_line_ratio):
                return d
        return None


PRESET = Preset("fineweb", FineWeb)
