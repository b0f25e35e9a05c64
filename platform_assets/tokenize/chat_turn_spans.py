"""The assistant turns of a chat template without `{% generation %}` blocks, found by rendering prefixes.

Most hub templates (Llama 3, Qwen 2.5, Mistral, Gemma) mark nothing, and `apply_chat_template(
return_assistant_tokens_mask=True)` then returns an all-zero mask. The template itself still says where
an answer starts: the generation prompt it writes at inference. For a conversation m[0..n) and each
assistant message k, with R(j) = render(m[:j]) and P(k) = render(m[:k], add_generation_prompt=True)
(transformers' renderer, as apply_chat_template), the answer is R(n)[len(P(k)) : len(P(k)) + e], where
e ends the last control token of R(k+1)[len(P(k)):] (`<|eot_id|>`, `<|im_end|>`, `</s>`,
`<end_of_turn>`: the end of turn the model must learn to emit). This is exact only if the rendering is
a concatenation of its turns, which is checked for every conversation:
1. R(k) is a proper prefix of P(k): the template writes a generation prompt (one that ignored
   add_generation_prompt would put the assistant header into the answer);
2. P(k) is a prefix of R(k+1): the answer follows the prompt the model is given at inference;
3. R(k+1) is a prefix of R(n): later messages do not rewrite turn k (Qwen3's template drops the
   `<think>` block of turns before the last question: refused);
4. the answer's tail holds a control token and only whitespace follows the last one (the separator
   between turns, `\\n` in ChatML, is never generated: generation stops at the end-of-turn token).
Otherwise `TurnsNotMaskable` says which check failed; the document is excluded
(`tokenize.chat_turns_not_maskable`), and a template that fails on the probe conversation is refused
when the tokenizer is built. On templates that pass, the spans equal what `{% generation %}` around
each assistant content and its end-of-turn token would mark (pinned by the tests for Llama-3- and
Qwen-style templates against transformers' own mask).

Why not configured marker strings (search the rendering for `<|start_header_id|>assistant
<|end_header_id|>\\n\\n` ... `<|eot_id|>`): a marker spelt as text depends on the template's spacing and
trims (Llama 3 trims each content) and must be written per template; a search cannot tell a marker from
the same text inside a message; and nothing would prove the rendering is the concatenation the mask
assumes. The prefixes need no configuration and check that assumption on every document.

Cost: one render per message boundary needed (at most n) and one per assistant message, in two batched
calls to the renderer; a user/assistant pair renders 3 conversations instead of 1. Measured on 2,000
conversations of 1-2 turns with tiny Llama-3- and Qwen-style tokenizers (2 shared cores): 119-122 us per
conversation, against 66-75 us for the same templates with generation blocks.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from platform_assets.tokenize.conversations import Message


class TurnsNotMaskable(ValueError):
    """The template's rendering of this conversation is not a concatenation of its turns."""


def _render(template: str, conversations: list[list[Message]], variables: dict[str, Any],
            add_generation_prompt: bool) -> list[str]:
    # transformers costs ~1 s to import; a corpus without chat documents never needs it
    from transformers.utils.chat_template_utils import render_jinja_template

    if not conversations:
        return []
    rendered, _ = render_jinja_template(conversations=conversations, chat_template=template,
                                        add_generation_prompt=add_generation_prompt, **variables)
    return list(rendered)


def turn_end(tail: str, turn_end_tokens: Sequence[str]) -> int:
    """End (in `tail`) of the special token that only whitespace follows; -1 when there is none.
    Only the window where such a token can start is searched: Llama 3 has 256 special tokens, and a
    scan of a whole 4 KB answer per token would read 1 MB per turn."""
    text_end = len(tail.rstrip())
    ends = [i + len(t) for t in turn_end_tokens if t and (i := tail.find(t, max(0, text_end - len(t)))) >= 0]
    return max(ends, default=-1)


def prefix_spans(template: str, messages: list[Message], variables: dict[str, Any],
                 turn_end_tokens: Sequence[str]) -> tuple[str, list[tuple[int, int]]]:
    """(the rendered conversation, the character span of each assistant turn). Raises
    TurnsNotMaskable, or what the template raises."""
    n = len(messages)
    assistant = [k for k, m in enumerate(messages) if m["role"] == "assistant"]
    cuts = sorted({n, *(k for k in assistant if k > 0), *(k + 1 for k in assistant)})
    upto = dict(zip(cuts, _render(template, [messages[:j] for j in cuts], variables, False), strict=True))
    prompts = _render(template, [messages[:k] for k in assistant], variables, True)
    full = upto[n]
    spans: list[tuple[int, int]] = []
    for k, prompt in zip(assistant, prompts, strict=True):
        where = f"messages[{k}] (assistant)"
        before = upto.get(k, "")
        if len(prompt) <= len(before) or not prompt.startswith(before):
            raise TurnsNotMaskable(f"{where}: add_generation_prompt=True does not append a generation prompt to "
                                   f"the rendering of messages[:{k}]")
        turn = upto[k + 1]
        if not turn.startswith(prompt):
            raise TurnsNotMaskable(f"{where}: the rendering with this message does not start with the generation "
                                   f"prompt of messages[:{k}] (the template renders an answer differently from "
                                   "what it prompts)")
        if not full.startswith(turn):
            raise TurnsNotMaskable(f"{where}: a later message changes how this turn is rendered (the template "
                                   "rewrites earlier turns)")
        tail = turn[len(prompt):]
        end = turn_end(tail, turn_end_tokens)
        if end < 0:
            last = max((tail.rfind(t) + len(t) for t in turn_end_tokens if t and t in tail), default=-1)
            if last >= 0:
                raise TurnsNotMaskable(f"{where}: text follows the turn's last special token: {tail[last:][:40]!r}")
            raise TurnsNotMaskable(f"{where}: the turn ends with no special token (nothing marks the end of turn "
                                   f"the model must emit): {tail[-40:]!r}")
        spans.append((len(prompt), len(prompt) + end))
    return full, spans
