"""Which chat template a tokenizer gets: `tokenizer.chat_template` resolved against the pretrained
tokenizer's own template (settings.TokenizerSettings.chat_template documents the values).

A pretrained instruct model was trained on its own template; replacing it with ChatML would teach it a
format it never saw and add tokens it has no embedding rows for (GPT-2: 50,257 -> 50,259 ids). So a
pretrained tokenizer that has a template keeps it unless the config says otherwise, and only the ChatML
choice ever adds tokens (tokenizer_build.make_artifact).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from platform_assets.tokenize.chat_template import chatml_template
from platform_assets.tokenize.settings import CHATML_TEMPLATE, OWN_TEMPLATE, TokenizerSettings, is_inline_template

TemplateOrigin = Literal["own", "chatml", "custom"]
# a hub tokenizer may carry several named templates (`{"default": ..., "tool_use": ...}`)
DEFAULT_TEMPLATE_NAME = "default"


@dataclass(frozen=True, slots=True)
class ChosenTemplate:
    text: str
    origin: TemplateOrigin


def single_template(hf_chat_template: Any, path: str) -> str | None:
    """A transformers tokenizer's `chat_template` as one string: None when it has none; of several
    named templates, the `default` one."""
    if hf_chat_template is None or isinstance(hf_chat_template, str):
        return hf_chat_template or None
    if isinstance(hf_chat_template, dict):
        if DEFAULT_TEMPLATE_NAME not in hf_chat_template:
            raise ValueError(f"tokenizer.path {path!r}: its chat templates are named {sorted(hf_chat_template)}, none "
                             f"{DEFAULT_TEMPLATE_NAME!r}: give tokenizer.chat_template (a Jinja string or file)")
        return single_template(hf_chat_template[DEFAULT_TEMPLATE_NAME], path)
    raise ValueError(f"tokenizer.path {path!r}: chat_template is a {type(hf_chat_template).__name__}")


def choose_chat_template(settings: TokenizerSettings, own: str | None) -> ChosenTemplate:
    """The template for `settings` given the pretrained tokenizer's own (None: it has none, or the
    tokenizer is trained). Raises on `own` without one and on a template file that cannot be read."""
    value = settings.chat_template
    st = settings.special_tokens
    if value is None:
        if own is not None:
            return ChosenTemplate(own, "own")
        return ChosenTemplate(chatml_template(st.chat_start, st.chat_end), "chatml")
    if value == OWN_TEMPLATE:
        if own is None:
            raise ValueError(f"tokenizer.chat_template is 'own' but the tokenizer at {settings.path!r} has no chat "
                             "template (a bare tokenizer.json never has one): use chatml or give a template")
        return ChosenTemplate(own, "own")
    if value == CHATML_TEMPLATE:
        return ChosenTemplate(chatml_template(st.chat_start, st.chat_end), "chatml")
    if is_inline_template(value):
        return ChosenTemplate(value, "custom")
    path = Path(value).expanduser()
    if not path.is_file():
        raise FileNotFoundError(f"tokenizer.chat_template {value!r} is not 'own', 'chatml', a Jinja template (it has "
                                "no '{{' or '{%') or an existing file")
    text = path.read_text(encoding="utf-8")
    if not text.strip():
        raise ValueError(f"tokenizer.chat_template: the file {value!r} is empty")
    return ChosenTemplate(text, "custom")
