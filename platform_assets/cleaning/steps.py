"""The contract every cleaning step follows, and its accounting.

A step takes an Arrow record batch of documents and returns a :class:`StepResult`: the kept batch
(text possibly rewritten, columns possibly added), the removed documents as exclusion records
(``id, rule, value, bytes``) and a :class:`StepStats` that counts documents and bytes in, out, removed
per rule and rewritten. That is datatrove's contract ("every step counts what it kept, dropped and
why"), over record batches instead of one Python object per document.

Most steps are per-document Python logic: they subclass :class:`DocumentStep` and implement
``process(doc, counters)``, returning a :class:`Drop` to remove the document or ``None`` to keep it
(after changing ``doc.text`` or filling ``doc.out`` if they like). Steps that can work on whole
columns (the guard) implement ``__call__`` directly and use :func:`assemble_result`.

Bytes are UTF-8 bytes of ``text`` as the step saw it. Per step,
``bytes_in == bytes_out + removed bytes + bytes_rewritten`` (rewritten: bytes taken out of kept
documents by HTML extraction, normalisation, C4 line removal, redaction; negative if text grew).
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import pyarrow as pa
import pyarrow.compute as pc

from platform_assets.cleaning.chat_messages import rewrite_messages
from platform_assets.cleaning.handed_texts import HandedTexts, attach_texts
from platform_assets.contracts import Counts, chat_candidates, exclusions_schema
from platform_assets.schema import MEDIA_MODALITIES

# One row per removed document: the shared exclusion columns (id, rule, value, bytes). `bytes` is the
# document's UTF-8 size when it was removed (what the funnel counts).
EXCLUSIONS_SCHEMA = exclusions_schema("cleaning")

ERROR_RULE = "error"
"""Local rule name of a document whose processing raised (with on_error='exclude')."""

_VALUE_MAX_CHARS = 200  # exclusion values are for humans and GROUP BY, never whole documents


@dataclass(frozen=True, slots=True)
class Drop:
    """Remove the document: `rule` is the step-local check name, `value` what tripped it."""

    rule: str
    value: str | None = None


def fmt(x: float | int) -> str:
    """A short, stable rendering of a measured value or threshold: 37, 0.4167, 1e-05."""
    if isinstance(x, int):
        return str(x)
    return f"{x:.4g}"


def above(rule: str, measured: float | int, limit: float | int) -> Drop:
    return Drop(rule, f"{fmt(measured)} > {fmt(limit)}")


def below(rule: str, measured: float | int, limit: float | int) -> Drop:
    return Drop(rule, f"{fmt(measured)} < {fmt(limit)}")


@dataclass(slots=True)
class Doc:
    """One document as a step sees it. Steps may rewrite `text` and fill `out` (added columns)."""

    id: str
    text: str
    modality: str | None
    lang: str | None  # set by an earlier language step, else None
    out: dict[str, Any] = field(default_factory=dict)
    prepared: Any = None
    """What the step's :meth:`DocumentStep.prepare` computed for this document over the whole batch."""
    meta: str | None = None
    """The document's `meta` JSON, for steps with `reads_meta` (else None)."""


@dataclass
class StepStats(Counts):
    """What one step did to the documents it was given (summed over batches with `merge`, which
    contracts.Counts derives from the fields: numbers and Counters add, the step names must match)."""

    step: str
    docs_in: int = 0
    docs_out: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    skipped: int = 0
    """Documents the step did not apply to (modality or language not in its scope); kept unchanged."""
    modified: int = 0
    """Kept documents whose text the step changed."""
    removed_docs: Counter[str] = field(default_factory=Counter)
    removed_bytes: Counter[str] = field(default_factory=Counter)
    counters: Counter[str] = field(default_factory=Counter)
    """Step-specific counts: redactions per PII type, lines removed, fixes applied, ..."""
    seconds: float = 0.0

    @property
    def docs_removed(self) -> int:
        return sum(self.removed_docs.values())

    @property
    def bytes_removed(self) -> int:
        return sum(self.removed_bytes.values())

    @property
    def bytes_rewritten(self) -> int:
        return self.bytes_in - self.bytes_out - self.bytes_removed

    def to_dict(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "docs_in": self.docs_in,
            "docs_out": self.docs_out,
            "docs_removed": self.docs_removed,
            "bytes_in": self.bytes_in,
            "bytes_out": self.bytes_out,
            "bytes_removed": self.bytes_removed,
            "bytes_rewritten": self.bytes_rewritten,
            "skipped": self.skipped,
            "modified": self.modified,
            "removed": {
                rule: {"docs": n, "bytes": self.removed_bytes[rule]}
                for rule, n in sorted(self.removed_docs.items())
            },
            "counters": dict(sorted(self.counters.items())),
            "seconds": round(self.seconds, 4),
        }


@dataclass
class StepResult:
    kept: pa.RecordBatch
    exclusions: pa.RecordBatch
    stats: StepStats
    kept_texts: HandedTexts | None = None
    """Where the step was run with `hand_on` (a DocumentStep before another): `kept`'s texts as Python
    strings, `kept` then without its text column (handed_texts.py). The pipeline hands them to the next
    step's :meth:`Step.run`, so that the column is decoded once per batch, not once per step
    (cleaning_stage: 5 decodes of 27 MB, ~10 ms each and more in a grown process), and built once."""


class Step(ABC):
    """Anything that maps a batch of documents to a :class:`StepResult`."""

    name: ClassVar[str]
    added_fields: ClassVar[tuple[pa.Field, ...]] = ()
    """Columns this step appends to the batch (always present in its output, null where not set)."""

    @abstractmethod
    def __call__(self, batch: pa.RecordBatch) -> StepResult: ...

    takes_texts: ClassVar[bool] = False
    """Does :meth:`run` take the batch's texts handed on by the step before (HandedTexts)?"""

    def run(self, batch: pa.RecordBatch, texts: HandedTexts | None = None, *, hand_on: bool = False) -> StepResult:
        """The step over `batch`. Steps that `takes_texts` may be given the batch's texts as Python
        strings (`texts`; the batch then has no text column) and asked to `hand_on` theirs (the kept
        batch then has none: the next step takes them). The rest are given whole batches and return
        them."""
        if texts is not None:
            raise ValueError(f"step {self.name!r} does not take handed texts")
        return self(batch)

    def load(self) -> None:
        """Load what the step's calls run (compiled kernels from numba's cache, their tables).

        CleaningPipeline calls it once, before its first batch, so that the first batch's step time
        does not hold it and a pipeline built only for its step names and schema (the cleaning
        stage's parent, whose workers clean) does not pay it: ~0.9 CPU-s on the end-to-end
        benchmark's two sources, numba's import among it. A step called directly loads on first use.
        Nothing to load by default."""
        return None

    def rule(self, local: str) -> str:
        return f"{self.name}.{local}"


def text_bytes(column: pa.Array | pa.ChunkedArray) -> list[int]:
    """UTF-8 byte length of every text, computed by Arrow (no Python string is made)."""
    return pc.binary_length(column).to_pylist()


def _nulls(field_: pa.Field, n: int) -> pa.Array:
    return pa.nulls(n, field_.type)


def assemble_result(
    step: Step,
    batch: pa.RecordBatch,
    drops: Sequence[tuple[int, str, str | None]],
    sizes: Sequence[int],
    *,
    texts: HandedTexts | None = None,
    rewritten: bool = False,
    hand_on: bool = False,
    new_metas: list[str | None] | None = None,
    added: dict[str, list[Any]] | None = None,
    stats: StepStats | None = None,
    started: float | None = None,
) -> StepResult:
    """Build the kept batch, the exclusion records and the counts from per-row decisions.

    `drops` holds (row, full rule, value); `sizes` the UTF-8 size of every input row; `texts` the text
    of every row after the step, as Python strings with their sizes (a DocumentStep's; the batch may
    then lack its text column, see handed_texts.py), `rewritten` whether the step changed any; `hand_on`:
    the kept batch goes without its text column and the kept texts go in the result's `kept_texts`;
    `new_metas` the rewritten meta column (chat messages; None: unchanged); `added` the values of
    `step.added_fields`.
    """
    n = batch.num_rows
    stats = stats or StepStats(step.name)
    stats.docs_in += n
    stats.bytes_in += sum(sizes)
    if texts is not None and (hand_on or rewritten) and "text" in batch.schema.names:
        batch = batch.drop_columns(["text"])  # handed on, or built below from the kept strings
    if new_metas is not None:
        meta_idx = batch.schema.get_field_index("meta")
        meta_field = batch.schema.field(meta_idx)
        batch = batch.set_column(meta_idx, meta_field, pa.array(new_metas, meta_field.type))
    for f in step.added_fields:
        values = (added or {}).get(f.name)
        arr = pa.array(values, f.type) if values is not None else _nulls(f, n)
        idx = batch.schema.get_field_index(f.name)
        if idx >= 0:  # re-running a step replaces its column rather than duplicating it
            batch = batch.set_column(idx, f, arr)
        else:
            batch = batch.append_column(f, arr)

    keep: list[bool] | None = None
    if drops:
        keep = [True] * n
        ids = batch.column("id").to_pylist()
        ex_ids, ex_rules, ex_values, ex_bytes = [], [], [], []
        for row, rule, value in drops:
            keep[row] = False
            ex_ids.append(ids[row])
            ex_rules.append(rule)
            ex_values.append(None if value is None else value[:_VALUE_MAX_CHARS])
            ex_bytes.append(sizes[row])
            stats.removed_docs[rule] += 1
            stats.removed_bytes[rule] += sizes[row]
        kept = batch.filter(pa.array(keep, pa.bool_()))
        exclusions = pa.RecordBatch.from_arrays(
            [
                pa.array(ex_ids, pa.string()),
                pa.array(ex_rules, pa.string()),
                pa.array(ex_values, pa.string()),
                pa.array(ex_bytes, pa.int64()),
            ],
            schema=EXCLUSIONS_SCHEMA,
        )
    else:
        kept = batch
        exclusions = empty_exclusions()
    stats.docs_out += kept.num_rows
    kept_texts = None
    if texts is None or "text" in kept.schema.names:  # the column as the step was given it
        stats.bytes_out += sum(sizes) - sum(sizes[row] for row, _, _ in drops)
    else:
        strings, out_sizes = texts.strings, texts.sizes
        if keep is not None:
            strings = [t for t, k in zip(strings, keep, strict=True) if k]
            out_sizes = [x for x, k in zip(out_sizes, keep, strict=True) if k]
        stats.bytes_out += sum(out_sizes)
        if hand_on:
            kept_texts = HandedTexts(strings, out_sizes, texts.field, texts.index)
        else:
            kept = attach_texts(kept, strings, texts.field, texts.index)
    if started is not None:
        stats.seconds += time.perf_counter() - started
    return StepResult(kept, exclusions, stats, kept_texts)


def empty_exclusions() -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays(
        [pa.array([], f.type) for f in EXCLUSIONS_SCHEMA], schema=EXCLUSIONS_SCHEMA
    )


class DocumentStep(Step):
    """A step written per document: subclasses implement :meth:`process`.

    `modalities` / `languages` limit the documents it applies to (None: all); the others pass through
    unchanged and are counted as `skipped`, and so does a media document (image, PDF page, audio)
    without text: its caption, page text or transcript is what text steps judge, and it has none.
    With ``on_error='exclude'`` an exception inside
    :meth:`process` removes that document under rule ``<step>.error`` with the exception as value,
    instead of failing the whole batch: one odd document among millions must not stop a run, and the
    funnel shows it.
    """

    def __init__(
        self,
        *,
        modalities: Iterable[str] | None = None,
        languages: Iterable[str] | None = None,
        on_error: Literal["exclude", "raise"] = "exclude",
    ):
        self.modalities = frozenset(modalities) if modalities is not None else None
        self.languages = frozenset(languages) if languages is not None else None
        self.on_error = on_error

    @abstractmethod
    def process(self, doc: Doc, counters: Counter[str]) -> Drop | None:
        """Decide about one document: return a Drop to remove it; rewrite doc.text / fill doc.out to keep."""

    reads_meta: bool = False
    """Does :meth:`process` read `doc.meta`? Only then is the meta column handed over."""

    rewrites_messages: ClassVar[bool] = False
    """Does the step also rewrite chat messages (`meta.messages[].content`) with :meth:`rewrite_message`?

    A chat document's `text` is only a rendering of its messages; tokenization trains on the messages
    themselves. A step that rewrites text (redaction, normalisation) must rewrite them too, or what
    it removed from `text` would still reach the model."""

    def rewrite_message(self, content: str) -> str:
        """The step's rewrite of one message's content (for steps with `rewrites_messages`)."""
        raise NotImplementedError

    def applies(self, modality: str | None, lang: str | None) -> bool:
        if self.modalities is not None and modality not in self.modalities:
            return False
        if self.languages is not None and lang not in self.languages:
            return False
        return True

    def prepare(self, texts: list[str], modalities: list[str | None], langs: list[str | None]) -> list[Any] | None:
        """Work done for every document the step will process at once, before :meth:`process` runs per
        document (a vectorised kernel over the batch); one value per document, handed over as
        `doc.prepared`, or None. A step whose batch work raises falls back to None, so that
        :meth:`process` computes per document and an odd document is reported alone."""
        return None

    def __call__(self, batch: pa.RecordBatch) -> StepResult:
        return self.run(batch)

    takes_texts: ClassVar[bool] = True

    def run(self, batch: pa.RecordBatch, texts: HandedTexts | None = None, *, hand_on: bool = False) -> StepResult:
        started = time.perf_counter()
        n = batch.num_rows
        stats = StepStats(self.name)
        if texts is None:
            text_col = batch.column("text")
            texts = HandedTexts(text_col.to_pylist(), text_bytes(text_col), batch.schema.field("text"),
                                batch.schema.get_field_index("text"))
        sizes = texts.sizes
        # rewritten in place below: a copy of the list handed over (its strings are shared)
        strings = list(texts.strings)
        ids: list[str] = batch.column("id").to_pylist()
        names = batch.schema.names
        # documents schema batches always have `modality`; a batch without it is text
        modalities = batch.column("modality").to_pylist() if "modality" in names else ["text"] * n
        langs = batch.column("lang").to_pylist() if "lang" in names else [None] * n
        added: dict[str, list[Any]] = {f.name: [None] * n for f in self.added_fields}
        drops: list[tuple[int, str, str | None]] = []
        rewritten: list[int] = []
        counters = stats.counters
        metas, conversation_rows = self._chat_metas(batch)
        doc_metas = (metas or batch.column("meta").to_pylist()) if self.reads_meta and "meta" in names else None
        metas_changed = False
        todo = [
            i for i in range(n)
            if self.applies(modalities[i], langs[i]) and (strings[i] or modalities[i] not in MEDIA_MODALITIES)
        ]
        stats.skipped += n - len(todo)
        prepared = self._prepare([strings[i] or "" for i in todo], [modalities[i] for i in todo],
                                 [langs[i] for i in todo])
        for j, i in enumerate(todo):
            doc = Doc(ids[i], strings[i] or "", modalities[i], langs[i], prepared=prepared[j] if prepared else None,
                      meta=doc_metas[i] if doc_metas is not None else None)
            try:
                drop = self.process(doc, counters)
            except Exception as err:  # noqa: BLE001 - reported per document, see class doc
                if self.on_error == "raise":
                    raise
                drop = Drop(ERROR_RULE, f"{type(err).__name__}: {err}")
            if drop is not None:
                drops.append((i, self.rule(drop.rule), drop.value))
                continue
            for k, v in doc.out.items():
                added[k][i] = v
            if doc.text != strings[i]:
                strings[i] = doc.text
                stats.modified += 1
                rewritten.append(i)
            if i in conversation_rows:
                messages = self._rewrite_messages(metas[i], counters)
                if messages is not None:
                    metas[i] = messages
                    metas_changed = True
        return assemble_result(
            self,
            batch,
            drops,
            sizes,
            texts=texts.rewritten(strings, rewritten),
            rewritten=bool(rewritten),
            hand_on=hand_on,
            new_metas=metas if metas_changed else None,
            added=added,
            stats=stats,
            started=started,
        )

    def _prepare(self, texts: list[str], modalities: list[str | None], langs: list[str | None]) -> list[Any] | None:
        try:
            return self.prepare(texts, modalities, langs) if texts else None
        except Exception:  # noqa: BLE001 - per document in process(), where errors are reported
            if self.on_error == "raise":
                raise
            return None

    def _chat_metas(self, batch: pa.RecordBatch) -> tuple[list[str | None], set[int]]:
        """The meta column and its conversation rows, when this step rewrites messages."""
        if not self.rewrites_messages or "meta" not in batch.schema.names:
            return [], set()
        meta = batch.column("meta")
        rows = set(chat_candidates(meta).tolist())
        return (meta.to_pylist() if rows else []), rows

    def _rewrite_messages(self, meta: str, counters: Counter[str]) -> str | None:
        rewritten, changed = rewrite_messages(meta, self.rewrite_message)
        counters["chat_messages_rewritten"] += changed
        return rewritten
