"""Token-length and output-length histograms of tokenized documents, per (split, source).

A document (its id within its (split, source) set: ids are unique there only) has the sum of its rows
as its length: overlong documents may be chunked into several rows
(tokenize/encode.py keeps a document's chunks consecutive), and a histogram of chunks would show the
chunk size, not the documents. Its output length is its `loss_tokens`: the tokens the training loss is
computed on, i.e. the assistant turns of a chat document (the loss mask) and every token of a plain
document, whose whole text is what the model learns to produce. For a plain source the two histograms
are therefore the same; the report shows output lengths for sets with masked tokens only.

Memory is the bins' counters per set (41 int64 by default) and one pending document, whatever the
corpus size: no per-document list is kept.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from platform_assets.parquet_parts import read_batches
from platform_assets.stats.settings import StatisticsSettings
from platform_assets.storage import Storage

REPORT_SPLIT_ORDER = ("train", "validation", "test")
"""Splits in report order (splits/assignment.SPLIT_NAMES; not imported: splits imports stats)."""

LENGTH_COLUMNS = ("id", "split", "source", "num_tokens", "loss_tokens")


@dataclass
class LengthHistogram:
    """Counts of non-negative lengths in bins [edge_i, edge_i+1), the last bin open; plus count, sum,
    min and max, exact."""

    edges: tuple[int, ...]
    counts: np.ndarray = field(init=False)
    documents: int = 0
    total: int = 0
    min: int | None = None
    max: int | None = None

    def __post_init__(self) -> None:
        if not self.edges or self.edges[0] != 0 or any(b <= a for a, b in zip(self.edges, self.edges[1:],
                                                                            strict=False)):
            raise ValueError(f"bin edges must start at 0 and increase strictly: {self.edges}")
        self.counts = np.zeros(len(self.edges), np.int64)

    def add(self, lengths: np.ndarray | Sequence[int]) -> None:
        values = np.asarray(lengths, np.int64)
        if values.size == 0:
            return
        if values.min() < 0:
            raise ValueError(f"negative length {int(values.min())}")
        bins = np.searchsorted(np.asarray(self.edges, np.int64), values, side="right") - 1
        self.counts += np.bincount(bins, minlength=len(self.edges))
        self.documents += int(values.size)
        self.total += int(values.sum())
        low, high = int(values.min()), int(values.max())
        self.min = low if self.min is None else min(self.min, low)
        self.max = high if self.max is None else max(self.max, high)

    def bin_labels(self) -> list[str]:
        """`1`, `4-5`, `1048576+`: inclusive ranges of each bin."""
        out = []
        for i, lo in enumerate(self.edges):
            if i + 1 == len(self.edges):
                out.append(f"{lo}+")
            else:
                hi = self.edges[i + 1] - 1
                out.append(str(lo) if hi == lo else f"{lo}-{hi}")
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"edges": list(self.edges), "counts": self.counts.tolist(), "documents": self.documents,
                "sum": self.total, "min": self.min, "max": self.max,
                "mean": round(self.total / self.documents, 3) if self.documents else None}


@dataclass
class SetLengths:
    tokens: LengthHistogram
    output: LengthHistogram

    @property
    def has_masked_tokens(self) -> bool:
        """Some token is not trained on (a chat set): its output lengths say something its lengths do not."""
        return self.output.total < self.tokens.total


class DocumentLengths:
    """Feed row batches of tokenized documents (`LENGTH_COLUMNS`) in output order; `finish()` gives
    per (split, source) the token-length and output-length histograms of its documents."""

    def __init__(self, edges: Sequence[int]):
        self.edges = tuple(int(e) for e in edges)
        self.sets: dict[tuple[str, str], SetLengths] = {}
        # the last document of the previous batch: its next chunk may open the next batch
        self._pending: tuple[str, str, str, int, int] | None = None

    def _set(self, key: tuple[str, str]) -> SetLengths:
        if key not in self.sets:
            self.sets[key] = SetLengths(LengthHistogram(self.edges), LengthHistogram(self.edges))
        return self.sets[key]

    def _flush_pending(self) -> None:
        if self._pending is not None:
            _, split, source, tokens, loss = self._pending
            s = self._set((split, source))
            s.tokens.add([tokens])
            s.output.add([loss])
            self._pending = None

    def add_batch(self, batch: pa.RecordBatch | pa.Table) -> None:
        n = batch.num_rows
        if n == 0:
            return
        ids = _flat(batch.column("id"))
        tokens = np.asarray(batch.column("num_tokens").to_numpy(zero_copy_only=False), np.int64)
        loss = np.asarray(batch.column("loss_tokens").to_numpy(zero_copy_only=False), np.int64)
        splits_col, sources_col = _flat(batch.column("split")), _flat(batch.column("source"))
        # ids are unique within a (split, source) set only: the same id opening the next source's
        # set is another document, so a document ends where any of the three changes
        changed = pc.or_(pc.or_(_differs_from_previous(ids), _differs_from_previous(splits_col)),
                         _differs_from_previous(sources_col)).to_numpy(zero_copy_only=False)
        starts = np.concatenate([[0], np.flatnonzero(changed) + 1]).astype(np.int64)
        doc_tokens, doc_loss = np.add.reduceat(tokens, starts), np.add.reduceat(loss, starts)
        first = (ids[0].as_py(), splits_col[0].as_py(), sources_col[0].as_py())
        if self._pending is not None and self._pending[:3] == first:
            pid, split, source, t, lo = self._pending
            self._pending = (pid, split, source, t + int(doc_tokens[0]), lo + int(doc_loss[0]))
            starts, doc_tokens, doc_loss = starts[1:], doc_tokens[1:], doc_loss[1:]
            if len(starts) == 0:
                return
        self._flush_pending()
        splits = splits_col.take(pa.array(starts)).to_pylist()
        sources = sources_col.take(pa.array(starts)).to_pylist()
        last = len(starts) - 1
        self._pending = (ids[int(starts[last])].as_py(), splits[last], sources[last],
                         int(doc_tokens[last]), int(doc_loss[last]))
        keys = np.array([f"{a}\x00{b}" for a, b in zip(splits[:last], sources[:last], strict=True)], dtype=object)
        for key in sorted(set(keys.tolist())):
            rows = keys == key
            split, source = key.split("\x00", 1)
            s = self._set((split, source))
            s.tokens.add(doc_tokens[:last][rows])
            s.output.add(doc_loss[:last][rows])

    def finish(self) -> dict[tuple[str, str], SetLengths]:
        self._flush_pending()
        return dict(sorted(self.sets.items(), key=lambda kv: (split_rank(kv[0][0]), kv[0])))


def _flat(column: pa.Array | pa.ChunkedArray) -> pa.Array:
    return column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column


def _differs_from_previous(values: pa.Array) -> pa.Array:
    """Row i+1 differs from row i (null-safe: a null equals a null, not a value)."""
    previous, current = values.slice(0, len(values) - 1), values.slice(1)
    same = pc.or_kleene(pc.equal(previous, current).fill_null(False),
                        pc.and_(pc.is_null(previous), pc.is_null(current)))
    return pc.invert(same)


def split_rank(split: str) -> tuple[int, str]:
    """train, validation, test, then any other name alphabetically: the order tables and charts use."""
    return (REPORT_SPLIT_ORDER.index(split), "") if split in REPORT_SPLIT_ORDER else (len(REPORT_SPLIT_ORDER), split)


def length_stats(batches: Iterable[pa.RecordBatch], edges: Sequence[int]) -> dict[tuple[str, str], SetLengths]:
    acc = DocumentLengths(edges)
    for batch in batches:
        acc.add_batch(batch)
    return acc.finish()


def tokenized_length_stats(storage: Storage, rel: str, settings: StatisticsSettings,
                           batch_rows: int = 65_536) -> dict[tuple[str, str], SetLengths]:
    """The histograms of a tokenized_documents output, re-read from its parts (five narrow columns:
    ~25 bytes a row, 1.6 MB a batch of 65,536 rows)."""
    return length_stats(read_batches(storage, rel, LENGTH_COLUMNS, batch_rows), settings.length_bin_edges)
