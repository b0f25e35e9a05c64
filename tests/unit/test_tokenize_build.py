"""Building tokenizers: reproducible training, GPT-2 loading offline, save_pretrained directories that
AutoTokenizer loads, the sanity report, and config validation."""

from __future__ import annotations

import hashlib
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
from gpt2_tokenizer import GPT2_JSON
from pydantic import ValidationError

from platform_assets.tokenize.chat_template import render_chat
from platform_assets.tokenize.settings import SpecialTokens, TokenizerSettings, TokenizeSettings
from platform_assets.tokenize.tokenizer_artifact import ARTIFACT_FILE, TOKENIZER_FILE, TokenizerArtifact
from platform_assets.tokenize.tokenizer_build import (
    WORDPIECE_MAX_WORD_CHARS,
    load_pretrained,
    make_artifact,
    sanity_report,
    save_artifact,
    saved_files,
    train_tokenizer,
)

SYLLABLES = ["ka", "to", "ri", "men", "sa", "lo", "the", "ing", "er", "pla", "da", "ta", "form", "un", "re", "x",
             "ß", "ü", "日本", "語", "Σο", "_1", "0x", "==", "(", "):"]


def corpus(n: int = 600, seed: int = 0) -> list[str]:
    """Sentences of Zipf-distributed made-up words (a few thousand, syllables from several scripts):
    enough structure that every algorithm, unigram included, fills a 400-token vocabulary."""
    rng = random.Random(seed)
    vocab_rng = random.Random(1234)  # the same words whatever the seed: held-out texts share them
    words = ["".join(vocab_rng.choice(SYLLABLES) for _ in range(vocab_rng.randint(1, 4))) for _ in range(3000)]
    weights = [1 / (i + 1) for i in range(len(words))]
    return [" ".join(rng.choices(words, weights, k=rng.randint(5, 60))) + rng.choice([".", "\n", "\n\n", "!"])
            for _ in range(n)]


def batches(texts: list[str], size: int = 100) -> list[list[str]]:
    return [texts[i:i + size] for i in range(0, len(texts), size)]


def build(settings: TokenizerSettings, texts: list[str]) -> TokenizerArtifact:
    return make_artifact(train_tokenizer(batches(texts), settings), settings)


# -- training -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("algorithm", ["bpe", "wordpiece"])
def test_training_is_byte_identical_for_the_same_texts(algorithm: str):
    settings = TokenizerSettings(algorithm=algorithm, vocab_size=400)
    texts = corpus()
    first, second = saved_files(build(settings, texts)), saved_files(build(settings, texts))
    assert first == second
    assert set(first) == {"chat_template.jinja", ARTIFACT_FILE, TOKENIZER_FILE, "tokenizer_config.json"}
    other = saved_files(build(settings, corpus(seed=1)))
    assert other[TOKENIZER_FILE] != first[TOKENIZER_FILE]  # the check can fail: other texts, other merges


def test_bpe_training_is_identical_single_and_multi_threaded(tmp_path: Path):
    """Rayon reads its thread count once per process: train in a child with one thread."""
    settings = TokenizerSettings(vocab_size=400)
    texts = corpus()
    here = hashlib.sha256(saved_files(build(settings, texts))[TOKENIZER_FILE]).hexdigest()
    (tmp_path / "texts.json").write_text(json.dumps(texts))
    script = (
        "import hashlib, json, sys\n"
        "from platform_assets.tokenize.settings import TokenizerSettings\n"
        "from platform_assets.tokenize.tokenizer_build import make_artifact, saved_files, train_tokenizer\n"
        "texts = json.load(open(sys.argv[1]))\n"
        "s = TokenizerSettings(vocab_size=400)\n"
        "art = make_artifact(train_tokenizer([texts[i:i + 100] for i in range(0, len(texts), 100)], s), s)\n"
        "print(hashlib.sha256(saved_files(art)['tokenizer.json']).hexdigest())\n"
    )
    env = {**os.environ, "RAYON_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    out = subprocess.run([sys.executable, "-c", script, str(tmp_path / "texts.json")], capture_output=True,
                         text=True, env=env, check=True, cwd=Path(__file__).resolve().parents[2])
    assert out.stdout.strip() == here


@pytest.mark.parametrize("algorithm", ["bpe", "unigram", "wordpiece"])
def test_every_algorithm_round_trips_and_has_sane_special_tokens(algorithm: str):
    settings = TokenizerSettings(algorithm=algorithm, vocab_size=400)
    art = build(settings, corpus())
    assert art.vocab_size == 400
    # the special tokens come first, in the documented order
    expected = ["<|endoftext|>", "<|pad|>", *(["<|unk|>"] if algorithm != "bpe" else []), "<|im_start|>",
                "<|im_end|>"]
    assert [art.tokenizer.id_to_token(i) for i in range(len(expected))] == expected
    held_out = [(f"h{i}", t) for i, t in enumerate(corpus(50, seed=9) + ["emoji 😀 and CJK 中文, never seen", ""])]
    report = sanity_report(art, held_out)
    assert report.ok, report.to_dict()
    assert report.roundtrip_checked == 52 and report.bytes_per_token > 2.0  # merges learnt: bytes alone give ~1.1


def test_sanity_counts_round_trip_failures():
    art = build(TokenizerSettings(algorithm="wordpiece", vocab_size=400), corpus())
    long_word = "a" * (WORDPIECE_MAX_WORD_CHARS + 1)  # past WordPiece's word limit: <|unk|>
    report = sanity_report(art, [("fine", "the data"), ("long", f"x {long_word} y")])
    assert report.roundtrip_failures == 1 and report.roundtrip_failed_ids == ["long"] and not report.ok


# -- pretrained ---------------------------------------------------------------------------------------------
def test_gpt2_tokenizer_json_gets_pad_chat_tokens_and_template(gpt2: TokenizerArtifact):
    assert gpt2.special_ids == {"eos": 50256, "pad": 50256, "chat_start": 50257, "chat_end": 50258}
    assert gpt2.bos_id is None and gpt2.vocab_size == 50259
    assert gpt2.info["added_tokens"] == ["<|im_start|>", "<|im_end|>"]
    assert gpt2.tokenizer.encode("Hello world", add_special_tokens=False).ids == [15496, 995]
    report = sanity_report(gpt2, [("a", "The quick brown fox jumps over the lazy dog. " * 20)])
    assert report.ok and report.special_token_problems == [] and 4.0 < report.bytes_per_token < 6.0


def test_saved_directory_loads_with_autotokenizer(gpt2: TokenizerArtifact, tmp_path: Path):
    from transformers import AutoTokenizer

    save_artifact(gpt2, tmp_path)
    hf = AutoTokenizer.from_pretrained(str(tmp_path))
    assert (hf.eos_token, hf.pad_token, hf.eos_token_id, hf.pad_token_id) == ("<|endoftext|>",) * 2 + (50256,) * 2
    assert len(hf) == 50259 and hf.chat_template == gpt2.chat_template
    for text in ["Hello world", "日本語 und Straße", "a<|im_end|>b", "def f():\n\treturn 1\n"]:
        assert hf.encode(text, add_special_tokens=False) == gpt2.tokenizer.encode(text, add_special_tokens=False).ids
    messages = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]
    assert hf.apply_chat_template(messages, tokenize=False) == render_chat(
        gpt2.chat_template, messages, gpt2.template_variables()).text
    # and back: the directory is itself a pretrained tokenizer with the same roles and bytes
    tok, declared = load_pretrained(str(tmp_path))
    assert declared == {"eos": "<|endoftext|>", "pad": "<|endoftext|>"}
    again = make_artifact(tok, TokenizerSettings(source="pretrained", path=str(tmp_path)), declared)
    assert again.special_ids == gpt2.special_ids and "added_tokens" not in again.info
    assert saved_files(again)[TOKENIZER_FILE] == (tmp_path / TOKENIZER_FILE).read_bytes()


def test_artifact_round_trip_and_tamper_detection(gpt2: TokenizerArtifact):
    files = saved_files(gpt2)
    meta = json.loads(files[ARTIFACT_FILE])
    loaded = TokenizerArtifact.from_files(files[TOKENIZER_FILE], meta)
    assert loaded.special_ids == gpt2.special_ids and loaded.tokenizer_sha256 == gpt2.tokenizer_sha256
    assert meta["tokenizer_sha256"] == hashlib.sha256(files[TOKENIZER_FILE]).hexdigest()
    with pytest.raises(ValueError, match="modified after it was built"):
        TokenizerArtifact.from_files(files[TOKENIZER_FILE].replace(b'"Hello"', b'"Hellp"', 1), meta)
    with pytest.raises(ValueError, match="format_version"):
        TokenizerArtifact.from_files(files[TOKENIZER_FILE], {**meta, "format_version": 99})


def test_sanity_reports_a_chat_token_that_is_an_ordinary_word():
    if not GPT2_JSON.is_file():
        pytest.skip(f"{GPT2_JSON} not present")
    tok, declared = load_pretrained(str(GPT2_JSON))
    settings = TokenizerSettings(source="pretrained", path=str(GPT2_JSON),
                                 special_tokens=SpecialTokens(chat_start="world"))  # id 6894: in the vocabulary
    art = make_artifact(tok, settings, declared)
    assert art.special_ids["chat_start"] == 6894 and art.vocab_size == 50258  # only <|im_end|> was added
    assert sanity_report(art, []).special_token_problems == [
        "chat_start 'world' is not a special token of the tokenizer (an ordinary vocabulary entry: "
        "text can produce it)",
        "chat_start 'world' in a document's text becomes the special id 6894",
    ]


def test_sanity_reports_a_chat_token_sharing_its_id(gpt2: TokenizerArtifact):
    """Instruct tokenizers declare eos = <|im_end|>: a turn's end and a document's end blur."""
    tok, _ = load_pretrained(str(GPT2_JSON))
    art = make_artifact(tok, TokenizerSettings(source="pretrained", path=str(GPT2_JSON)), {"eos": "<|im_end|>"})
    assert art.eos_id == art.special_ids["chat_end"] == 50258 and art.pad_id == 50258
    assert sanity_report(art, []).special_token_problems == ["chat_end shares id 50258 with eos, pad"]
    # GPT-2's hub config: bos = eos = unk = <|endoftext|> is fine
    hub_style = make_artifact(tok, TokenizerSettings(source="pretrained", path=str(GPT2_JSON)),
                              {"eos": "<|endoftext|>", "bos": "<|endoftext|>", "unk": "<|endoftext|>"})
    assert sanity_report(hub_style, []).special_token_problems == []


def test_sanity_reports_a_template_that_marks_nothing():
    s = TokenizerSettings(vocab_size=400, chat_template="{% for m in messages %}{{ m['content'] }}{% endfor %}"
                                                        "{% generation %}{% endgeneration %}")
    problems = sanity_report(build(s, corpus()), []).special_token_problems
    assert problems == ["the chat template marks no assistant text as generated (no loss would count)"]


def test_load_errors_name_the_path(tmp_path: Path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_pretrained(str(tmp_path / "nope"))
    (tmp_path / "vocab.txt").write_text("a\n")
    with pytest.raises(ValueError, match="must be a tokenizer.json"):
        load_pretrained(str(tmp_path / "vocab.txt"))
    with pytest.raises(ValueError, match="local cache only; nothing is downloaded"):
        load_pretrained("no-such-org/no-such-tokenizer")


def test_missing_eos_and_bos_are_clear_errors(gpt2: TokenizerArtifact):
    tok, _ = load_pretrained(str(GPT2_JSON))
    with pytest.raises(ValueError, match="no eos token.*'</s>'"):
        make_artifact(tok, TokenizerSettings(source="pretrained", path="/x", special_tokens=SpecialTokens(eos="</s>")))
    with pytest.raises(ValueError, match="add_bos is set but the tokenizer has no bos token"):
        make_artifact(tok, TokenizerSettings(source="pretrained", path="/x", add_bos=True))


# -- settings ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("kwargs", "message"), [
    ({"source": "pretrained"}, "tokenizer.path is required"),
    ({"path": "/x"}, "only read when tokenizer.source is 'pretrained'"),
    ({"source": "pretrained", "path": "/x", "vocab_size": 1000}, "tokenizer.vocab_size: only used when"),
    ({"vocab_size": 260}, "leaves no room for merges"),
    ({"add_bos": True}, "add_bos needs tokenizer.special_tokens.bos"),
    ({"chat_template": "own"}, "'own' needs tokenizer.source 'pretrained'"),
    ({"chat_template": " "}, "tokenizer.chat_template is empty"),
    ({"special_tokens": {"pad": "<|endoftext|>"}}, "special_tokens.pad and special_tokens.eos are both"),
    ({"vocab_sise": 1000}, "Extra inputs are not permitted"),
])
def test_tokenizer_settings_errors(kwargs: dict, message: str):
    with pytest.raises(ValidationError, match=message):
        TokenizerSettings(**kwargs)


def test_tokenize_settings_errors_and_defaults():
    with pytest.raises(ValidationError, match="'chunk' needs tokenize.max_length"):
        TokenizeSettings(overlong="chunk")
    s = TokenizeSettings()
    assert s.max_length is None and s.overlong == "keep" and s.encode_slice_bytes == 2**20
    assert TokenizerSettings().special_token_list() == ["<|endoftext|>", "<|pad|>", "<|im_start|>", "<|im_end|>"]
