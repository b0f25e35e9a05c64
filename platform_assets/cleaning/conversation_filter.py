"""Turn checks for instruction and chat documents: the `sft` recipe's rules in place of prose rules.

A chat document's turns are in `meta.messages` (ingest/chat.py); its `text` is a plain rendering of
them. Web-prose rules judge that rendering as a web page: an ordinary instruction/response pair of
ten words fails Gopher's 50-word minimum and C4's three-sentence one, so they would remove a whole
SFT source. What makes an SFT record bad is in its turns instead. Rules, the first that fails is the
reported reason (the value names the turn, 1-based, so a reviewer finds it in `meta`):

- `conversation.no_messages`: no conversation in `meta` (a plain document in an SFT source, or
  meta that is not JSON): with `require_messages`, it cannot be trained on as a conversation.
- `conversation.empty_turn`: a turn whose content is missing, null or blank (after normalisation:
  a turn of zero-width spaces is blank here).
- `conversation.no_response`: no assistant turn, so nothing for the loss to count.
- `conversation.duplicate_turn`: two turns with the same content, case-folded and whitespace
  collapsed (a response that echoes its prompt, a turn pasted twice). Turns of fewer than
  `duplicate_min_words` words are not compared: "Thanks!" twice in one chat is conversation.
- `conversation.response_too_short` / `response_too_long`: an assistant turn's words
  (language_bands.count_words: two Han or kana characters make a word) outside the bounds.
"""

from __future__ import annotations

from collections import Counter
from typing import Annotated, Literal

import orjson
from pydantic import Field

from platform_assets.cleaning.language_bands import count_words
from platform_assets.cleaning.language_bands import load as load_word_count
from platform_assets.cleaning.steps import Doc, DocumentStep, Drop, above, below
from platform_assets.contracts import MESSAGES_KEY, StrictModel

Count = Annotated[int, Field(ge=0)]


class ConversationSettings(StrictModel):
    """Checks of a chat document's turns; null switches a bound off, false a check."""

    enabled: bool = False
    """Off in the global block (web documents have no turns); the `sft` recipe turns it on."""
    modalities: tuple[str, ...] | None = ("text",)
    require_messages: bool = True
    """Remove a document without a conversation in `meta` (`no_messages`)."""
    empty_turns: bool = True
    duplicate_turns: bool = True
    duplicate_min_words: Count = 4
    """Turns shorter than this are not compared: short acknowledgements ("Yes.", "Thank you!")
    legitimately repeat in a multi-turn chat; four words and up is a sentence, whose repetition is
    a copy or template error."""
    min_response_words: Count | None = 1
    """An assistant turn needs a word: a one-word answer ("Paris.") is a correct response to a
    factual question, so the bound only removes answers of punctuation or symbols alone ("...")."""
    max_response_words: Count | None = 3000
    """At ~1.3 GPT-2 tokens per English word, 3,000 words is ~3,900 tokens: a longer answer does not
    fit the default `tokenize.max_length` of 4,096 with its prompt, and chunking would cut it."""


def _normalized(content: str) -> str:
    return " ".join(content.casefold().split())


class ConversationFilter(DocumentStep):
    name = "conversation"
    reads_meta = True

    def __init__(self, settings: ConversationSettings | None = None,
                 on_error: Literal["exclude", "raise"] = "exclude"):
        self.s = settings or ConversationSettings()
        super().__init__(modalities=self.s.modalities, on_error=on_error)

    def load(self) -> None:
        load_word_count()  # the compiled word count and its table (language_bands), before the first batch

    def process(self, doc: Doc, counters: Counter[str]) -> Drop | None:
        messages = self._messages(doc.meta)
        if messages is None:
            counters["not_conversations"] += 1
            return Drop("no_messages", "meta has no messages list") if self.s.require_messages else None
        counters["turns"] += len(messages)
        turns = [
            (m.get("role") if isinstance(m, dict) else None,
             m.get("content") if isinstance(m, dict) and isinstance(m.get("content"), str) else None)
            for m in messages
        ]
        if self.s.empty_turns:
            for i, (role, content) in enumerate(turns, 1):
                if content is None or not content.strip():
                    return Drop("empty_turn", f"turn {i} ({role})")
        responses = [(i, c or "") for i, (role, c) in enumerate(turns, 1) if role == "assistant"]
        if not responses:
            return Drop("no_response", f"{len(turns)} turns, none by the assistant")
        if self.s.duplicate_turns and (drop := self._duplicate(turns)) is not None:
            return drop
        low, high = self.s.min_response_words, self.s.max_response_words
        for i, content in responses:
            # counting stops past the bound, and a text of no more characters than `high` cannot have
            # more words, so most turns are never counted in full: the step took 2.84 s on 10,000 of the
            # sample's conversations (20 MB, 2 KB answers) counting every word, 0.73 s this way
            if low is not None and (words := count_words(content, low)) < low:
                return Drop("response_too_short", f"{below('', words, low).value} (turn {i})")
            if high is not None and len(content) > high and (words := count_words(content)) > high:
                return Drop("response_too_long", f"{above('', words, high).value} (turn {i})")
        return None

    def _duplicate(self, turns: list[tuple[str | None, str | None]]) -> Drop | None:
        seen: dict[str, int] = {}
        for i, (_, content) in enumerate(turns, 1):
            if content is None or count_words(content, self.s.duplicate_min_words) < self.s.duplicate_min_words:
                continue
            key = _normalized(content)
            if key in seen:
                return Drop("duplicate_turn", f"turn {i} repeats turn {seen[key]}")
            seen[key] = i
        return None

    @staticmethod
    def _messages(meta: str | None) -> list | None:
        if not meta:
            return None
        try:
            obj = orjson.loads(meta)
        except orjson.JSONDecodeError:
            return None
        messages = obj.get(MESSAGES_KEY) if isinstance(obj, dict) else None
        return messages if isinstance(messages, list) and messages else None
