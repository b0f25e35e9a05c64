"""The chat template, and a conversation rendered into segments the loss mask can follow exactly.

Rendering uses transformers' own Jinja environment (`render_jinja_template`: the sandbox, its
filters and the `{% generation %}` tracker), so a conversation renders to the same string as
`AutoTokenizer.apply_chat_template`. The tracker gives the character spans of the generation
blocks; the rendered string is cut at their edges into segments, each encoded on its own and
flagged 1 (inside a block: the loss counts it) or 0.

Why segments rather than encoding the whole string and mapping characters to tokens (what
`apply_chat_template(return_assistant_tokens_mask=True)` does): a pre-token may straddle an edge.
With ChatML and GPT-2's pre-tokenizer, `assistant\\n` followed by content `\\n\\nHi` encodes as
`\\n\\n` + `\\n` + `Hi` in one string, so the token `\\n\\n` is half prompt, half answer and the
character mapping counts it as answer. Encoded apart, the prompt ends with `\\n` and the answer
starts with its own tokens, which is also what a model sees at inference (the prompt is encoded,
then the answer is generated token by token). Where no pre-token straddles an edge (content that
does not start with whitespace, ends before a special token), both ways give the same ids; the
tests pin that against transformers.

A template without generation blocks (most pretrained tokenizers' own) gets its assistant spans from
chat_turn_spans.py (rendered prefixes) instead; the segments are cut the same way.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from platform_assets.tokenize.chat_turn_spans import prefix_spans
from platform_assets.tokenize.conversations import Message
from platform_assets.tokenize.settings import GENERATION_TAG_RE

_UNSAFE_IN_LITERAL = ("'", "\\", "{", "}", "%")


def chatml_template(chat_start: str = "<|im_start|>", chat_end: str = "<|im_end|>") -> str:
    """ChatML: `<|im_start|>{role}\\n{content}<|im_end|>\\n` per message; an assistant message's
    content and its `<|im_end|>` (the turn's end, which the model must learn to emit) form the
    generation block."""
    for token in (chat_start, chat_end):
        if any(c in token for c in _UNSAFE_IN_LITERAL):
            raise ValueError(f"chat token {token!r} cannot be written into the default template "
                             f"(it contains one of {' '.join(_UNSAFE_IN_LITERAL)}); give tokenizer.chat_template")
    # one statement per line; every tag trims the whitespace around it, so the newlines render as nothing
    return "\n".join([
        "{%- for message in messages -%}",
        f"{{{{- '{chat_start}' + message['role'] + '\\n' -}}}}",
        "{%- if message['role'] == 'assistant' -%}",
        f"{{%- generation -%}}{{{{- message['content'] + '{chat_end}' -}}}}{{%- endgeneration -%}}",
        "{{- '\\n' -}}",
        "{%- else -%}",
        f"{{{{- message['content'] + '{chat_end}' + '\\n' -}}}}",
        "{%- endif -%}",
        "{%- endfor -%}",
        f"{{%- if add_generation_prompt -%}}{{{{- '{chat_start}assistant\\n' -}}}}{{%- endif -%}}",
    ])


@dataclass(frozen=True, slots=True)
class RenderedChat:
    text: str
    segments: list[tuple[str, int]]
    """(piece of text, 1 if inside a generation block else 0), in order, none empty; joined they
    give `text`."""


@lru_cache(maxsize=8)
def marks_generation(template: str) -> bool:
    """The template has `{% generation %}` blocks: they, not the rendered prefixes, say what the loss counts."""
    return GENERATION_TAG_RE.search(template) is not None


def render_chat(template: str, messages: list[Message], variables: dict[str, Any],
                turn_end_tokens: Sequence[str] = ()) -> RenderedChat:
    """Render one conversation; raises what the template raises (jinja2 TemplateError etc.), and, for a
    template without generation blocks, chat_turn_spans.TurnsNotMaskable. `turn_end_tokens`: the
    tokenizer's special tokens, which end an assistant turn in such a template."""
    if not marks_generation(template):
        text, spans = prefix_spans(template, messages, variables, turn_end_tokens)
        return RenderedChat(text, split_segments(text, spans))
    # transformers costs ~1 s to import; a corpus without chat documents never needs it
    from transformers.utils.chat_template_utils import render_jinja_template

    rendered, spans = render_jinja_template(conversations=[messages], chat_template=template,
                                            return_assistant_tokens_mask=True, **variables)
    return RenderedChat(rendered[0], split_segments(rendered[0], spans[0]))


def split_segments(text: str, spans: list[tuple[int, int]]) -> list[tuple[str, int]]:
    """Cut `text` at the edges of the (possibly overlapping or nested) generation spans."""
    merged: list[list[int]] = []
    for a, b in sorted(spans):
        if b <= a:
            continue
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    out: list[tuple[str, int]] = []
    pos = 0
    for a, b in merged:
        if a > pos:
            out.append((text[pos:a], 0))
        out.append((text[a:b], 1))
        pos = b
    if pos < len(text):
        out.append((text[pos:], 0))
    return out
