"""The quality step: the configured presets' rule sets over each document, one TextView shared by all.

Where the time goes, and what keeps it down (FineWeb's four rule sets on 43 MB of the real corpus,
one core: ~6 MB/s, 1.8x the first version, 14x datatrove; benchmarks/cleaning_quality_rules.py; and
in issue #13, benchmarks/cleaning_stage.py, 2.6 -> 1.9 CPU-s with numpy, then ~0.9 with numba): the
per-token and per-line loops are compiled kernels, one call per document: the vocabulary from the
text's code points (array_vocab.py, kernels.py; `re`/`regex` and a dict below 64 characters or
beyond the BMP), the n-gram levels, bounds and duplicate walks (kernels.py), the word figures over
distinct tokens weighted by counts, and the line statistics of every rule set (line_stats.py); bounds
skip work that cannot change the outcome. The kernels are loaded before the step's first batch (Step.load; ~0.4-0.5 s
per process from numba's cache; ~7 CPU-s to compile where the cache is cold or unwritable).

The checks and their order follow datatrove 0.10.1 (what FineWeb ran), so the first failing check is
the reported reason, as there. Every regex is linear in the input: no nested unbounded quantifiers,
and patterns that could fail after consuming a run of one character are anchored with a lookbehind
so that they are not retried at every position inside the run.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Literal

from platform_assets.cleaning.quality import rule_set
from platform_assets.cleaning.quality.base import RuleSet, ScopedSettings
from platform_assets.cleaning.quality.text_view import TextView
from platform_assets.cleaning.steps import ERROR_RULE, Doc, DocumentStep, Drop


class QualityStep(DocumentStep):
    """Runs rule sets in order over each document; the first that removes it gives the reason.

    A rule set that rewrites the text (C4) hands the rewritten text to the ones after it, as a
    datatrove pipeline does. A document that no rule set applies to is counted as skipped.
    """

    name = "quality"

    def __init__(
        self,
        rule_sets: Sequence[RuleSet | ScopedSettings],
        *,
        on_error: Literal["exclude", "raise"] = "exclude",
    ):
        super().__init__(on_error=on_error)
        self.rule_sets = [r if isinstance(r, RuleSet) else rule_set(r) for r in rule_sets]
        self.reads_meta = any(r.reads_meta for r in self.rule_sets)

    def load(self) -> None:
        from platform_assets.cleaning.quality import (  # numba: where rules run
            array_vocab,
            kernels,
            line_stats,
            ngram_kernels,
            phrase_screen,
        )

        for module in (kernels, ngram_kernels, line_stats, array_vocab, phrase_screen):
            module.load()

    def rule(self, local: str) -> str:
        # rule sets already name their rules "<preset>.<check>"
        return local if local != ERROR_RULE else f"{self.name}.{local}"

    def applies(self, modality: str | None, lang: str | None) -> bool:
        return any(r.applies(modality, lang) for r in self.rule_sets)

    def process(self, doc: Doc, counters: Counter[str]) -> Drop | None:
        view = TextView(doc.text, doc)
        for r in self.rule_sets:
            if not r.applies(doc.modality, doc.lang):
                continue
            outcome = r.check(view, counters)
            if isinstance(outcome, Drop):
                return outcome
            if isinstance(outcome, str):
                counters[f"{r.preset}.docs_rewritten"] += 1
                if not outcome.strip():
                    return Drop(f"{r.preset}.empty_after_rewrite")
                view = TextView(outcome, doc)
        doc.text = view.text
        return None
