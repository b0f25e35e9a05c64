"""Config of the tokenizer and tokenization stages: the `tokenizer:` and `tokenize:` keys.

`tokenizer:` says where the tokenizer comes from (trained on the train split, or a pretrained one
loaded offline), its special tokens, its chat template and whether documents get BOS/EOS; those
choices travel with the saved tokenizer (`tokenizer_artifact.json`), so `tokenize:` only says what
to do with long documents and how big the batches are.
"""

from __future__ import annotations

import datetime
import re
from typing import Annotated, Literal

from pydantic import Field, model_validator

from platform_assets.contracts import StrictModel

GENERATION_TAG_RE = re.compile(r"\{%-?\s*generation\s*-?%\}")
OWN_TEMPLATE = "own"
CHATML_TEMPLATE = "chatml"
_TRAINING_FIELDS = ("algorithm", "vocab_size", "min_frequency", "max_train_bytes", "max_train_documents")
BYTE_ALPHABET_SIZE = 256  # every algorithm trains on the byte-level alphabet (see tokenizer_build.py)


def is_inline_template(value: str) -> bool:
    """A Jinja template rather than a keyword or a file path: it prints or runs something."""
    return "{{" in value or "{%" in value


class SpecialTokens(StrictModel):
    """Special token strings. A trained tokenizer gets exactly these (ids 0..k-1, in the order eos,
    pad, bos, unk, chat_start, chat_end). A pretrained one keeps the tokens it declares itself, except
    for a role set here explicitly (an instruct tokenizer's eos is its end of turn: Qwen2.5-Instruct's
    `<|im_end|>`; `eos: <|endoftext|>` makes the end of text the document boundary); for a role it does
    not declare, the string here is used if the vocabulary has it (GPT-2's bare
    tokenizer.json declares nothing and has `<|endoftext|>`), else pad falls back to eos and bos to
    none. The two ChatML tokens are added when the ChatML template is used and the vocabulary lacks
    them; with another template they are roles only where the vocabulary has them and the template
    writes them."""

    eos: str = "<|endoftext|>"
    pad: str | None = "<|pad|>"
    """None: pad = eos (a separate pad id is not needed: the shard format masks padding by length)."""
    bos: str | None = None
    unk: str | None = None
    """None: `<|unk|>` for unigram and wordpiece (their models need one; byte-level input never
    produces it), none for bpe."""
    chat_start: str = "<|im_start|>"
    chat_end: str = "<|im_end|>"

    @model_validator(mode="after")
    def _distinct(self) -> SpecialTokens:
        named = [(k, v) for k, v in self.model_dump().items() if v is not None]
        for key, value in named:
            if not value:
                raise ValueError(f"special_tokens.{key} is empty")
        seen: dict[str, str] = {}
        for key, value in named:
            if value in seen:
                raise ValueError(f"special_tokens.{key} and special_tokens.{seen[value]} are both {value!r}: "
                                 "give each role its own token (pad: null means pad = eos)")
            seen[value] = key
        return self


class TokenizerSettings(StrictModel):
    source: Literal["train", "pretrained"] = "train"
    """`train`: train on the text of the train split; `pretrained`: load `path` offline."""
    path: str | None = None
    """pretrained only: a directory written by `save_pretrained`, a tokenizer.json file, or a hub id
    already in the local Hugging Face cache (never downloaded). Absolute (the config layer resolves
    relative paths)."""
    algorithm: Literal["bpe", "unigram", "wordpiece"] = "bpe"
    """All three train on the byte-level alphabet (GPT-2's pre-tokenizer), so any UTF-8 text encodes
    without unknown tokens and decodes back exactly. `bpe` and `wordpiece` train reproducibly
    (byte-identical tokenizer.json for the same texts); `unigram` does not: tokenizers' Unigram
    trainer sums its EM statistics in the order of a randomly seeded hash map, so piece scores differ
    in the second decimal from run to run. Use it only with a pinned artifact (train once, then load
    it with source: pretrained)."""
    vocab_size: Annotated[int, Field(gt=BYTE_ALPHABET_SIZE)] = 8192
    """Including the special tokens and the 256 byte symbols."""
    min_frequency: Annotated[int, Field(ge=1)] = 2
    """bpe/wordpiece: a merge must occur at least this often in the training text."""
    max_train_bytes: Annotated[int, Field(gt=0)] | None = 256 * 2**20
    """Cap on training text (UTF-8 bytes). BPE training on 2 cores runs ~4 MB/s (20 MB: 5.5 s), so
    256 MiB is about a minute; a larger train split is sampled (below)."""
    max_train_documents: Annotated[int, Field(gt=0)] | None = None
    """Cap on training documents. When a cap bites, the documents taken are those with the smallest
    hash of their id (xxh3, seed 0): a uniform sample across sources, independent of part order."""
    special_tokens: SpecialTokens = SpecialTokens()
    chat_template: str | None = None
    """Jinja chat template for documents whose meta holds `messages`:
    - `own`: the pretrained tokenizer's own template (a save_pretrained directory's
      chat_template.jinja / tokenizer_config.json), kept as it is; no token is added, so the shards'
      vocabulary is the model's (Llama 3: 128,256 ids stay 128,256);
    - `chatml`: `<|im_start|>role\\ncontent<|im_end|>\\n`, each assistant message's content and its
      `<|im_end|>` inside `{% generation %}...{% endgeneration %}`; the two tokens are added when the
      vocabulary lacks them (GPT-2: 50,257 -> 50,259 ids);
    - a Jinja string (it holds `{{` or `{%`), or the path of a file holding one (relative to the
      config's folder).
    None: `own` when the pretrained tokenizer has a template, else `chatml`.
    What the loss counts: a template's `{% generation %}` blocks when it has them; otherwise each
    assistant turn is found by rendering the conversation's prefixes (chat_turn_spans.py), and a
    template whose turns cannot be found exactly that way is refused when the tokenizer is built."""
    chat_template_date: datetime.date = datetime.date(2024, 7, 26)
    """The day a chat template that reads the clock renders (Llama 3.1/3.2 instruct: "Today Date: 26
    Jul 2024"): passed as `date_string`, and `strftime_now` is bound to it, so the tokens never depend
    on the day the stage runs. Recorded in tokenizer_artifact.json (`template_date`). The default is the
    date transformers' own Llama 3.1 template tests pass."""
    add_bos: bool = False
    """Prepend BOS to every document (needs a bos token). Not for a chat document whose rendering
    already starts with it (templates that write `{{ bos_token }}` themselves)."""
    add_eos: bool = True
    """Append EOS to every document: packing lays documents end to end, and EOS is the boundary."""
    roundtrip_sample: Annotated[int, Field(ge=0)] = 1000
    """Documents checked for decode(encode(text)) == text and measured for bytes per token: those
    with the smallest id hash over all splits (deterministic, spread across sources)."""
    roundtrip_max_chars: Annotated[int, Field(gt=0)] = 65_536
    """Each sampled document is cut to this many characters: bounds the check's memory (the corpus
    p99 is 58 KB; cleaning allows 4 MiB)."""
    roundtrip_sample_chars: Annotated[int, Field(gt=0)] = 1 << 20
    """The sample's characters in all (after the per-document cut): the documents with the smallest
    hashes up to this budget, at least one. Without it the check re-encoded up to 1,000 x 64 Ki
    characters: 4.7 of the 6.6 MB a 128 MB end-to-end run keeps (~2 CPU-s, a third of tokenizing the
    whole set); 1 Mi characters are ~250 k tokens, plenty for the round trip and bytes per token."""

    @model_validator(mode="after")
    def _consistent(self) -> TokenizerSettings:
        if self.source == "pretrained":
            if not self.path:
                raise ValueError("tokenizer.path is required when tokenizer.source is 'pretrained'")
            stray = sorted(set(_TRAINING_FIELDS) & self.model_fields_set)
            if stray:
                raise ValueError(f"tokenizer.{stray[0]}: only used when tokenizer.source is 'train'")
        elif self.path is not None:
            raise ValueError("tokenizer.path: only read when tokenizer.source is 'pretrained'")
        if self.source == "train":
            if self.add_bos and self.special_tokens.bos is None:
                raise ValueError("tokenizer.add_bos needs tokenizer.special_tokens.bos")
            floor = BYTE_ALPHABET_SIZE + len(self.special_token_list())
            if self.vocab_size <= floor:
                raise ValueError(f"tokenizer.vocab_size {self.vocab_size} leaves no room for merges: "
                                 f"the byte alphabet and special tokens take {floor}")
        if self.chat_template is not None and not self.chat_template.strip():
            raise ValueError("tokenizer.chat_template is empty (null: the pretrained tokenizer's own or ChatML)")
        if self.chat_template == OWN_TEMPLATE and self.source != "pretrained":
            raise ValueError("tokenizer.chat_template: 'own' needs tokenizer.source 'pretrained' (a trained "
                             "tokenizer has no template of its own)")
        return self

    def chat_template_file(self) -> str | None:
        """`chat_template` when it names a file (not a keyword, not a Jinja template)."""
        value = self.chat_template
        if value is None or value in (OWN_TEMPLATE, CHATML_TEMPLATE) or is_inline_template(value):
            return None
        return value

    def unk_token(self) -> str | None:
        if self.special_tokens.unk is not None:
            return self.special_tokens.unk
        return "<|unk|>" if self.algorithm in ("unigram", "wordpiece") else None

    def special_token_list(self) -> list[str]:
        """The special tokens a trained tokenizer gets, in id order."""
        st = self.special_tokens
        ordered = [st.eos, st.pad, st.bos, self.unk_token(), st.chat_start, st.chat_end]
        return [t for t in ordered if t is not None]


class TokenizeSettings(StrictModel):
    max_length: Annotated[int, Field(gt=0)] | None = None
    """Longest row in tokens (BOS and EOS included). None: no limit."""
    overlong: Literal["keep", "truncate", "chunk"] = "keep"
    """A document longer than max_length is kept whole (and counted), truncated to its first
    max_length tokens (a truncated document has no EOS: it did not end there), or cut into
    consecutive max_length pieces, one row each with `chunk` = 0, 1, 2, ..."""
    encode_slice_bytes: Annotated[int, Field(gt=0)] = 2**20
    """UTF-8 bytes of text per call to the Rust tokenizer (one call per encoding thread runs at once:
    `io.workers`, at least two). Its Encoding objects cost ~100 bytes per token while they live (ids,
    type ids, a String per token, offsets, masks), so the slices in flight hold ~threads x slice x
    tokens per byte x 100 bytes (set `io.workers` to bound it on a many-core machine): what a slice
    holds follows its tokens, not its bytes, and the stage's peak followed the most token-dense
    batch it met. At 4 MiB that was 300-360 MB on top of the stage (pipeline_scaling, 8 MiB batches:
    peak 604 / 692 / 723 MB at 1x / 4x / 16x: 4x and 16x meet denser batches than 1x's two); at
    1 MiB it is ~85 MB at 0.4 tokens per byte and at most ~210 MB at one token per byte, and the
    same 4x input peaked at 319 MB in-process instead of 469 (2 MiB: 391) for the same CPU
    (23.2 vs 23.6 CPU-s). The output does not depend on it. On top, the document being encoded
    costs ~105-130 bytes per byte of its text inside tokenizers (a 3.7 MB Debian changelog: +476
    MB), which cleaning's 4 MiB document cap bounds; slices are encoded at once only while their
    largest documents add up to at most this many bytes, so two large documents are not inside
    tokenizers together (the real corpus's six 1 MB documents: the stage's peak 953 -> 793 MB)."""

    malloc_mmap_threshold: Annotated[int, Field(ge=0, le=32 * 2**20)] | None = 4 * 2**20
    """glibc's M_MMAP_THRESHOLD, fixed while the stage runs (platform_assets/heap.py): the tokenizer's
    blocks from this size up are mmapped and unmapped on free. Otherwise glibc raises the threshold to
    each freed block's size, and after a 1 MB document (16 MB of alignments) the next slices' vectors
    came from arenas that stayed ~70 MB larger (the real corpus's six 1 MB documents: peak after them
    606-621 -> 573-584 MB in-process, the same CPU). `null` leaves malloc as it is."""

    malloc_arena_max: Annotated[int, Field(ge=1)] | None = 2
    """glibc's M_ARENA_MAX, set when the stage starts (platform_assets/heap.py, `cap_malloc_arenas`):
    the stage's threads share this many malloc arenas. With glibc's default (8 per core) its RSS crept
    through the pipeline_scaling 16x input (8.1 GB): peak 539-549 MB against 474 at 1x; with 2, 498.
    glibc cannot undo it, so it holds for the rest of the process (the in-process job's packing).
    `null` leaves malloc as it is."""

    word_cache_capacity: Annotated[int, Field(ge=0)] | None = 1000
    """Words the tokenizer model caches while the stage encodes (BPE and Unigram models, through
    tokenizers' `_resize_cache`; the cache's memory growth is huggingface/tokenizers#1539). 0 turns the
    cache off; `null` keeps the tokenizer's own (10,000). The output does not depend on it. At 10,000
    the stage's peak rose with the input (in-process, GPT-2 on pipeline_scaling's inputs: 595-637 MB at
    1x, 665 at 4x): the arenas of the encoding threads kept ~70 MB more resident after each run of 1 MB
    documents and did not give it back (malloc_trim released 27 MB of 562). At 1,000: 561 and 587 MB; at
    0: 555-562 and 590. Encoding alone (70 slices of 1 MiB, two in flight, three runs each): 26.3 CPU-s
    at 10,000, 28.4 at 1,000, 31.1 at 0; the whole stage at 4x ran 246 s at 10,000 and 217 s at 1,000
    (one run each). pipeline_scaling's high-water marks, the stage on its 1x / 4x / 16x inputs: 648 /
    705 / 739 MB at 10,000, 604 / 642 / 676 at 1,000, the same CPU."""

    encoder: Literal["auto", "tokenizers"] = "auto"
    """What encodes documents' text. `auto`: tiktoken where the tokenizer is a GPT-2-style byte-level BPE
    that it encodes to the same ids (tokenize/tiktoken_bpe.py lists the conditions; GPT-2 and the
    tokenizers this platform trains meet them), tokenizers otherwise; the stage's metadata says which
    and why. `tokenizers`: tokenizers for every document. Chat documents always go through tokenizers
    (their template writes control tokens as text, which must match). On the real corpus, GPT-2:
    tokenizers 1.07 / 1.06 CPU-s per MB of prose / code, tiktoken 0.16 / 0.12, the same ids."""

    own_thread_min_chars: Annotated[int, Field(gt=0)] | None = 256 * 2**10
    """A document (or chat segment) of at least this many characters is encoded on a thread started
    for it, so that its ~105-130 bytes per byte of text inside tokenizers come from an arena no
    long-lived thread allocates from and go back when it is done (tokenizer_runtime.serial_tokenizers has the
    figures: the stage's floor stopped rising with the number of 1 MB documents it meets). A thread
    costs ~0.1 ms, nothing beside encoding 256 Ki characters (~0.3 s). `null`: every document is
    encoded on the encoder's own threads. The output does not depend on it."""

    row_group_bytes: Annotated[int, Field(gt=0)] = 16 * 2**20
    """A (split, source) set's token rows are written as row groups of about this many bytes of Arrow
    data (at most `io.batch_bytes`; tokenize/set_writers.py): each is read back whole from its spill
    file to be written, so it is on top of the tokenizer's work while it is written. At 64 MiB (io's
    default batch) that was +65-75 MB of Arrow every ~12 s, and the stage's three highest peaks on
    pipeline_scaling's 16x input (in-process, 628 / 610 / 609 MB) were writes that fell while a
    400-720 KB document was encoded: that input has sixteen times as many of them as 1x, so its
    peak was the worst of more such meetings. The stage alone on those inputs, high-water marks: 1x
    613-635 MB (three runs), 16x 665 (1.05-1.08x; at 64 MiB 608-622 and 674, 1.08-1.11x). The rows do
    not depend on it; packing reads `io.batch_bytes` at a time whatever the row groups."""

    lance: bool = False
    """Also write each (split, source) set as a Lance dataset, `lance/<split>/<source>.lance` in the output
    (the same rows in the same order as its Parquet parts, which the later stages read): random access to a
    document's tokens by row with `lance.dataset(dir).take(rows)`. Written batch by batch (a few batches
    per set in memory); not byte-identical across rebuilds (Lance's UUID file names), its files are in the
    output's manifest with their sha256 (tokenize/lance_documents.py)."""

    @model_validator(mode="after")
    def _needs_length(self) -> TokenizeSettings:
        if self.overlong != "keep" and self.max_length is None:
            raise ValueError(f"tokenize.overlong: {self.overlong!r} needs tokenize.max_length")
        return self
