"""Documents' text through tiktoken when the tokenizer is a GPT-2-style byte-level BPE that tiktoken
encodes to the same ids: the tokenize stage's fast path (`TokenizeSettings.encoder`).

Why: tokenizers' BPE ran at ~1 MB per CPU-second on the real corpus here (12.2 MB of prose: 13.1
CPU-s; 33.4 MB of code: 35.5), and encoding was 25% of pipeline_end_to_end's CPU per additional MB
(py-spy, 64.7 -> 256 MB). tiktoken (OpenAI's Rust BPE, the encoder of its own GPT-2 files) encoded the
same documents 6.5x and 8.8x faster, to the same ids.

tiktoken's merge loop is BPE by ranks: it merges the adjacent pair whose concatenated bytes have the
lowest rank (its rank is also the id), and a piece that is in the vocabulary as a whole is taken
whole. tokenizers' BPE merges the pair that comes first in the merge list. The two give the same ids
when (`tiktoken_encoding` checks each, and answers why not where one fails):

- the text is split into pieces the same way: no normalizer, and the pre-tokenizer is tokenizers'
  ByteLevel with its GPT-2 pattern and no prefix space (`GPT2_PATTERN` is the same alternation);
- the model is a plain BPE: no dropout, no byte fallback, no subword prefix or word suffix;
- every one of the 256 bytes has a token, so neither side ever meets an unknown byte, and every
  other vocabulary entry is a merge's result or a special token (tiktoken's ranks hold bytes and
  merge results only);
- a merge's result has a larger id than every earlier merge's result: merge order = rank order;
- every token the merges make is what tokenizers' BPE makes of that token's own text, so taking a
  whole piece (tiktoken) and merging it up (tokenizers) agree on every piece that is a token;
- added tokens are all special: the document path encodes special strings as text
  (`TokenizerArtifact.text_tokenizer`), which is tiktoken's `encode_ordinary`, and a non-special added
  token would be matched in text by tokenizers but not by tiktoken.

What these cannot rule out is a state, inside a longer piece, where two adjacent tokens concatenate
to a token that the merge list makes from another split: tiktoken merges them, tokenizers does not. It
is why `auto` is measured, not assumed: the GPT-2 tokenizer gave identical ids on the whole real corpus
(benchmarks/RESULTS.md) and on hypothesis' texts (tests/unit/test_tokenize_tiktoken_bpe.py), and the
tokenizer stage's round-trip sample compares both encoders' ids on every build (`sanity_report`).
`encoder: tokenizers` keeps tokenizers for every document.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import tiktoken
from tokenizers import Tokenizer

GPT2_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
"""tokenizers' ByteLevel(use_regex=True) pattern ('s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+|
?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+), written as tiktoken's gpt2 encoding writes it."""


def _byte_of_char() -> dict[str, int]:
    """ByteLevel's alphabet: the printable character that stands for each byte (GPT-2's bytes_to_unicode)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars = dict(zip(printable, printable, strict=True))
    shifted = 0
    for b in range(256):
        if b not in chars:
            chars[b] = 256 + shifted
            shifted += 1
    return {chr(c): b for b, c in chars.items()}


@dataclass(frozen=True)
class TiktokenChoice:
    """`encoding` when tiktoken encodes documents to tokenizers' ids, else None and `reason`."""
    encoding: tiktoken.Encoding | None
    reason: str

    @property
    def description(self) -> str:
        """What encodes documents, as the tokenize stage's metadata and the tokenizer's
        `document_encoder_exact` check say it: "tiktoken", or "tokenizers (why not tiktoken)"."""
        return "tiktoken" if self.encoding is not None else f"tokenizers ({self.reason})"


TOKENIZERS_CHOSEN = TiktokenChoice(None, "encoder: tokenizers")
"""The choice when the settings keep tokenizers for every document (`TokenizeSettings.encoder`)."""


def _refused(reason: str) -> TiktokenChoice:
    return TiktokenChoice(None, reason)


def _is_gpt2_byte_level(pre: dict[str, Any] | None) -> bool:
    return (pre is not None and pre.get("type") == "ByteLevel" and pre.get("use_regex", True)
            and not pre.get("add_prefix_space", False))


def tiktoken_encoding(tokenizer: Tokenizer, tokenizer_json: str | None = None) -> TiktokenChoice:
    """The tiktoken Encoding that gives `tokenizer`'s document ids, or why there is none (the module
    docstring lists the conditions). `tokenizer_json`: its JSON where already at hand (saves a dump)."""
    spec = json.loads(tokenizer_json or tokenizer.to_str())
    model = spec.get("model") or {}
    if model.get("type") != "BPE":
        return _refused(f"the model is {model.get('type')}, not BPE")
    if spec.get("normalizer") is not None:
        return _refused("the tokenizer has a normalizer")
    if not _is_gpt2_byte_level(spec.get("pre_tokenizer")):
        return _refused("the pre-tokenizer is not ByteLevel with GPT-2's pattern and no prefix space")
    for key in ("dropout", "unk_token", "continuing_subword_prefix", "end_of_word_suffix"):
        if model.get(key):
            return _refused(f"the BPE model sets {key}")
    if model.get("byte_fallback"):
        return _refused("the BPE model sets byte_fallback")
    added = spec.get("added_tokens") or []
    if any(not t.get("special") for t in added):
        return _refused("the tokenizer has non-special added tokens (tokenizers matches them in text)")
    vocab: dict[str, int] = model["vocab"]
    byte_of = _byte_of_char()
    if any(ch not in vocab for ch in byte_of):
        return _refused("not every byte has a token")
    ranks: dict[bytes, int] = {bytes([b]): vocab[ch] for ch, b in byte_of.items()}
    previous = -1
    made: list[str] = []
    for merge in model.get("merges") or []:
        left, right = merge.split(" ", 1) if isinstance(merge, str) else merge
        token = left + right
        tid = vocab.get(token)
        if tid is None or tid <= previous:
            return _refused(f"merge {left!r} + {right!r} does not make a token whose id follows the previous "
                            "merge's: merge order is not id order")
        previous = tid
        try:
            ranks[bytes(byte_of[ch] for ch in token)] = tid
        except KeyError:
            return _refused(f"merge result {token!r} holds a character outside ByteLevel's alphabet")
        made.append(token)
    specials = {t["content"] for t in added}
    made_or_bytes = set(made) | set(byte_of)
    unreachable = [t for t in vocab if t not in made_or_bytes and t not in specials]
    if unreachable:
        return _refused(f"{len(unreachable)} vocabulary entries are neither a byte, a merge's result nor a special "
                        f"token (e.g. {unreachable[0]!r})")
    bpe_of = tokenizer.model.tokenize
    for token in made:
        pieces = bpe_of(token)
        if len(pieces) != 1 or pieces[0].id != vocab[token]:
            return _refused(f"tokenizers' BPE splits the token {token!r} itself (tiktoken would keep it whole)")
    encoding = tiktoken.Encoding("platform-byte-level-bpe", pat_str=GPT2_PATTERN, mergeable_ranks=ranks,
                                 special_tokens={})
    return TiktokenChoice(encoding, "")


def tiktoken_ids(encoding: tiktoken.Encoding) -> Callable[[list[str]], list[list[int]]]:
    """The tokenize stage's document encoder (encode.IdsOf) over `encoding`."""
    return functools.partial(encode_texts, encoding)


def encode_texts(encoding: tiktoken.Encoding, texts: Sequence[str]) -> list[list[int]]:
    """Each text's ids, special-token strings as text (`encode_ordinary`), on the calling thread:
    tiktoken lets go of the GIL while it encodes, so the stage's slice threads run side by side."""
    encode = encoding.encode_ordinary
    return [encode(text) for text in texts]

