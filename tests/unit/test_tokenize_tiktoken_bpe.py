"""tiktoken as the document encoder: the same ids as tokenizers wherever the stage chooses it (trained
byte-level BPE and GPT-2, hypothesis' texts), every refusal with its reason (including a tokenizer on
which tiktoken really would differ), and the stage's checks of it."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers

from platform_assets.tokenize import tokenizer_build
from platform_assets.tokenize.encode import DocumentEncoder
from platform_assets.tokenize.settings import TokenizerSettings, TokenizeSettings
from platform_assets.tokenize.tiktoken_bpe import GPT2_PATTERN, encode_texts, tiktoken_encoding
from platform_assets.tokenize.tokenizer_artifact import TokenizerArtifact
from platform_assets.tokenize.tokenizer_build import make_artifact, sanity_report, train_tokenizer

TRAINING_TEXTS = [
    "The quick brown fox jumps over the lazy dog; it's what they'd've said. ",
    "def tokenize(text):\n    return [t for t in text.split()]  # 42 tokens\n\n",
    "Grüße aus Köln, café déjà vu — naïve façade. 日本語のテキスト。 Ελληνικά κείμενα.\n",
    "    indented\tline\r\nwith  double  spaces and numbers 1234567890 3.14159\n",
    "<|endoftext|> <html><body>x &amp; y</body></html> {\"key\": [1, 2, 3]}\n",
]
PIECES = ["<|endoftext|>", "'s", "'ll", "'S", " ", "  ", "\n", "\n\n", "\t", "\r\n", "\u00a0", "\u2028", "\u3000",
          "12345", "½", "٣", "the", " the", "é", "e\u0301", "日本", "😀", "🏳️\u200d🌈", "\x00", "\x1b[0m", "--",
          "...", "ﬁ", "İ", "ǅ", "\ufeff", "‘quote’"]
texts = st.lists(st.one_of(st.sampled_from(PIECES), st.text(max_size=12)), max_size=24).map("".join)


def trained_artifact(vocab_size: int = 700) -> TokenizerArtifact:
    s = TokenizerSettings(vocab_size=vocab_size, min_frequency=1)
    return make_artifact(train_tokenizer([TRAINING_TEXTS * 20], s), s)


def tokenizers_ids(artifact: TokenizerArtifact, text_list: list[str]) -> list[list[int]]:
    return [e.ids for e in artifact.text_tokenizer.encode_batch_fast(text_list, add_special_tokens=False)]


@pytest.fixture(scope="module")
def trained() -> TokenizerArtifact:
    return trained_artifact()


def test_a_trained_byte_level_bpe_is_encoded_by_tiktoken_to_the_same_ids(trained):
    choice = trained.document_tiktoken
    assert choice.encoding is not None, choice.reason
    assert choice.reason == ""
    sample = [*TRAINING_TEXTS, "".join(PIECES), "x" * 5000, " " * 300 + "a", "<|endoftext|>" * 3]
    assert encode_texts(choice.encoding, sample) == tokenizers_ids(trained, sample)
    # the special string is text on this path: never the special id
    eos = trained.special_ids["eos"]
    assert eos not in encode_texts(choice.encoding, ["a<|endoftext|>b"])[0]


@settings(max_examples=300, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(text=texts)
def test_trained_bpe_same_ids_on_any_text(trained, text):
    assert encode_texts(trained.document_tiktoken.encoding, [text]) == tokenizers_ids(trained, [text])


@settings(max_examples=300, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(text=texts)
def test_gpt2_same_ids_on_any_text(gpt2, text):  # conftest's gpt2: skipped where ../shared lacks it
    choice = gpt2.document_tiktoken
    assert choice.encoding is not None, choice.reason
    assert encode_texts(choice.encoding, [text]) == tokenizers_ids(gpt2, [text])


def _edited(artifact: TokenizerArtifact, edit) -> Tokenizer:
    spec = json.loads(artifact.tokenizer.to_str())
    edit(spec)
    return Tokenizer.from_str(json.dumps(spec))


def _set(path: list[str], value):
    def edit(spec):
        node = spec
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value
    return edit


def _swap_last_two_merge_results(spec):
    vocab, merges = spec["model"]["vocab"], spec["model"]["merges"]
    a, b = ("".join(m.split(" ")) if isinstance(m, str) else "".join(m) for m in merges[-2:])
    vocab[a], vocab[b] = vocab[b], vocab[a]


@pytest.mark.parametrize(("edit", "reason"), [
    (_set(["normalizer"], {"type": "NFC"}), "normalizer"),
    (_set(["pre_tokenizer", "add_prefix_space"], True), "pre-tokenizer"),
    (_set(["pre_tokenizer", "use_regex"], False), "pre-tokenizer"),
    (_set(["pre_tokenizer"], {"type": "Whitespace"}), "pre-tokenizer"),
    (_set(["model", "dropout"], 0.1), "dropout"),
    (_set(["model", "byte_fallback"], True), "byte_fallback"),
    (_set(["model", "unk_token"], "Ā"), "unk_token"),
    (_swap_last_two_merge_results, "merge order is not id order"),
], ids=["normalizer", "prefix-space", "no-regex", "whitespace", "dropout", "byte-fallback", "unk-token",
        "merge-order"])
def test_refusals_say_why(trained, edit, reason):
    choice = tiktoken_encoding(_edited(trained, edit))
    assert choice.encoding is None
    assert reason in choice.reason


def test_a_missing_byte_and_a_non_special_added_token_are_refused(trained):
    def drop_byte(spec):
        del spec["model"]["vocab"]["Ā"]  # the byte-level symbol of byte 0
    assert "not every byte" in tiktoken_encoding(_edited(trained, drop_byte)).reason

    def orphan_entry(spec):
        spec["model"]["vocab"]["zzzz"] = len(spec["model"]["vocab"]) + 10  # no merge makes it
    assert "neither a byte, a merge's result nor a special token (e.g. 'zzzz')" in tiktoken_encoding(
        _edited(trained, orphan_entry)).reason
    tok = Tokenizer.from_str(trained.tokenizer.to_str())
    tok.add_tokens([AddedToken("<tool>", special=False)])
    assert "non-special added tokens" in tiktoken_encoding(tok).reason
    for algorithm in ("unigram", "wordpiece"):
        s = TokenizerSettings(vocab_size=300, min_frequency=1, algorithm=algorithm)
        assert "not BPE" in make_artifact(train_tokenizer([["hello world"] * 10], s), s).document_tiktoken.reason


def _abc_tokenizer() -> tuple[Tokenizer, dict[str, int]]:
    """Byte-level BPE whose merges make `abc` from `a` + `bc`, while `a b` comes first: its own BPE
    turns "abc" into `ab` `c`, and tiktoken (which takes a piece that is a token whole) into `abc`."""
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {ch: i for i, ch in enumerate(sorted(alphabet))}
    for token in ("ab", "bc", "abc"):
        vocab[token] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[("a", "b"), ("b", "c"), ("a", "bc")]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    return tok, vocab


def test_a_token_its_own_bpe_splits_is_refused_and_tiktoken_would_really_differ_there():
    import tiktoken

    tok, vocab = _abc_tokenizer()
    assert [t.value for t in tok.model.tokenize("abc")] == ["ab", "c"]
    choice = tiktoken_encoding(tok)
    assert choice.encoding is None
    assert "splits the token 'abc'" in choice.reason
    # what the check prevents: the same ranks in tiktoken give another id sequence
    ranks = {bytes([i]): vocab[chr(i)] for i in range(ord("a"), ord("d"))}
    ranks |= {bytes([b]): len(vocab) + b for b in range(256) if bytes([b]) not in ranks}
    ranks |= {b"ab": vocab["ab"], b"bc": vocab["bc"], b"abc": vocab["abc"]}
    plain = tiktoken.Encoding("abc", pat_str=GPT2_PATTERN, mergeable_ranks=ranks, special_tokens={})
    assert plain.encode_ordinary("abc") == [vocab["abc"]]
    assert tok.encode("abc").ids == [vocab["ab"], vocab["c"]]


def _docs(texts_: list[str]) -> pa.RecordBatch:
    n = len(texts_)
    return pa.RecordBatch.from_pydict({
        "id": [f"d{i}" for i in range(n)], "source": ["s"] * n, "split": ["train"] * n,
        "text": pa.array(texts_, pa.large_string()),
        "meta": [json.dumps({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": t}]})
                 if i % 3 == 2 else None for i, t in enumerate(texts_)],
    })


def test_the_stage_encoder_gives_the_same_rows_with_either_encoder(trained):
    documents = _docs([*TRAINING_TEXTS, "long " * 2000, "".join(PIECES), "tail <|endoftext|> text"])
    settings_ = dict(own_thread_min_chars=4096, encode_slice_bytes=300)
    fast = DocumentEncoder(trained, TokenizeSettings(**settings_))
    slow = DocumentEncoder(trained, TokenizeSettings(encoder="tokenizers", **settings_))
    assert fast.document_encoder == "tiktoken"
    assert slow.document_encoder == "tokenizers (encoder: tokenizers)"
    a, b = fast.encode(documents), slow.encode(documents)
    assert a.batch.num_rows == len(documents) and a.stats.chat_documents == 2
    assert a.batch.equals(b.batch)
    assert a.exclusions.equals(b.exclusions)


def test_a_tokenizer_tiktoken_cannot_stand_in_for_is_encoded_by_tokenizers_and_says_why():
    s = TokenizerSettings(vocab_size=300, min_frequency=1, algorithm="unigram")
    unigram = make_artifact(train_tokenizer([["hello world"] * 10], s), s)
    encoder = DocumentEncoder(unigram)
    assert encoder.document_encoder.startswith("tokenizers (") and "not BPE" in encoder.document_encoder


def test_sanity_report_compares_both_encoders_and_fails_on_a_mismatch(trained, monkeypatch):
    sample = [(f"d{i}", t) for i, t in enumerate(TRAINING_TEXTS)]
    report = sanity_report(trained, sample)
    assert report.document_encoder == "tiktoken"
    assert report.encoder_mismatches == 0 and report.ok
    assert report.encoder_checked == len(sample)
    slow = sanity_report(trained, sample, "tokenizers")
    assert (slow.document_encoder, slow.encoder_checked) == ("tokenizers (encoder: tokenizers)", 0)

    def one_off(encoding, texts_):
        ids = encode_texts(encoding, texts_)
        ids[1] = ids[1][1:]  # as if tiktoken lost the second document's first token
        return ids

    monkeypatch.setattr(tokenizer_build, "encode_texts", one_off)
    broken = sanity_report(trained, sample)
    assert broken.encoder_mismatches == 1 and broken.encoder_mismatch_ids == ["d1"]
    assert not broken.ok
    assert broken.to_dict()["encoder_mismatch_ids"] == ["d1"]
    # with the encoder set to tokenizers nothing is compared, so nothing can mismatch
    assert sanity_report(trained, sample, "tokenizers").encoder_mismatches == 0


def test_a_normalizer_set_through_the_api_is_refused():
    """A tokenizer built with a normalizer through the API (not JSON) is refused too."""
    tok = Tokenizer.from_str(trained_artifact(400).tokenizer.to_str())
    tok.normalizer = normalizers.NFKC()
    assert "normalizer" in tiktoken_encoding(tok).reason
