"""Chat documents: the conversation in `meta["messages"]`, validated before any template sees it.

Ingest normalises instruction/response data into `{"messages": [{"role": ..., "content": ...}]}`;
the document's `text` is then a plain rendering for cleaning and dedup, and tokenization ignores
it. A malformed conversation is not an error of the batch: it comes back as an `Invalid` (rule,
value) and the stage records it in `_exclusions.parquet`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import orjson

from platform_assets.contracts import CHAT_ROLES, MESSAGES_KEY, Message, chat_candidates
from platform_assets.tokenize.exclusion_rules import TokenizeRule

__all__ = ["CHAT_ROLES", "MESSAGES_KEY", "Invalid", "Message", "chat_candidates", "parse_conversation"]

_VALUE_CHARS = 80  # of a bad role or an error message quoted in an exclusion value


@dataclass(frozen=True, slots=True)
class Invalid:
    rule: str
    value: str


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
