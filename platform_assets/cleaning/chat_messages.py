"""Chat documents inside cleaning: the conversation in `meta.messages`, where tokenization reads it.

Ingest keeps a chat document's turns in `meta` (`{"messages": [{"role", "content"}, ...]}`) and a
plain rendering of them in `text`. Cleaning's filters judge `text`; its rewrites (redaction,
normalisation) must reach the messages as well, because those are what the model trains on.
"""

from __future__ import annotations

from collections.abc import Callable

import orjson

from platform_assets.contracts import MESSAGES_KEY


def _messages(obj: object) -> list | None:
    messages = obj.get(MESSAGES_KEY) if isinstance(obj, dict) else None
    return messages if isinstance(messages, list) else None


def message_contents(meta: str) -> list[str]:
    """The string contents of a conversation's messages ([] for malformed meta: tokenization
    validates conversations and excludes bad ones with their reason)."""
    try:
        messages = _messages(orjson.loads(meta))
    except orjson.JSONDecodeError:
        return []
    return [m["content"] for m in messages or () if isinstance(m, dict) and isinstance(m.get("content"), str)]


def rewrite_messages(meta: str, rewrite: Callable[[str], str]) -> tuple[str | None, int]:
    """(`meta` with `rewrite` applied to every message's content, number of messages changed);
    None when nothing changed, so untouched meta keeps its exact bytes."""
    try:
        obj = orjson.loads(meta)
    except orjson.JSONDecodeError:
        return None, 0
    changed = 0
    for message in _messages(obj) or ():
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str):
            new = rewrite(content)
            if new != content:
                message["content"] = new
                changed += 1
    if not changed:
        return None, 0
    return orjson.dumps(obj, option=orjson.OPT_SORT_KEYS).decode(), changed  # key order as ingest writes
