"""A record field named by the config: a top-level column (`source`, `lang`) or a path into `meta`
(`meta.label`, `meta.annotation.class`).

`meta` is the documents schema's JSON string of a source's other fields (CSV columns, JSONL keys), so
the labels of CSV/JSONL sources live there; a struct-typed `meta` (a foreign Parquet) is read too.
Values become strings so that one field gives one comparable key: strings as they are, numbers and
booleans as JSON writes them (`3`, `0.5`, `true`), objects and lists as sorted compact JSON. A missing
key, a JSON null, a `meta` that is null, not JSON or not an object on the way: null, which callers
report as `<missing>` (a stratum or label of its own), never an error. A key containing a dot cannot
be named (the dot separates keys).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from platform_assets.stats.settings import validate_field_spec

MISSING = "<missing>"
META_COLUMN = "meta"
_ABSENT = object()


@dataclass(frozen=True)
class FieldPath:
    column: str
    keys: tuple[str, ...] = ()
    """Keys inside the column's JSON object, outermost first; empty for a plain column."""

    @property
    def spec(self) -> str:
        return ".".join((self.column, *self.keys))

    @classmethod
    def parse(cls, spec: str, names: Sequence[str]) -> FieldPath:
        """`spec` against a schema's column names: a column of that exact name wins, then `meta.<path>`.
        Raises ValueError naming the columns when neither fits."""
        validate_field_spec(spec)
        if spec in names:
            return cls(spec)
        head, _, rest = spec.partition(".")
        if head == META_COLUMN and rest:
            if META_COLUMN not in names:
                raise ValueError(f"field {spec!r}: the input has no {META_COLUMN!r} column ({list(names)})")
            return cls(META_COLUMN, tuple(rest.split(".")))
        raise ValueError(f"field {spec!r}: no such column ({list(names)}); fields of meta are meta.<key>[.<key>...]")


def _as_key(value: Any) -> str | None:
    if value is None or value is _ABSENT:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, dict | list):
        return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return json.dumps(value)  # int, float, bool: 3, 0.5, true


def _walk(obj: Any, keys: tuple[str, ...]) -> Any:
    for key in keys:
        if not isinstance(obj, dict):
            return _ABSENT
        obj = obj.get(key, _ABSENT)
        if obj is _ABSENT:
            return _ABSENT
    return obj


# \u escape of an ASCII character (\u0000-\u007f): how a JSON writer could spell an ASCII key other than
# as itself. json.dumps escapes every non-ASCII character (\u00e9, \u4e2d), which this does not match.
_ASCII_ESCAPE = re.compile(r"\\u00[0-7][0-9a-fA-F]")


def _may_hold(text: str, needle: str, ascii_key: bool) -> bool:
    """False only when `text` cannot contain the key: neither its literal form nor an escape that could
    spell it. Skipping json.loads matters for chat sources, whose meta carries whole conversations."""
    if needle in text:
        return True
    return _ASCII_ESCAPE.search(text) is not None if ascii_key else "\\u" in text


def _json_values(texts: list[str | None], keys: tuple[str, ...]) -> list[str | None]:
    needle = json.dumps(keys[0], ensure_ascii=False)
    ascii_key = keys[0].isascii()
    out: list[str | None] = []
    for text in texts:
        if text is None or not _may_hold(text, needle, ascii_key):
            out.append(None)
            continue
        try:
            obj = json.loads(text)
        except ValueError:
            out.append(None)
            continue
        out.append(_as_key(_walk(obj, keys)))
    return out


def field_values(batch: pa.RecordBatch | pa.Table, path: FieldPath) -> pa.Array:
    """The field of every row as a string array, null where the row does not have it."""
    column = batch.column(path.column)
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    if not path.keys:
        if pa.types.is_string(column.type):
            return column
        if pa.types.is_struct(column.type) or pa.types.is_list(column.type) or pa.types.is_map(column.type):
            return pa.array([_as_key(v) for v in column.to_pylist()], pa.string())
        return column.cast(pa.string())
    if pa.types.is_struct(column.type):
        return pa.array([_as_key(_walk(v, path.keys)) for v in column.to_pylist()], pa.string())
    if not (pa.types.is_string(column.type) or pa.types.is_large_string(column.type)):
        raise ValueError(f"field {path.spec!r}: column {path.column!r} is {column.type}, not JSON text or a struct")
    return pa.array(_json_values(column.to_pylist(), path.keys), pa.string())


def display(value: str | None) -> str:
    return MISSING if value is None else value
