"""A small set of our own: shouting, digit tables, link farms, undecodable leftovers (presets.CUSTOM)."""

from __future__ import annotations

import re
from collections import Counter
from typing import Literal

import regex

from platform_assets.cleaning import presets
from platform_assets.cleaning.quality.base import Count, Preset, Ratio, RuleSet, ScopedSettings
from platform_assets.cleaning.quality.text_view import TextView
from platform_assets.cleaning.steps import Drop


class CustomSettings(ScopedSettings):
    """A small set of our own: shouting, digit tables, link farms, undecodable leftovers."""

    preset: Literal["custom"] = "custom"
    max_uppercase_ratio: Ratio | None = presets.CUSTOM["max_uppercase_ratio"]
    min_letters_for_case: Count = presets.CUSTOM["min_letters_for_case"]
    max_digit_ratio: Ratio | None = presets.CUSTOM["max_digit_ratio"]
    max_url_word_ratio: Ratio | None = presets.CUSTOM["max_url_word_ratio"]
    max_replacement_char_ratio: Ratio | None = presets.CUSTOM["max_replacement_char_ratio"]


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
    settings_type = CustomSettings

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


PRESET = Preset("custom", Custom)
