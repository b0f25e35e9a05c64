"""Cleaning and quality filtering of documents (Dagster-free).

The asset wrapper builds one pipeline from the config and feeds it record batches::

    from platform_assets.cleaning import build_pipeline

    pipeline = build_pipeline(cfg.cleaning)            # CleaningSettings
    for batch in batches:                              # pa.RecordBatch in DOCUMENTS_SCHEMA
        result = pipeline.process_batch(batch)
        write(result.kept)                             # + lang, lang_score, pii_redactions
        write_exclusions(result.exclusions)            # EXCLUSIONS_SCHEMA: id, rule, value, bytes
    funnel = pipeline.funnel()                         # docs/bytes in, removed per rule, out
    metadata = funnel.to_metadata()

Steps (each usable on its own, all following :class:`~platform_assets.cleaning.steps.Step`): guard,
html, normalize, language, quality (rule-set presets), blocklist, pii.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from platform_assets.cleaning.pipeline import (
        CleaningPipeline,
        CleaningResult,
        Funnel,
        build_pipeline,
        build_steps,
    )
    from platform_assets.cleaning.settings import CleaningSettings
    from platform_assets.cleaning.steps import EXCLUSIONS_SCHEMA, Drop, Step, StepResult, StepStats

# Exports resolve on first use (PEP 562): the pipeline config imports `cleaning.settings` when it
# loads, and must not pay for Resiliparse, ftfy and the regex tables (~0.5 s) just to validate YAML.
_EXPORTS = {
    "CleaningPipeline": "pipeline",
    "CleaningResult": "pipeline",
    "Funnel": "pipeline",
    "build_pipeline": "pipeline",
    "build_steps": "pipeline",
    "CleaningSettings": "settings",
    "EXCLUSIONS_SCHEMA": "steps",
    "Drop": "steps",
    "Step": "steps",
    "StepResult": "steps",
    "StepStats": "steps",
}
__all__ = [
    "EXCLUSIONS_SCHEMA",
    "CleaningPipeline",
    "CleaningResult",
    "CleaningSettings",
    "Drop",
    "Funnel",
    "Step",
    "StepResult",
    "StepStats",
    "build_pipeline",
    "build_steps",
]


assert sorted(__all__) == sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
