"""What a quality preset is: its settings (thresholds, scope) and its rule set, one module each, one
registry line each (`quality/__init__.py`).

A rule set's ``check(view) -> Drop | str | None``: a Drop removes the document (rule
``<preset>.<check>``, value "measured <op> threshold"), a string replaces its text (C4 removes
lines), None keeps it.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Annotated, ClassVar

from pydantic import Field

from platform_assets.cleaning.quality.text_view import TextView
from platform_assets.cleaning.steps import Drop, above, below
from platform_assets.contracts import StrictModel

Ratio = Annotated[float, Field(ge=0.0, le=1.0)]
Count = Annotated[int, Field(ge=0)]
Langs = tuple[str, ...] | None
ENGLISH: tuple[str, ...] = ("en",)
TEXT_SCOPE: tuple[str, ...] = ("text", "html")
"""Modalities the word-based rules apply to by default: a caption, page text or transcript is judged
by the recipe of its media room (short by nature: 'a dog on grass' fails every prose rule)."""


class ScopedSettings(StrictModel):
    """A step that may be limited to some modalities and languages (None: all)."""

    modalities: tuple[str, ...] | None = TEXT_SCOPE
    languages: Langs = None
    """Apply only to documents whose `lang` (set by the language step) is listed."""


class RuleSet:
    """One named preset: `check` returns a Drop, a rewritten text, or None."""

    preset: ClassVar[str]

    settings_type: ClassVar[type[ScopedSettings]]

    reads_meta: ClassVar[bool] = False
    """Does `check` read `view.doc.meta` (chat messages, instruction fields)? The quality step then
    hands each document's `meta` over; others never pay for the column."""
    """The preset's settings model: a rule set made without settings runs the published defaults."""

    def __init__(self, settings: ScopedSettings | None = None):
        settings = settings if settings is not None else self.settings_type()
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


@dataclass(frozen=True)
class Preset:
    """One registered quality preset: `preset: <name>` in the config picks the rule set's settings
    model (`rule_set.settings_type`), and `rule_set` runs it."""

    name: str
    rule_set: type[RuleSet]

    @property
    def settings(self) -> type[ScopedSettings]:
        return self.rule_set.settings_type
