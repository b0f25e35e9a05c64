"""Composes cleaning steps over record batches; collects exclusions and the funnel.

Memory is bounded by the batch: each step returns a new (smaller or rewritten) batch and the stage
never holds more than one input batch and its derivatives. Counts accumulate across batches in the
pipeline, so after the last batch :meth:`CleaningPipeline.funnel` describes the whole partition.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from platform_assets.cleaning.blocklist import BlocklistFilter
from platform_assets.cleaning.conversation_filter import ConversationFilter
from platform_assets.cleaning.guard import Guard
from platform_assets.cleaning.html_extract import HtmlExtract
from platform_assets.cleaning.language_id import LanguageFilter
from platform_assets.cleaning.license_gate import LicenseGate
from platform_assets.cleaning.media_filters import AudioFilter, ImageFilter
from platform_assets.cleaning.normalize import Normalize
from platform_assets.cleaning.pii import PiiRedact
from platform_assets.cleaning.quality.step import QualityStep
from platform_assets.cleaning.settings import CleaningSettings
from platform_assets.cleaning.steps import EXCLUSIONS_SCHEMA, Step, StepStats
from platform_assets.contracts import DEFAULT_IO


class FunnelError(RuntimeError):
    """The cleaning counts do not add up: a bug in a step, never a property of the input."""


@dataclass
class CleaningResult:
    kept: pa.RecordBatch
    """The documents that passed, text rewritten, with the columns the steps added."""
    exclusions: pa.RecordBatch
    """One row per removed document (EXCLUSIONS_SCHEMA)."""
    stats: list[StepStats]
    """This batch's counts, one per step in order."""
    step_exclusions: list[pa.RecordBatch | None] | None = None
    """`exclusions` by step (None where a step removed nothing), so that the results of consecutive
    slices of a batch merge into the batch's own result (:func:`merge_results`)."""


@dataclass
class Funnel:
    """Documents and bytes through the steps: in, removed per rule, rewritten, out."""

    steps: list[StepStats]

    @property
    def docs_in(self) -> int:
        return self.steps[0].docs_in if self.steps else 0

    @property
    def bytes_in(self) -> int:
        return self.steps[0].bytes_in if self.steps else 0

    @property
    def docs_out(self) -> int:
        return self.steps[-1].docs_out if self.steps else 0

    @property
    def bytes_out(self) -> int:
        return self.steps[-1].bytes_out if self.steps else 0

    @property
    def docs_removed(self) -> int:
        return sum(s.docs_removed for s in self.steps)

    @property
    def bytes_removed(self) -> int:
        return sum(s.bytes_removed for s in self.steps)

    @property
    def bytes_rewritten(self) -> int:
        """Bytes taken out of kept documents (HTML boilerplate, C4 lines, normalisation, redaction)."""
        return sum(s.bytes_rewritten for s in self.steps)

    def removed_by_rule(self) -> dict[str, dict[str, int]]:
        """{rule: {"docs": n, "bytes": n}} in pipeline order."""
        out: dict[str, dict[str, int]] = {}
        for s in self.steps:
            for rule, n in s.removed_docs.items():
                entry = out.setdefault(rule, {"docs": 0, "bytes": 0})
                entry["docs"] += n
                entry["bytes"] += s.removed_bytes[rule]
        return out

    def removal_rate(self) -> float:
        return self.docs_removed / self.docs_in if self.docs_in else 0.0

    def check(self) -> None:
        """Raise FunnelError if the counts do not add up (they always should: a bug otherwise). Not
        `assert`: the check must hold under `python -O` too."""
        prev: StepStats | None = None
        problems = []
        for s in self.steps:
            if s.docs_in != s.docs_out + s.docs_removed:
                problems.append(f"{s.step}: docs in {s.docs_in} != out {s.docs_out} + removed {s.docs_removed}")
            if prev is not None and s.docs_in != prev.docs_out:
                problems.append(f"{s.step}: docs in {s.docs_in} != {prev.step}'s docs out {prev.docs_out}")
            if prev is not None and s.bytes_in != prev.bytes_out:
                problems.append(f"{s.step}: bytes in {s.bytes_in} != {prev.step}'s bytes out {prev.bytes_out}")
            prev = s
        if self.docs_in != self.docs_out + self.docs_removed:
            problems.append(f"docs in {self.docs_in} != out {self.docs_out} + removed {self.docs_removed}")
        if self.bytes_in != self.bytes_out + self.bytes_removed + self.bytes_rewritten:
            problems.append(f"bytes in {self.bytes_in} != out {self.bytes_out} + removed {self.bytes_removed} "
                            f"+ rewritten {self.bytes_rewritten}")
        if problems:
            raise FunnelError("cleaning counts do not add up: " + "; ".join(problems))

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: totals, per-rule removals and every step's counts."""
        return {
            "docs_in": self.docs_in,
            "bytes_in": self.bytes_in,
            "docs_removed": self.docs_removed,
            "bytes_removed": self.bytes_removed,
            "bytes_rewritten": self.bytes_rewritten,
            "docs_out": self.docs_out,
            "bytes_out": self.bytes_out,
            "removal_rate": round(self.removal_rate(), 6),
            "removed_by_rule": self.removed_by_rule(),
            "steps": [s.to_dict() for s in self.steps],
        }

    def to_markdown(self) -> str:
        """A table for the UI: one row per step, then one per rule that removed something."""
        rows = [
            "| step / rule | docs | bytes |",
            "|---|---:|---:|",
            f"| **in** | {self.docs_in} | {self.bytes_in} |",
        ]
        for s in self.steps:
            extra = []
            if s.skipped:
                extra.append(f"{s.skipped} skipped")
            if s.modified:
                # bytes_rewritten counts bytes taken out, so the text's change is its negative
                extra.append(f"{s.modified} rewritten, {-s.bytes_rewritten:+d} bytes")
            note = f" ({'; '.join(extra)})" if extra else ""
            rows.append(f"| {s.step}{note} | -{s.docs_removed} | -{s.bytes_removed} |")
            for rule, n in sorted(s.removed_docs.items(), key=lambda kv: -kv[1]):
                rows.append(f"| &nbsp;&nbsp;{rule} | -{n} | -{s.removed_bytes[rule]} |")
        rows.append(f"| **out** | {self.docs_out} | {self.bytes_out} |")
        return "\n".join(rows)

    def to_metadata(self) -> dict[str, Any]:
        """Plain values for the asset's materialization metadata (wrap them in MetadataValue there)."""
        return {
            "docs_in": self.docs_in,
            "docs_out": self.docs_out,
            "bytes_in": self.bytes_in,
            "bytes_out": self.bytes_out,
            "docs_removed": self.docs_removed,
            "removal_rate": round(self.removal_rate(), 6),
            "removed_by_rule": {rule: v["docs"] for rule, v in self.removed_by_rule().items()},
            "funnel": self.to_markdown(),
            "counters": self.counters(),
        }

    def counters(self) -> dict[str, int]:
        """Step-specific counts, prefixed by step: pii.EMAIL, language.lang.de, quality.c4.lines_removed..."""
        out: Counter[str] = Counter()
        for s in self.steps:
            for k, v in s.counters.items():
                out[f"{s.step}.{k}"] += v
        return dict(sorted(out.items()))


def exclusion_counts(exclusions: pa.Table | pa.RecordBatch) -> dict[str, dict[str, int]]:
    """{rule: {"docs", "bytes"}} from exclusion records: must equal Funnel.removed_by_rule()."""
    table = exclusions if isinstance(exclusions, pa.Table) else pa.Table.from_batches([exclusions])
    if table.num_rows == 0:
        return {}
    grouped = table.group_by("rule").aggregate([("id", "count"), ("bytes", "sum")]).to_pylist()
    return {g["rule"]: {"docs": g["id_count"], "bytes": g["bytes_sum"]} for g in grouped}


def _concat_exclusions(batches: list[pa.RecordBatch]) -> pa.RecordBatch:
    if not batches:
        return pa.RecordBatch.from_arrays([pa.array([], f.type) for f in EXCLUSIONS_SCHEMA], schema=EXCLUSIONS_SCHEMA)
    return pa.concat_batches(batches) if len(batches) > 1 else batches[0]


def merge_results(parts: Sequence[CleaningResult]) -> CleaningResult:
    """The result of a batch from those of its consecutive slices, as if it had been cleaned whole:
    kept rows in order, exclusions step by step (a step's rows of every slice before the next step's),
    counts summed. Cleaning is per document, so the two are equal, and so are the bytes written."""
    if len(parts) == 1:
        return parts[0]
    kept = pa.concat_batches([p.kept for p in parts])
    steps = len(parts[0].stats)
    by_step: list[pa.RecordBatch | None] = []
    for i in range(steps):
        pieces = []
        for p in parts:
            if p.step_exclusions is None:
                raise ValueError("merge_results needs each slice's exclusions by step")
            if (piece := p.step_exclusions[i]) is not None:
                pieces.append(piece)
        by_step.append(_concat_exclusions(pieces) if pieces else None)
    stats = []
    for i in range(steps):
        total = StepStats(parts[0].stats[i].step)
        for p in parts:
            total.merge(p.stats[i])
        stats.append(total)
    return CleaningResult(kept, _concat_exclusions([e for e in by_step if e is not None]), stats, by_step)


class CleaningPipeline:
    """Runs steps in order over each batch; keeps running totals per step for the funnel."""

    def __init__(self, steps: Sequence[Step]):
        names = [s.name for s in steps]
        if len(set(names)) != len(names):
            raise ValueError(f"step names must be unique (they prefix the rules): {names}")
        self.steps = list(steps)
        self._totals = {s.name: StepStats(s.name) for s in self.steps}
        self._loaded = False

    def output_schema(self, input_schema: pa.Schema) -> pa.Schema:
        """The kept batches' schema: the input's, plus each step's added columns, in step order."""
        schema = input_schema
        for step in self.steps:
            for f in step.added_fields:
                i = schema.get_field_index(f.name)
                schema = schema.set(i, f) if i >= 0 else schema.append(f)
        return schema

    def load(self) -> None:
        """Load the steps' kernels (Step.load), once; the first batch does if nobody did before."""
        if not self._loaded:
            for step in self.steps:
                step.load()
            self._loaded = True

    def process_batch(self, batch: pa.RecordBatch) -> CleaningResult:
        self.load()  # outside the steps' timing
        by_step: list[pa.RecordBatch | None] = []
        stats = []
        # the text column as Python strings while one document step hands them to the next (the batch
        # then goes without it: handed_texts.py); the last step returns the batch whole
        texts = None
        for i, step in enumerate(self.steps):
            hand_on = step.takes_texts and i + 1 < len(self.steps) and self.steps[i + 1].takes_texts
            result = step.run(batch, texts, hand_on=hand_on)
            batch, texts = result.kept, result.kept_texts
            by_step.append(result.exclusions if result.exclusions.num_rows else None)
            stats.append(result.stats)
            self._totals[step.name].merge(result.stats)
        return CleaningResult(batch, _concat_exclusions([e for e in by_step if e is not None]), stats, by_step)

    def process_batches(self, batches: Iterable[pa.RecordBatch]) -> Iterator[CleaningResult]:
        for batch in batches:
            yield self.process_batch(batch)

    def process_table(self, table: pa.Table, batch_rows: int = DEFAULT_IO.batch_rows) -> tuple[pa.Table, pa.Table]:
        """(kept, exclusions) for a whole table, in batches of `batch_rows`."""
        kept, excl = [], []
        for result in self.process_batches(table.to_batches(max_chunksize=batch_rows)):
            kept.append(result.kept)
            excl.append(result.exclusions)
        kept_schema = self.output_schema(table.schema)
        return pa.Table.from_batches(kept, schema=kept_schema), pa.Table.from_batches(
            excl, schema=EXCLUSIONS_SCHEMA
        )

    def funnel(self) -> Funnel:
        return Funnel([self._totals[s.name] for s in self.steps])

    def reset(self) -> None:
        self._totals = {s.name: StepStats(s.name) for s in self.steps}


StepBuilder = Callable[[CleaningSettings], Step | None]
"""The step a `cleaning:` config asks for (None: switched off)."""

# The registry of steps, in the order they run: filters before redaction, so that redaction (the
# slowest regex work) only touches survivors and quality statistics see the author's text. A new step
# is its module and one line here (with its settings section in CleaningSettings).
STEP_BUILDERS: dict[str, StepBuilder] = {
    # first: no work is spent on a document the licence gate drops (only in `drop` mode; `fail` mode
    # is the blocking check `license_allowed` on the output)
    "licenses": lambda s: LicenseGate(s.licenses)
    if s.licenses.enabled and s.licenses.on_missing_or_disallowed == "drop" else None,
    "guard": lambda s: Guard(s.guard) if s.guard.enabled else None,
    "images": lambda s: ImageFilter(s.images) if s.images.enabled else None,
    "audio": lambda s: AudioFilter(s.audio) if s.audio.enabled else None,
    "html": lambda s: HtmlExtract(s.html, on_error=s.on_error) if s.html.enabled else None,
    "normalize": lambda s: Normalize(s.normalize, on_error=s.on_error) if s.normalize.enabled else None,
    # a chat document's turns, once normalised (a turn of zero-width spaces is empty by then); only
    # recipes for instruction data turn it on (`sft`)
    "conversation": lambda s: ConversationFilter(s.conversation, on_error=s.on_error)
    if s.conversation.enabled else None,
    "language": lambda s: LanguageFilter(s.language, on_error=s.on_error) if s.language.enabled else None,
    "quality": lambda s: QualityStep(s.quality, on_error=s.on_error) if s.quality else None,
    "blocklist": lambda s: BlocklistFilter(s.blocklist, on_error=s.on_error) if s.blocklist.enabled else None,
    "pii": lambda s: PiiRedact(s.pii, on_error=s.on_error) if s.pii.enabled else None,
}


def build_steps(settings: CleaningSettings | None = None) -> list[Step]:
    """The configured steps, in the registry's order (see CleaningSettings)."""
    s = settings or CleaningSettings()
    return [step for build in STEP_BUILDERS.values() if (step := build(s)) is not None]


def build_pipeline(settings: CleaningSettings | None = None) -> CleaningPipeline:
    return CleaningPipeline(build_steps(settings))
