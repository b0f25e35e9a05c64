"""The Gopher symbol-to-word rule on its own, with a configurable symbol list."""

from __future__ import annotations

from collections import Counter
from typing import Literal

from platform_assets.cleaning import presets
from platform_assets.cleaning.quality.base import Preset, RuleSet, ScopedSettings
from platform_assets.cleaning.quality.text_view import TextView
from platform_assets.cleaning.steps import Drop


class SymbolRatioSettings(ScopedSettings):
    """Gopher's symbol-to-word rule on its own, with a configurable symbol list."""

    preset: Literal["symbol_ratio"] = "symbol_ratio"
    symbols: tuple[str, ...] = presets.SYMBOL_RATIO["symbols"]
    max_symbol_word_ratio: float = presets.SYMBOL_RATIO["max_symbol_word_ratio"]


class SymbolRatio(RuleSet):
    preset = "symbol_ratio"
    s: SymbolRatioSettings
    settings_type = SymbolRatioSettings

    def check(self, view: TextView, counters: Counter[str]) -> Drop | None:
        n_tokens = view.n_tokens
        if n_tokens == 0:
            return Drop(f"{self.preset}.no_words")
        symbols = sum(view.text.count(sym) for sym in self.s.symbols)
        return self.drop_above("symbol_word_ratio", symbols / n_tokens, self.s.max_symbol_word_ratio)


PRESET = Preset("symbol_ratio", SymbolRatio)
