"""Label distribution per split: exact counts of each value of the configured label field.

Counters exist per distinct label, not per document; `max_distinct_labels` caps them so that a
misconfigured field (an id, a free-text answer) cannot grow one counter per document: past the cap,
labels not seen yet are counted together (the `overflow` bucket) and `truncated` is set.
Labels already counted keep being counted exactly. Which labels make the cap depends on the input
order, which the split stage fixes (part order), so the report is deterministic.

Documents without a label, the labels beyond the cap and those outside the top k are buckets, not
labels: they are kept under `Bucket` keys, which no label string equals, and a table row of a bucket
has `label: null` and `bucket` naming it. A document labelled "<missing>" is counted as that label,
apart from the documents without one; only the markdown names the buckets, "(no label)" in italics.
"""

from __future__ import annotations

from collections import Counter
from enum import Enum
from typing import Any

import pyarrow as pa

from platform_assets.stats.fields import FieldPath, field_values
from platform_assets.stats.histograms import split_rank


class Bucket(Enum):
    """Rows of the table that are not one label. Not a str: a label can never equal one."""

    OTHER = "other"
    OVERFLOW = "beyond max_distinct_labels"
    MISSING = "missing"


OTHER, OVERFLOW, MISSING_BUCKET = Bucket.OTHER, Bucket.OVERFLOW, Bucket.MISSING
BUCKET_DISPLAY = {OTHER: "(other labels)", OVERFLOW: "(beyond max_distinct_labels)", MISSING_BUCKET: "(no label)"}
LabelKey = str | Bucket


def row_name(row: dict[str, Any]) -> str:
    """A table row's label as shown: the label itself, or the bucket's display name."""
    return row["label"] if row["label"] is not None else BUCKET_DISPLAY[Bucket(row["bucket"])]


class LabelCounts:
    def __init__(self, path: FieldPath, max_distinct: int):
        self.path, self.max_distinct = path, max_distinct
        self.counts: dict[str, Counter[LabelKey]] = {}
        self._known: set[str] = set()
        self.truncated = False

    def add_batch(self, batch: pa.RecordBatch | pa.Table, splits: pa.Array) -> None:
        """`splits`: the split of every row of `batch` (the column being written, or read back)."""
        if batch.num_rows == 0:
            return
        labels = field_values(batch, self.path)
        grouped = pa.table({"split": splits, "label": labels}).group_by(
            ["split", "label"], use_threads=False).aggregate([([], "count_all")])
        # sorted, so that which new labels fit under the cap does not depend on hash-table order
        grouped = grouped.sort_by([("split", "ascending"), ("label", "ascending")])
        for split, label, n in zip(grouped["split"].to_pylist(), grouped["label"].to_pylist(),
                                   grouped["count_all"].to_pylist(), strict=True):
            name: LabelKey = MISSING_BUCKET if label is None else label
            if label is not None and name not in self._known:
                if len(self._known) >= self.max_distinct:
                    name, self.truncated = OVERFLOW, True
                else:
                    self._known.add(name)
            self.counts.setdefault(split, Counter())[name] += n

    def totals(self) -> Counter[LabelKey]:
        out: Counter[LabelKey] = Counter()
        for c in self.counts.values():
            out.update(c)
        return out

    def top(self, k: int) -> list[str]:
        """The k most frequent labels over all splits (ties by name); the buckets (no label, beyond
        the cap) are never among them: they are reported on their own."""
        totals = self.totals()
        named = [(-n, label) for label, n in totals.items() if isinstance(label, str)]
        return [label for _, label in sorted(named)[:k]]

    def table_rows(self, k: int) -> list[dict[str, Any]]:
        """One row per shown label (top k, then the buckets other, overflow, missing when non-zero):
        label (null for a bucket, which `bucket` names), one count per split, total. Every document is
        in exactly one row."""
        top = self.top(k)
        not_other: set[LabelKey] = {*top, MISSING_BUCKET, OVERFLOW}
        splits = sorted(self.counts, key=split_rank)
        rows = []
        for label in [*top, OTHER, OVERFLOW, MISSING_BUCKET]:
            per_split = {}
            for split in splits:
                c = self.counts[split]
                per_split[split] = (sum(n for name, n in c.items() if name not in not_other)
                                    if label == OTHER else c.get(label, 0))
            total = sum(per_split.values())
            if total or label in top:
                name = {"label": label} if isinstance(label, str) else {"label": None, "bucket": label.value}
                rows.append({**name, **per_split, "total": total})
        return rows

    def to_dict(self, k: int) -> dict[str, Any]:
        return {"field": self.path.spec, "rows": self.table_rows(k), "distinct_labels": len(self._known),
                "truncated": self.truncated}
