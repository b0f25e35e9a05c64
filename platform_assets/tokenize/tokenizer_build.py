"""Build a tokenizer (train one, or load a pretrained one offline), save it, and check it.

Training uses the `tokenizers` library on the byte-level alphabet for every algorithm: GPT-2's
pre-tokenizer (its regex split, bytes mapped to 256 printable symbols) and decoder, with the 256
symbols forced into the vocabulary. Any UTF-8 text then encodes without an unknown token and
decodes back byte for byte, which the round-trip check measures. No normalizer: the cleaning stage
already normalised the text (NFC), and a tokenizer that rewrote it could not round-trip.

- bpe: GPT-2's algorithm; training is reproducible (same texts and settings -> byte-identical
  tokenizer.json, single- or multi-threaded; pinned by a test).
- wordpiece: BERT's greedy longest-match over the same byte symbols, with no `##` continuation
  prefix (the symbols already mark word starts); words longer than `WORDPIECE_MAX_WORD_CHARS`
  become `<|unk|>` (longest-match is quadratic in the word), which the round-trip check counts.
- unigram: SentencePiece's algorithm; not reproducible (see settings.TokenizerSettings.algorithm).

Saving writes `save_pretrained`'s files (so `AutoTokenizer.from_pretrained(dir)` works, with the
chat template and eos/pad set) plus `tokenizer_artifact.json` (tokenizer_artifact.py). A pretrained
tokenizer.json is kept as it is (its post-processor too: Llama's adds BOS when a caller asks for
special tokens); the tokenize stage always encodes with add_special_tokens=False and places BOS/EOS
itself, per `tokenizer.add_bos` / `add_eos`.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers

from platform_assets.tokenize.chat_template import marks_generation, render_chat
from platform_assets.tokenize.chat_template_choice import ChosenTemplate, choose_chat_template, single_template
from platform_assets.tokenize.chat_turn_spans import TurnsNotMaskable
from platform_assets.tokenize.settings import TokenizerSettings
from platform_assets.tokenize.tiktoken_bpe import encode_texts
from platform_assets.tokenize.tokenizer_artifact import ARTIFACT_FILE, TOKENIZER_FILE, TokenizerArtifact

WORDPIECE_MAX_WORD_CHARS = 1024
_ROUNDTRIP_EXAMPLES = 10
# a conversation the sanity check renders: the template must mark something as generated. Two turns, so
# that a template masked by rendered prefixes shows whether it rewrites earlier turns; no system message,
# which some templates refuse (Gemma's raises on the role)
_PROBE_CONVERSATION = [
    {"role": "user", "content": "Say hi."},
    {"role": "assistant", "content": "Hi."},
    {"role": "user", "content": "Again."},
    {"role": "assistant", "content": "Hi again."},
]


# -- training ----------------------------------------------------------------------------------------
def _byte_level(tokenizer: Tokenizer) -> Tokenizer:
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tokenizer.decoder = decoders.ByteLevel()
    return tokenizer


def untrained_tokenizer(settings: TokenizerSettings) -> tuple[Tokenizer, trainers.Trainer]:
    """The empty tokenizer and its trainer for `settings.algorithm`."""
    specials = settings.special_token_list()
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    common: dict[str, Any] = {"vocab_size": settings.vocab_size, "special_tokens": specials,
                              "initial_alphabet": alphabet, "show_progress": False}
    if settings.algorithm == "bpe":
        return (_byte_level(Tokenizer(models.BPE())),
                trainers.BpeTrainer(min_frequency=settings.min_frequency, **common))
    unk = settings.unk_token()
    if settings.algorithm == "wordpiece":
        model = models.WordPiece(unk_token=unk, continuing_subword_prefix="",
                                 max_input_chars_per_word=WORDPIECE_MAX_WORD_CHARS)
        return (_byte_level(Tokenizer(model)),
                trainers.WordPieceTrainer(min_frequency=settings.min_frequency, continuing_subword_prefix="",
                                          **common))
    return _byte_level(Tokenizer(models.Unigram())), trainers.UnigramTrainer(unk_token=unk, **common)


def train_tokenizer(text_batches: Iterable[Sequence[str]], settings: TokenizerSettings) -> Tokenizer:
    """Train on batches of texts (a list per record batch: one Python call per batch, not per text)."""
    if settings.source != "train":
        raise ValueError("train_tokenizer needs tokenizer.source 'train'")
    tokenizer, trainer = untrained_tokenizer(settings)
    tokenizer.train_from_iterator(text_batches, trainer)
    return tokenizer


# -- loading -------------------------------------------------------------------------------------------
def load_pretrained(path: str) -> tuple[Tokenizer, dict[str, str]]:
    """(Rust tokenizer, the special tokens it declares by role): `load_pretrained_with_template` without
    the template."""
    tokenizer, declared, _ = load_pretrained_with_template(path)
    return tokenizer, declared


def load_pretrained_with_template(path: str) -> tuple[Tokenizer, dict[str, str], str | None]:
    """(Rust tokenizer, the special tokens it declares by role, its own chat template or None) from a
    tokenizer.json file, a save_pretrained directory, or a hub id already in the local cache. Never
    downloads."""
    p = Path(path)
    if p.is_file():
        if p.suffix != ".json":
            raise ValueError(f"tokenizer.path {path!r}: a file must be a tokenizer.json")
        return Tokenizer.from_file(str(p)), {}, None  # a bare tokenizer.json declares no roles, has no template
    if not p.is_dir() and (p.is_absolute() or path.startswith((".", "~"))):
        raise FileNotFoundError(f"tokenizer.path {path!r} does not exist")
    from transformers import AutoTokenizer  # ~1 s to import: only when a pretrained tokenizer is used

    try:
        hf = AutoTokenizer.from_pretrained(path, local_files_only=True)
    except OSError as err:
        where = "directory" if p.is_dir() else "hub id (looked up in the local cache only; nothing is downloaded)"
        raise ValueError(f"tokenizer.path {path!r}: cannot load this {where}: {err}") from None
    backend = getattr(hf, "backend_tokenizer", None)
    if backend is None:
        raise ValueError(f"tokenizer.path {path!r}: {type(hf).__name__} has no `tokenizers` backend "
                         "(a tokenizer.json); the tokenize stage needs one")
    declared = {role: getattr(hf, f"{role}_token", None) for role in ("eos", "pad", "bos", "unk")}
    return (Tokenizer.from_str(backend.to_str()), {r: t for r, t in declared.items() if isinstance(t, str) and t},
            single_template(getattr(hf, "chat_template", None), path))


def make_artifact(tokenizer: Tokenizer, settings: TokenizerSettings, declared: dict[str, str] | None = None,
                  info: dict[str, Any] | None = None, own_template: str | None = None) -> TokenizerArtifact:
    """Resolve each special-token role (settings.SpecialTokens says how), choose the chat template
    (chat_template_choice.py; `own_template`: the pretrained tokenizer's), add the ChatML tokens the
    vocabulary lacks when ChatML is chosen (no token otherwise), and attach the template and BOS/EOS
    flags. Raises when a template without generation blocks cannot be masked exactly (chat_turn_spans.py)."""
    declared = declared or {}
    st = settings.special_tokens
    tokenizer = Tokenizer.from_str(tokenizer.to_str())  # a copy: the caller's tokenizer stays as it was

    def in_vocab(token: str | None) -> str | None:
        return token if token is not None and tokenizer.token_to_id(token) is not None else None

    # a role the config sets explicitly beats the one the tokenizer declares: an instruct tokenizer declares
    # its end of turn as eos (Qwen2.5-Instruct <|im_end|>, Llama-3-Instruct <|eot_id|>), while the boundary of
    # packed documents should be the end of text (special_tokens: {eos: <|endoftext|>})
    for role in ("eos", "pad", "bos", "unk"):
        token = getattr(st, role)
        if role in st.model_fields_set and token is not None:
            if not in_vocab(token):
                raise ValueError(f"tokenizer has no {role} token {token!r} (tokenizer.special_tokens.{role}): "
                                 "its vocabulary lacks it")
            declared = {**declared, role: token}
    roles: dict[str, str] = {}
    eos = declared.get("eos") or in_vocab(st.eos)
    if eos is None:
        raise ValueError(f"tokenizer has no eos token: it declares none and its vocabulary has no {st.eos!r} "
                         "(set tokenizer.special_tokens.eos to its end-of-text token)")
    roles["eos"] = eos
    roles["pad"] = declared.get("pad") or in_vocab(st.pad) or eos
    bos = declared.get("bos") or in_vocab(st.bos)
    if bos is not None:
        roles["bos"] = bos
    elif settings.add_bos:
        raise ValueError("tokenizer.add_bos is set but the tokenizer has no bos token "
                         f"(it declares none and its vocabulary has no {st.bos!r})")
    unk = declared.get("unk") or in_vocab(settings.unk_token())
    if unk is not None:
        roles["unk"] = unk
    chosen = choose_chat_template(settings, own_template)
    missing: list[str] = []
    if chosen.origin == "chatml":
        missing = [t for t in (st.chat_start, st.chat_end) if tokenizer.token_to_id(t) is None]
        if missing:
            # appended after the vocabulary (GPT-2: 50257, 50258), so every existing id keeps its meaning
            tokenizer.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in missing])
        roles["chat_start"], roles["chat_end"] = st.chat_start, st.chat_end
    else:
        # a role only where the template uses the token and the vocabulary has it (a Qwen tokenizer's own
        # template writes <|im_start|>; Llama 3's has none of them): nothing is added to the model's vocabulary
        for role, token in (("chat_start", st.chat_start), ("chat_end", st.chat_end)):
            if token in chosen.text and in_vocab(token):
                roles[role] = token
    info = {"source": settings.source, **(info or {})}
    if missing:
        info["added_tokens"] = missing
    if chosen.origin != "chatml":  # absent: ChatML, as in artifacts built before templates could be chosen
        info["chat_template"] = chosen.origin
        info["loss_mask"] = "generation_blocks" if marks_generation(chosen.text) else "rendered_prefixes"
    artifact = TokenizerArtifact(tokenizer, roles, chosen.text, settings.add_bos, settings.add_eos, info=info,
                                 template_date=settings.chat_template_date)
    _refuse_unmaskable(artifact, chosen)
    return artifact


def _refuse_unmaskable(artifact: TokenizerArtifact, chosen: ChosenTemplate) -> None:
    """A template masked by rendered prefixes must pass their checks on the probe conversation."""
    if marks_generation(chosen.text):
        return
    try:
        render_chat(artifact.rendering_template, _PROBE_CONVERSATION, artifact.template_variables(),
                    artifact.control_tokens)
    except TurnsNotMaskable as err:
        raise ValueError(
            f"tokenizer.chat_template ({chosen.origin}) has no {{% generation %}} blocks and its assistant turns "
            f"cannot be found exactly by rendering prefixes of a user/assistant/user/assistant conversation: {err}. "
            "Give a template whose {% generation %} blocks hold what the loss counts, or chat_template: chatml"
        ) from None
    except Exception:  # a template that fails outright is the sanity report's finding, not an error here
        return


# -- saving ----------------------------------------------------------------------------------------------
def saved_files(artifact: TokenizerArtifact) -> dict[str, bytes]:
    """The tokenizer directory's files by name: save_pretrained's, then tokenizer_artifact.json
    (which records the sha256 of tokenizer.json as saved). Sets `artifact.tokenizer_sha256`."""
    from transformers import PreTrainedTokenizerFast  # see load_pretrained

    roles = artifact.special_tokens
    hf = PreTrainedTokenizerFast(
        tokenizer_object=artifact.tokenizer,  # deep-copied by transformers: ours is not touched
        eos_token=roles["eos"], pad_token=roles["pad"], bos_token=roles.get("bos"), unk_token=roles.get("unk"),
        chat_template=artifact.chat_template,
    )
    with tempfile.TemporaryDirectory(prefix="tokenizer-save-") as tmp:
        hf.save_pretrained(tmp)
        files = {p.name: p.read_bytes() for p in sorted(Path(tmp).iterdir()) if p.is_file()}
    if TOKENIZER_FILE not in files:
        raise RuntimeError(f"save_pretrained wrote no {TOKENIZER_FILE} (wrote {sorted(files)})")
    artifact.tokenizer_sha256 = hashlib.sha256(files[TOKENIZER_FILE]).hexdigest()
    files[ARTIFACT_FILE] = json.dumps(artifact.to_json(), indent=1, sort_keys=True).encode()
    return files


def save_artifact(artifact: TokenizerArtifact, directory: Path) -> dict[str, bytes]:
    """Write the tokenizer directory to a local path (the stage writes through Storage instead)."""
    files = saved_files(artifact)
    directory.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        (directory / name).write_bytes(data)
    return files


# -- sanity ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TokenizerSanity:
    vocab_size: int
    special_tokens: dict[str, dict[str, Any]]
    """role -> {token, id}."""
    roundtrip_checked: int
    roundtrip_failures: int
    roundtrip_failed_ids: list[str]
    """The first few documents whose decode(encode(text)) differs from the text."""
    sample_bytes: int
    sample_tokens: int
    special_token_problems: list[str] = field(default_factory=list)
    tokenizer_sha256: str = ""
    document_encoder: str = "tokenizers"
    """What the tokenize stage will encode documents with (settings.TokenizeSettings.encoder): "tiktoken",
    or "tokenizers" with why not tiktoken."""
    encoder_checked: int = 0
    """Sample documents whose ids were compared between tiktoken and tokenizers (0 where tiktoken is not used)."""
    encoder_mismatches: int = 0
    """Of those, the documents whose ids from tiktoken differ from tokenizers'."""
    encoder_mismatch_ids: list[str] = field(default_factory=list)

    @property
    def bytes_per_token(self) -> float:
        return self.sample_bytes / self.sample_tokens if self.sample_tokens else 0.0

    @property
    def ok(self) -> bool:
        return self.roundtrip_failures == 0 and not self.special_token_problems and self.encoder_mismatches == 0

    def to_dict(self) -> dict[str, Any]:
        return {"vocab_size": self.vocab_size, "special_tokens": self.special_tokens,
                "roundtrip_checked": self.roundtrip_checked, "roundtrip_failures": self.roundtrip_failures,
                "roundtrip_failed_ids": self.roundtrip_failed_ids, "bytes_per_token": round(self.bytes_per_token, 4),
                "sample_bytes": self.sample_bytes, "sample_tokens": self.sample_tokens,
                "special_token_problems": self.special_token_problems, "tokenizer_sha256": self.tokenizer_sha256,
                "document_encoder": self.document_encoder, "encoder_checked": self.encoder_checked,
                "encoder_mismatches": self.encoder_mismatches,
                "encoder_mismatch_ids": self.encoder_mismatch_ids}


def special_token_problems(artifact: TokenizerArtifact) -> list[str]:
    """Each role's token is a special token, one id alone and inside text (the chat-template path),
    ordinary text inside a document (the document path); the chat tokens have ids of their own; the
    chat template marks the assistant's turn."""
    problems: list[str] = []
    tok, text_tok = artifact.tokenizer, artifact.text_tokenizer
    for role, token in sorted(artifact.special_tokens.items()):
        tid = artifact.special_ids[role]
        if token not in artifact.control_tokens:
            problems.append(f"{role} {token!r} is not a special token of the tokenizer (an ordinary vocabulary "
                            "entry: text can produce it)")
        alone = tok.encode(token, add_special_tokens=False).ids
        if alone != [tid]:
            problems.append(f"{role} {token!r} encodes to {alone}, not [{tid}]")
        inside = tok.encode(f"Hello{token}world", add_special_tokens=False).ids
        if inside.count(tid) != 1:
            problems.append(f"{role} {token!r} is split inside text: {inside}")
        as_text = text_tok.encode(f"Hello{token}world", add_special_tokens=False).ids
        if tid in as_text:
            problems.append(f"{role} {token!r} in a document's text becomes the special id {tid}")
    # eos, pad, bos and unk may share one token (GPT-2's hub config: all four are <|endoftext|>);
    # a chat token may not share its id with anything, or the mask and the turn structure blur
    for role in ("chat_start", "chat_end"):
        if role not in artifact.special_ids:
            continue
        tid = artifact.special_ids[role]
        others = sorted(r for r, i in artifact.special_ids.items() if i == tid and r != role)
        if others:
            problems.append(f"{role} shares id {tid} with {', '.join(others)}")
    try:
        rendered = render_chat(artifact.rendering_template, _PROBE_CONVERSATION, artifact.template_variables(),
                               artifact.control_tokens)
        if not any(flag for _, flag in rendered.segments):
            problems.append("the chat template marks no assistant text as generated (no loss would count)")
    except Exception as err:  # any template failure is a finding of this check, not a crash
        problems.append(f"the chat template fails on a user/assistant/user/assistant conversation: {err}")
    return problems


def sanity_report(artifact: TokenizerArtifact, sample: Sequence[tuple[str, str]],
                  document_encoder: str = "auto") -> TokenizerSanity:
    """Checks on `sample` ((id, text) pairs) with the document path (special strings as text). With
    `document_encoder` "auto" (settings.TokenizeSettings.encoder) and a tokenizer tiktoken can stand
    in for, tiktoken's ids are compared with tokenizers' on the same documents."""
    texts = [t for _, t in sample]
    failed: list[str] = []
    mismatched: list[str] = []
    tokens = 0
    choice = artifact.document_encoder_choice(document_encoder)
    if texts:
        encodings = artifact.text_tokenizer.encode_batch_fast(texts, add_special_tokens=False)
        ids = [e.ids for e in encodings]
        tokens = sum(map(len, ids))
        decoded = artifact.text_tokenizer.decode_batch(ids, skip_special_tokens=False)
        failed = [doc_id for (doc_id, text), back in zip(sample, decoded, strict=True) if back != text]
        if choice.encoding is not None:
            fast_ids = encode_texts(choice.encoding, texts)
            mismatched = [doc_id for (doc_id, _), a, b in zip(sample, ids, fast_ids, strict=True) if a != b]
    return TokenizerSanity(
        vocab_size=artifact.vocab_size,
        special_tokens=artifact.to_json()["special_tokens"],
        roundtrip_checked=len(texts),
        roundtrip_failures=len(failed),
        roundtrip_failed_ids=failed[:_ROUNDTRIP_EXAMPLES],
        sample_bytes=sum(len(t.encode("utf-8")) for t in texts),
        sample_tokens=tokens,
        special_token_problems=special_token_problems(artifact),
        tokenizer_sha256=artifact.tokenizer_sha256,
        document_encoder=choice.description,
        encoder_checked=len(texts) if choice.encoding is not None else 0,
        encoder_mismatches=len(mismatched),
        encoder_mismatch_ids=mismatched[:_ROUNDTRIP_EXAMPLES],
    )
