"""Tiny pretrained-style tokenizers for the chat-template tests: byte-level BPE trained on a few sentences,
wrapped in PreTrainedTokenizerFast with a Llama-3- or Qwen-2.5-style chat template (with or without
`{% generation %}` blocks), saved with save_pretrained. Nothing is downloaded."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers

SENTENCES = [
    "You are a helpful assistant.", "Hello! How can I help you today?", "What is two plus two?",
    "Two plus two is four.", "Write a short poem about the sea.", "The sea is wide and deep and blue.",
    "Thanks a lot.", "You are welcome.", "Explain tokenizers in one line.",
    "A tokenizer maps text to ids.", "def add(a, b):\n    return a + b\n",
]

# Llama 3's template (Meta-Llama-3-8B-Instruct), with generation blocks in the marked variant; both render
# the same text
LLAMA3 = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}"
    "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'"
    "+ message['content'] | trim + '<|eot_id|>' %}"
    "{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)
LLAMA3_MARKED = (
    "{% for message in messages %}{% if loop.index0 == 0 %}{{ bos_token }}{% endif %}"
    "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' }}"
    "{% if message['role'] == 'assistant' %}{% generation %}{{ message['content'] | trim + '<|eot_id|>' }}"
    "{% endgeneration %}{% else %}{{ message['content'] | trim + '<|eot_id|>' }}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)
LLAMA3_SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]

# Qwen 2.5's template without tools (a default system message when the conversation has none)
QWEN = (
    "{%- for message in messages %}"
    "{%- if loop.first and message['role'] != 'system' %}"
    "{{- '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}{%- endif %}"
    "{{- '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}{%- endif %}"
)
QWEN_MARKED = (
    "{%- for message in messages %}"
    "{%- if loop.first and message['role'] != 'system' %}"
    "{{- '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}{%- endif %}"
    "{{- '<|im_start|>' + message['role'] + '\n' }}"
    "{%- if message['role'] == 'assistant' %}{%- generation %}{{- message['content'] + '<|im_end|>' }}"
    "{%- endgeneration %}{%- else %}{{- message['content'] + '<|im_end|>' }}{%- endif %}"
    "{{- '\n' }}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}{%- endif %}"
)
QWEN_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


@dataclass(frozen=True)
class Style:
    name: str
    template: str
    marked: str
    specials: list[str]
    roles: dict[str, str]
    """save_pretrained's eos/pad/bos tokens."""


LLAMA = Style("llama3", LLAMA3, LLAMA3_MARKED, LLAMA3_SPECIALS,
              {"bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>", "pad_token": "<|end_of_text|>"})
QWEN25 = Style("qwen2.5", QWEN, QWEN_MARKED, QWEN_SPECIALS,
               {"eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>"})
STYLES = [LLAMA, QWEN25]


def bpe(specials: list[str], vocab_size: int = 400) -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=1, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([SENTENCES * 3], trainer)
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in specials])
    return tok


def save_pretrained_dir(directory: Path, style: Style, template: str | None) -> Path:
    """A save_pretrained directory of a tiny tokenizer in `style`, with `template` (None: no template)."""
    from transformers import PreTrainedTokenizerFast

    hf = PreTrainedTokenizerFast(tokenizer_object=bpe(style.specials), chat_template=template, **style.roles)
    hf.save_pretrained(directory)
    return directory
