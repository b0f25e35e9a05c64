"""Which member of a duplicate cluster survives: a total order over documents.

The order is (policy value, id, source), so it depends only on the documents themselves, never on
the order they were read in: the same corpus gives the same survivors on every run and machine.

- `oldest`: smallest `ingested_at` first (the content's own timestamp, not the run's), nulls last;
- `longest`: most characters first;
- `highest_quality`: largest value of the configured numeric column first, nulls/NaN last.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

KeepPolicy = Literal["oldest", "longest", "highest_quality"]


def _column(batch: pa.RecordBatch | pa.Table, path: str) -> pa.Array | pa.ChunkedArray:
    """A column, or a struct field written `column.field`."""
    head, *rest = path.split(".")
    if head not in batch.schema.names:
        raise KeyError(f"keep policy needs column {head!r}, which the documents do not have")
    col = batch.column(head)
    for field in rest:
        col = pc.struct_field(col, field)
    return col


_MICROS = {"s": 1e6, "ms": 1e3, "us": 1.0, "ns": 1e-3}


def _epoch_microseconds(col: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """Timestamps (any unit) and dates as float64 microseconds since the epoch, without a lossy cast
    (a safe cast of ms to s fails on sub-second values; float64 is exact to the microsecond until
    the year 2255)."""
    if pa.types.is_timestamp(col.type):
        return pc.multiply(col.cast(pa.int64()).cast(pa.float64(), safe=False), _MICROS[col.type.unit])
    if pa.types.is_date32(col.type):
        return pc.multiply(col.cast(pa.int32()).cast(pa.float64()), 86_400e6)
    if pa.types.is_date64(col.type):
        return pc.multiply(col.cast(pa.int64()).cast(pa.float64(), safe=False), 1e3)
    return col.cast(pa.float64())


def priority_values(
    batch: pa.RecordBatch | pa.Table, policy: KeepPolicy, quality_column: str = "quality"
) -> pa.Array:
    """The per-document value the policy ranks by (computed batch by batch: no text is kept)."""
    if policy == "oldest":
        values = _epoch_microseconds(_column(batch, "ingested_at"))
    elif policy == "longest":
        values = pc.utf8_length(_column(batch, "text")).cast(pa.float64())
    elif policy == "highest_quality":
        values = _column(batch, quality_column).cast(pa.float64())
        values = pc.if_else(pc.is_nan(values), pa.scalar(None, pa.float64()), values)
    else:
        raise ValueError(f"unknown keep policy {policy!r}")
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    return values


def priority_order(
    values: pa.Array | pa.ChunkedArray,
    ids: pa.Array | pa.ChunkedArray,
    sources: pa.Array | pa.ChunkedArray,
    policy: KeepPolicy,
) -> np.ndarray:
    """Row indices, best first: policy value, then id, then source (all ascending but the value of
    `longest`/`highest_quality`, which is descending); nulls last."""
    table = pa.table({"v": values, "id": ids, "source": sources})
    direction = "ascending" if policy == "oldest" else "descending"
    order = pc.sort_indices(
        table,
        sort_keys=[
            ("v", direction, "at_end"),
            ("id", "ascending", "at_end"),
            ("source", "ascending", "at_end"),
        ],
    )
    return order.to_numpy().astype(np.int64)


def ranks(order: np.ndarray) -> np.ndarray:
    """rank[i] = position of row i in `order` (0 = kept first)."""
    out = np.empty(len(order), dtype=np.int64)
    out[order] = np.arange(len(order), dtype=np.int64)
    return out
