"""Turning a source's record (a dict of fields) into text + meta, with the reason when it can't."""

from __future__ import annotations

from typing import Any

import orjson

from platform_assets.ingest.records import Rejected
from platform_assets.schema import QuarantineReason

__all__ = ["Rejected", "extract_text", "meta_json"]


def _json_default(value: Any) -> str:
    # dates, decimals, bytes in Parquet/HF metadata columns: keep them readable, never fail the row
    if isinstance(value, bytes):
        return value.decode("utf-8", "backslashreplace")
    return str(value)


def extract_text(record: dict[str, Any], text_field: str) -> str:
    if text_field not in record or record[text_field] is None:
        raise Rejected(QuarantineReason.MISSING_TEXT_FIELD, f"no value for text field {text_field!r}")
    text = record[text_field]
    if not isinstance(text, str):
        raise Rejected(QuarantineReason.TEXT_NOT_STRING, f"text field {text_field!r} is {type(text).__name__}")
    if not text or text.isspace():
        raise Rejected(QuarantineReason.EMPTY_TEXT, f"text field {text_field!r} is empty or blank")
    return text


def meta_json(record: dict[str, Any], text_field: str | None, meta_fields: list[str] | None) -> str | None:
    """The record's other non-null fields as a JSON object with sorted keys (None when none).

    Null fields are left out and keys sorted so that a record gives the same meta whichever reader
    path parsed it (Arrow's columnar parse fills absent fields with null and reorders keys).
    """
    keys = (k for k in record if k != text_field) if meta_fields is None else meta_fields
    meta = {k: record[k] for k in keys if record.get(k) is not None}
    if not meta:
        return None
    try:
        return orjson.dumps(meta, default=_json_default, option=orjson.OPT_NON_STR_KEYS | orjson.OPT_SORT_KEYS).decode()
    except TypeError as err:  # lone surrogates from a mis-decoded CSV cell, NaN keys, ...
        raise Rejected(QuarantineReason.INVALID_UTF8, f"metadata is not encodable as JSON: {err}") from None
