"""Write a stand-in base checkpoint for the SFT example: `python scripts/make_base_model.py OUT_DIR`.

It plays the part of the user's own instruct checkpoint (a Llama or Qwen download they already have
as a `save_pretrained` directory): a tiny LlamaForCausalLM with seeded random weights and its
tokenizer, a byte-level BPE trained on text shipped in the repository (sample_data/real_docs.jsonl.gz,
~720 KB of Python docs) with Llama 3's special tokens and chat template. The template has no
`{% generation %}` blocks, like most hub templates, so the pipeline's own-template masking
(platform_assets/tokenize/chat_turn_spans.py) is what finds the assistant turns. Nothing is
downloaded; the same command writes the same bytes (BPE training and a seeded init are deterministic).
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO / "sample_data" / "real_docs.jsonl.gz"

# 4096 ids: a few seconds of BPE training on the shipped text, and uint16 shards (any vocabulary up
# to 65,536 ids keeps them at 2 bytes a token)
VOCAB_SIZE = 4096
# The platform packs the example into 512-token samples; the model must hold one (its context is
# checked against the shard index before the weights are read: training/pretrained.py)
MAX_POSITIONS = 1024
# A seed of its own, not the training job's (0): a run that wrongly initialised fresh weights would
# not reproduce the base model's first loss by coincidence
SEED = 1234

SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
ROLES = {"bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>", "pad_token": "<|end_of_text|>"}

# Meta-Llama-3-8B-Instruct's chat template as published (no generation blocks)
LLAMA3_TEMPLATE = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}"
    "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'"
    "+ message['content'] | trim + '<|eot_id|>' %}"
    "{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)

# ~0.5M parameters besides the 4096 x 64 embeddings: a few dozen CPU steps in well under a minute
MODEL_SHAPE = {"hidden_size": 64, "intermediate_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4,
               "num_key_value_heads": 4}


def _corpus_texts(path: Path) -> Iterator[str]:
    with gzip.open(path, "rt", encoding="utf-8") as lines:
        for line in lines:
            text = json.loads(line).get("text")
            if isinstance(text, str) and text:
                yield text


def train_tokenizer(corpus: Path = CORPUS, vocab_size: int = VOCAB_SIZE):
    """A byte-level BPE (GPT-2 / Llama 3 style) on `corpus`, with Llama 3's special tokens and template."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size - len(SPECIALS), min_frequency=2, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    bpe.train_from_iterator(_corpus_texts(corpus), trainer)
    bpe.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIALS])
    return PreTrainedTokenizerFast(tokenizer_object=bpe, chat_template=LLAMA3_TEMPLATE, **ROLES)


def build_model(tokenizer, seed: int = SEED):
    """A LlamaForCausalLM sized to `tokenizer`, with seeded random weights."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=len(tokenizer), max_position_embeddings=MAX_POSITIONS,
                         bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id, tie_word_embeddings=False, **MODEL_SHAPE)
    torch.manual_seed(seed)
    return LlamaForCausalLM(config)


def write_base_model(out_dir: Path, corpus: Path = CORPUS) -> Path:
    """Tokenizer and model, saved with save_pretrained into `out_dir` (created; existing files replaced)."""
    if not corpus.is_file():
        raise FileNotFoundError(f"{corpus}: the tokenizer's training text is missing from the checkout")
    tokenizer = train_tokenizer(corpus)
    model = build_model(tokenizer)
    out_dir.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(out_dir)
    model.save_pretrained(out_dir, safe_serialization=True)
    return out_dir


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path, help="the save_pretrained directory to write (e.g. data/base_model)")
    args = parser.parse_args(argv)
    out = write_base_model(args.out_dir)
    print(f"base model written to {out}: LlamaForCausalLM, vocabulary {VOCAB_SIZE}, "
          f"context {MAX_POSITIONS}, Llama 3 chat template (no generation blocks)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
