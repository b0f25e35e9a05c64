"""Instruction and chat records: normalised to `meta.messages` at ingest, rendered as plain text.

Sources of supervised fine-tuning data come in two shapes: a list of messages (OpenAI/ShareGPT
style, `{"role"|"from": ..., "content"|"value": ...}`) or instruction/response columns (Alpaca:
`instruction`, optional `input`, `output`). Both become one shape in the document's `meta`:
`{"messages": [{"role": "system"|"user"|"assistant", "content": "..."}]}` so tokenization applies
the tokenizer's chat template (and the assistant-only loss mask) the same way for every source.
`text` holds a plain rendering ("user: ...\n\nassistant: ...") so cleaning, language ID and dedup
work on chat data as on any document.
"""

from __future__ import annotations

from typing import Any

from pydantic import model_validator

from platform_assets.contracts import MESSAGES_KEY, StrictModel
from platform_assets.ingest.records import Rejected
from platform_assets.schema import QuarantineReason

INVALID_CHAT = QuarantineReason.INVALID_CHAT

# ShareGPT and other dumps name roles differently; anything else is rejected (a typo in a role
# would otherwise silently train on the wrong turns).
ROLE_ALIASES = {
    "system": "system",
    "user": "user",
    "human": "user",
    "prompter": "user",
    "assistant": "assistant",
    "gpt": "assistant",
    "bot": "assistant",
    "model": "assistant",
}


class ChatFields(StrictModel):
    """Where a source keeps its conversations: `messages_field`, or prompt + response columns."""

    messages_field: str | None = None
    """A list of messages; each has `role` (or `from`) and `content` (or `value`)."""
    prompt_field: str | None = None
    """Instruction/response data: the user's turn..."""
    input_field: str | None = None
    """... with an optional context column appended to it after a blank line (Alpaca's `input`)..."""
    response_field: str | None = None
    """... and the assistant's answer."""
    system_field: str | None = None
    """An optional system prompt column (either shape)."""

    @model_validator(mode="after")
    def _one_shape(self) -> ChatFields:
        pair = (self.prompt_field is not None, self.response_field is not None)
        if self.messages_field is None and pair != (True, True):
            raise ValueError("set messages_field, or both prompt_field and response_field")
        if self.messages_field is not None and any(pair):
            raise ValueError("messages_field and prompt_field/response_field exclude each other")
        return self

    def used_fields(self) -> set[str]:
        return {f for f in (self.messages_field, self.prompt_field, self.input_field, self.response_field,
                            self.system_field) if f is not None}


def _text(value: Any, what: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise Rejected(INVALID_CHAT, f"{what} is {'blank' if isinstance(value, str) else type(value).__name__}")
    return value


def _from_message_list(raw: Any, field: str) -> list[dict[str, str]]:
    if not isinstance(raw, list) or not raw:
        raise Rejected(INVALID_CHAT, f"{field!r} is not a non-empty list of messages")
    out = []
    for i, msg in enumerate(raw):
        if not isinstance(msg, dict):
            raise Rejected(INVALID_CHAT, f"{field}[{i}] is a {type(msg).__name__}, not an object")
        role = msg.get("role", msg.get("from"))
        if not isinstance(role, str) or role.lower() not in ROLE_ALIASES:
            raise Rejected(INVALID_CHAT, f"{field}[{i}] has unknown role {role!r} (known: {', '.join(ROLE_ALIASES)})")
        content = msg.get("content", msg.get("value"))
        out.append({"role": ROLE_ALIASES[role.lower()], "content": _text(content, f"{field}[{i}].content")})
    return out


def chat_messages(record: dict[str, Any], chat: ChatFields) -> list[dict[str, str]]:
    """The record's conversation in the normalised shape, or Rejected(invalid_chat) saying why."""
    if chat.messages_field is not None:
        if chat.messages_field not in record:
            raise Rejected(INVALID_CHAT, f"no field {chat.messages_field!r}")
        messages = _from_message_list(record[chat.messages_field], chat.messages_field)
    else:
        prompt = _text(record.get(chat.prompt_field), f"field {chat.prompt_field!r}")
        extra = record.get(chat.input_field) if chat.input_field else None
        if isinstance(extra, str) and extra.strip():
            prompt = f"{prompt}\n\n{extra}"
        messages = [{"role": "user", "content": prompt},
                    {"role": "assistant", "content": _text(record.get(chat.response_field),
                                                           f"field {chat.response_field!r}")}]
    system = record.get(chat.system_field) if chat.system_field else None
    if isinstance(system, str) and system.strip() and messages[0]["role"] != "system":
        messages.insert(0, {"role": "system", "content": system})
    if not any(m["role"] == "assistant" for m in messages):
        raise Rejected(INVALID_CHAT, "no assistant turn: nothing to train on")
    return messages


def render_chat_text(messages: list[dict[str, str]]) -> str:
    """The plain text the cleaning and dedup stages see for a conversation."""
    return "\n\n".join(f"{m['role']}: {m['content']}" for m in messages)


def chat_record(record: dict[str, Any], chat: ChatFields, meta_fields: list[str] | None) -> tuple[str, dict[str, Any]]:
    """(text, the record as it goes to `meta`: the chosen meta fields plus `messages`)."""
    messages = chat_messages(record, chat)
    used = chat.used_fields()
    keys = [k for k in record if k not in used] if meta_fields is None else [k for k in meta_fields if k not in used]
    meta = {k: record[k] for k in keys}
    meta[MESSAGES_KEY] = messages
    return render_chat_text(messages), meta
