"""Chat documents: the conversation in `meta["messages"]`, validated before any template sees it.

Ingest normalises instruction/response data into `{"messages": [{"role": ..., "content": ...}]}`;
the document's `text` is then a plain rendering for cleaning and dedup, and tokenization ignores
it. A malformed conversation is not an error of the batch: it comes back as an `Invalid` (rule,
value) and the stage records it in `_exclusions.parquet`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from platform_assets.tokenize.exclusion_rules import TokenizeRule

CHAT_ROLES = ("system", "user", "assistant")
MESSAGES_KEY = "messages"
_VALUE_CHARS = 80  # of a bad role or an error message quoted in an exclusion value

Message = dict[str, str]


@dataclass(frozen=True, slots=True)
class Invalid:
    rule: str
    value: str


def chat_candidates(meta: pa.Array | pa.ChunkedArray | None) -> np.ndarray:
    """Rows whose meta may hold a conversation: those containing `"messages"` (one vectorised scan;
    only these are parsed, so plain-text batches never pay for JSON)."""
    if meta is None or pa.types.is_null(meta.type):  # an all-null column may come typed `null`
        return np.zeros(0, np.int64)
    if not (pa.types.is_string(meta.type) or pa.types.is_large_string(meta.type)):
        raise ValueError(f"meta column is {meta.type}, expected a JSON string")
    hit = pc.match_substring(meta, f'"{MESSAGES_KEY}"').fill_null(False)
    return np.flatnonzero(hit.to_numpy(zero_copy_only=False))


def _quote(value: object) -> str:
    return repr(value)[:_VALUE_CHARS]


def parse_conversation(meta: str, control_tokens: Sequence[str]) -> list[Message] | Invalid | None:
    """The messages of a chat document (copies holding only role and content), an `Invalid`, or
    None when meta has no `messages` key (a plain-text document)."""
    try:
        obj = orjson.loads(meta)
    except orjson.JSONDecodeError as err:
        return Invalid(TokenizeRule.META_NOT_JSON, str(err)[:_VALUE_CHARS])
    if not isinstance(obj, dict) or MESSAGES_KEY not in obj:
        return None
    messages = obj[MESSAGES_KEY]
    if not isinstance(messages, list):
        return Invalid(TokenizeRule.MESSAGES_NOT_A_LIST, f"messages is {type(messages).__name__}")
    if not messages:
        return Invalid(TokenizeRule.EMPTY_CONVERSATION, "messages is []")
    out: list[Message] = []
    for i, m in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(m, dict):
            return Invalid(TokenizeRule.MESSAGE_NOT_AN_OBJECT, f"{where} is {type(m).__name__}")
        role = m.get("role")
        if role not in CHAT_ROLES:
            return Invalid(TokenizeRule.UNKNOWN_ROLE,
                           f"{where}: no role" if role is None else f"{where}: role {_quote(role)}")
        content = m.get("content")
        if not isinstance(content, str):
            return Invalid(TokenizeRule.MISSING_CONTENT, f"{where} ({role}): "
                           + ("no content" if content is None else f"content is {type(content).__name__}"))
        for token in control_tokens:
            if token in content:
                return Invalid(TokenizeRule.CONTROL_TOKEN_IN_CONTENT, f"{where} ({role}): {token!r}")
        out.append({"role": role, "content": content})
    return out
