"""The registry of quality presets: one module per preset, one line here.

A preset is its settings model (thresholds, with `preset: Literal["<name>"]` as the config key) and
its rule set (``check(view) -> Drop | str | None``); `quality/base.py` says what both must provide.
Adding one (say `toxicity_words`) is a module `quality/toxicity_words.py` ending in
``PRESET = Preset("toxicity_words", ToxicityWords)`` and one line below;
the config then accepts ``- preset: toxicity_words`` with its fields, and nothing else changes.
"""

from __future__ import annotations

from typing import Annotated, Any, Union

from pydantic import Field

from platform_assets.cleaning import presets
from platform_assets.cleaning.quality import (
    c4,
    code_ratio,
    custom,
    fineweb,
    gopher_quality,
    gopher_repetition,
    length,
    seed_filters,
    symbol_ratio,
)
from platform_assets.cleaning.quality.base import Preset, RuleSet, ScopedSettings

REGISTRY: dict[str, Preset] = {p.name: p for p in (
    gopher_quality.PRESET,
    gopher_repetition.PRESET,
    c4.PRESET,
    fineweb.PRESET,
    length.PRESET,
    symbol_ratio.PRESET,
    code_ratio.PRESET,
    custom.PRESET,
    seed_filters.PRESET,
)}

# The `quality:` list's item type: pydantic picks the model by its `preset` key (a discriminated
# union built from the registry, so a new preset needs no edit here either).
QualityPreset = Annotated[Union[tuple(p.settings for p in REGISTRY.values())], Field(discriminator="preset")]  # noqa: UP007
PRESET_SETTINGS: dict[str, type[ScopedSettings]] = {name: p.settings for name, p in REGISTRY.items()}


def preset(name: str, **overrides: Any) -> ScopedSettings:
    """A rule set's settings by preset name, e.g. ``preset("c4", filter_no_terminal_punct=False)``."""
    try:
        cls = PRESET_SETTINGS[name]
    except KeyError:
        raise ValueError(f"unknown quality preset {name!r} (known: {', '.join(PRESET_SETTINGS)})") from None
    return cls(**overrides)


def rule_set(settings: ScopedSettings) -> RuleSet:
    """The rule set that runs a preset's settings."""
    return REGISTRY[settings.preset].rule_set(settings)  # type: ignore[attr-defined]


def fineweb_recipe() -> list[ScopedSettings]:
    """FineWeb's filter sequence: Gopher repetition, Gopher quality, C4 (no punctuation filter), FineWeb."""
    return [preset(p["preset"], **{k: v for k, v in p.items() if k != "preset"}) for p in presets.FINEWEB_RECIPE]


__all__ = ["PRESET_SETTINGS", "REGISTRY", "Preset", "QualityPreset", "RuleSet", "ScopedSettings", "fineweb_recipe",
           "preset", "rule_set"]
