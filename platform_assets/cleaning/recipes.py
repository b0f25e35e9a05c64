"""Per-source cleaning recipes: which rules judge a source, and the removal bounds that go with them.

One global recipe judged every source: three ordinary instruction/response pairs were removed by
`gopher_quality.too_few_words` (10 < 50), so an SFT source tripped the blocking removal gate, and a
77-word English paragraph fell to `c4.too_few_sentences`. A source now names its recipe
(`recipe: sft` in its config; `cleaning.default_recipe` otherwise, `web` unless set).

A recipe is a set of overrides applied onto the global `cleaning:` block (mappings merge key by
key, lists and values replace), not a complete block of its own: what a deployment configures once
(the language allow-list, PII types, blocklist path, licences) holds for every recipe, and a recipe
only says what differs for its kind of data. `web` has no overrides: it *is* the global block, so a
source that names no recipe is cleaned exactly as before (same kept ids, same bytes).

Custom recipes (`cleaning.recipes.<name>: {base, overrides, gates}`) start from a built-in or another
custom recipe. Every recipe is resolved when the config loads, so a bad override is a config error
naming the recipe, not a failed run. Every built-in keeps the language and PII steps on (they add the
`lang*` and `pii_redactions` columns that every cleaned source has); a custom recipe that turns them
off gives its sources a narrower schema.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from platform_assets.cleaning.settings import CleaningSettings, RecipeGates, RecipeSettings

WEB = "web"

# Built-in recipes: overrides of the global block, and the recipe's removal bounds.
BUILTIN_RECIPES: dict[str, RecipeSettings] = {
    # The global block as configured (by default FineWeb's sequence: Gopher repetition, Gopher quality,
    # C4 without its punctuation filter, FineWeb's own rules; presets.py has their published numbers).
    WEB: RecipeSettings(),
    # Source files. Every prose preset misjudges code: C4 drops any page with a curly bracket and
    # Gopher's alphabetic-word share (0.8) fails on identifiers with digits and operators. The NSFW
    # blocklist matches identifiers (`kill`, `xxx` placeholders), so it is off. Language ID still labels
    # (comments and strings say which natural language a file is in) but removes nothing: py3langid
    # was trained on prose and scores code low whatever its comments' language. PII redaction stays:
    # keys and tokens committed with code are the commonest leak.
    "code": RecipeSettings(overrides={
        "language": {"allow": None, "min_score": 0.0, "min_score_by_words": {}, "min_script_share": 0.0},
        "quality": [],
        "blocklist": {"enabled": False},
    }),
    # Technical documentation (manuals, READMEs, reference pages): headings, option lists and code
    # listings. C4 removes every line without terminal punctuation (headings, list items, listing
    # lines), drops a page with a curly bracket or fewer than 5 sentences; FineWeb's rules measure the
    # share of such lines (line_punct_ratio, short_line_ratio). Gopher's document-level rules stay with
    # their published thresholds: repetition (boilerplate pages, generated tables) and quality (50 to
    # 100,000 words, word length, symbol share).
    "docs": RecipeSettings(overrides={
        "quality": [{"preset": "gopher_repetition"}, {"preset": "gopher_quality"}],
    }),
    # Instruction and chat data: the turn checks of conversation_filter.py (empty and duplicate turns,
    # no assistant turn, response length) instead of the prose presets, whose page-level minimums
    # (Gopher: 50 words; C4: 3 sentences) remove ordinary short pairs. Language ID, the blocklist
    # and PII redaction stay as configured globally (they rewrite the messages too: chat_messages.py).
    # The seeds' filters (`seed_filters` preset) are off here, as in `web`; a custom recipe based on
    # sft turns them on with `overrides: {quality: [{preset: seed_filters}]}`.
    # Gate: an SFT set is curated; cleaning removing over half of one is a mapping error (a wrong
    # `response_field` leaves every response empty), not dirty data. The global 0.9 bounds web crawls,
    # where the FineWeb sequence removes most of a raw crawl by design. (0.5 is a judgement, not a
    # measurement: no SFT set in ../shared/data to measure on.)
    "sft": RecipeSettings(
        overrides={"quality": [], "conversation": {"enabled": True}},
        gates=RecipeGates(max_removal_rate=0.5),
    ),
}

_NOT_OVERRIDABLE = ("recipes", "default_recipe")


@dataclass(frozen=True)
class Recipe:
    """A resolved recipe: the `cleaning:` settings its sources are cleaned with, and its gate bounds."""

    name: str
    settings: CleaningSettings
    gates: RecipeGates


def recipe_names(cleaning: CleaningSettings) -> list[str]:
    return [*BUILTIN_RECIPES, *cleaning.recipes]


def _definition(cleaning: CleaningSettings, name: str) -> RecipeSettings:
    if name in cleaning.recipes:
        return cleaning.recipes[name]
    if name in BUILTIN_RECIPES:
        return BUILTIN_RECIPES[name]
    raise ValueError(f"unknown cleaning recipe {name!r} (known: {', '.join(recipe_names(cleaning))})")


def _deep_merge(base: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def resolve_recipe(cleaning: CleaningSettings, name: str | None = None) -> Recipe:
    """The recipe `name` (None: `cleaning.default_recipe`) over the global block `cleaning`.

    Raises ValueError for an unknown name (naming the known ones), a cycle of bases, or overrides
    that do not validate as a `cleaning:` block."""
    return _resolve(cleaning, name or cleaning.default_recipe, ())


def _resolve(cleaning: CleaningSettings, name: str, chain: tuple[str, ...]) -> Recipe:
    if name in chain:
        raise ValueError(f"cleaning recipes form a cycle: {' -> '.join([*chain, name])}")
    definition = _definition(cleaning, name)
    if name == WEB:
        return Recipe(WEB, cleaning, definition.gates or RecipeGates())
    base = _resolve(cleaning, definition.base, (*chain, name))
    gates = _merge_gates(base.gates, definition.gates)
    if not definition.overrides:
        return Recipe(name, base.settings, gates)
    bad = [k for k in _NOT_OVERRIDABLE if k in definition.overrides]
    if bad:
        raise ValueError(f"cleaning recipe {name!r}: {', '.join(bad)} cannot be overridden by a recipe")
    merged = _deep_merge(base.settings.model_dump(exclude=set(_NOT_OVERRIDABLE)), definition.overrides)
    try:
        settings = CleaningSettings.model_validate(merged)
    except ValidationError as err:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in err.errors())
        raise ValueError(f"cleaning recipe {name!r}: {problems}") from None
    return Recipe(name, settings, gates)


def _merge_gates(base: RecipeGates, own: RecipeGates | None) -> RecipeGates:
    """The base recipe's bounds with the ones this recipe sets in their place, like its overrides."""
    if own is None:
        return base
    return RecipeGates(
        max_removal_rate=own.max_removal_rate if own.max_removal_rate is not None else base.max_removal_rate,
        max_rule_removal_rate=own.max_rule_removal_rate if own.max_rule_removal_rate is not None
        else base.max_rule_removal_rate,
        rule_bounds={**base.rule_bounds, **own.rule_bounds},
    )


def check_recipes(cleaning: CleaningSettings) -> None:
    """Resolve the default recipe and every custom one (called when the `cleaning:` block loads)."""
    shadowing = sorted(set(cleaning.recipes) & set(BUILTIN_RECIPES))
    if shadowing:
        raise ValueError(f"cleaning.recipes: {', '.join(shadowing)} is a built-in recipe; pick another name")
    for name in [cleaning.default_recipe, *cleaning.recipes]:
        resolve_recipe(cleaning, name)


Gates = TypeVar("Gates", bound=BaseModel)


def apply_gates(gates: Gates, recipe: RecipeGates) -> Gates:
    """The global `cleaning_gates` with the recipe's bounds in place (rule bounds merged over them)."""
    update: dict[str, Any] = {k: v for k in ("max_removal_rate", "max_rule_removal_rate")
                              if (v := getattr(recipe, k)) is not None}
    if recipe.rule_bounds:
        update["rule_bounds"] = {**gates.rule_bounds, **recipe.rule_bounds}  # type: ignore[attr-defined]
    return gates.model_copy(update=update) if update else gates
