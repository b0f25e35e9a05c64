"""Encoding record batches: hand-checked token and mask sequences, BOS/EOS, truncation, chunking,
batch == per-document, special strings in text, exclusions for malformed chat documents."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from tokenizers import Tokenizer
from tokenizers.models import BPE, Unigram, WordPiece

from platform_assets.tokenize import encode as encode_module
from platform_assets.tokenize.encode import DocumentEncoder, tokenized_schema
from platform_assets.tokenize.exclusion_rules import TokenizeRule
from platform_assets.tokenize.sequences import assemble, chunk, segment_sums
from platform_assets.tokenize.settings import SpecialTokens, TokenizerSettings, TokenizeSettings
from platform_assets.tokenize.tokenizer_artifact import TokenizerArtifact
from platform_assets.tokenize.tokenizer_build import make_artifact, train_tokenizer


def tiny_artifact(**settings) -> TokenizerArtifact:
    """Byte-level BPE with exactly one merge, `l l`: every other character is one token, so expected
    sequences can be written by hand as token strings (`Ċ` is the byte-level symbol of newline)."""
    s = TokenizerSettings(vocab_size=261 + (1 if settings.get("add_bos") else 0), min_frequency=1, **settings)
    tok = train_tokenizer([["llll"] * 20], s)
    return make_artifact(tok, s)


def batch(texts, metas=None, ids=None, source="s", split="train") -> pa.RecordBatch:
    n = len(texts)
    return pa.RecordBatch.from_pydict({
        "id": ids or [f"d{i}" for i in range(n)],
        "source": [source] * n,
        "split": [split] * n,
        "text": pa.array(texts, pa.large_string()),
        "meta": [json.dumps(m) if isinstance(m, dict) else m for m in (metas or [None] * n)],
    })


def chat(*turns: tuple[str, str]) -> dict:
    return {"messages": [{"role": r, "content": c} for r, c in turns]}


def tokens(art: TokenizerArtifact, ids: list[int]) -> list[str]:
    return [art.tokenizer.id_to_token(i) for i in ids]


def spelled(*pieces: str) -> list[str]:
    """Byte-level symbols of plain ASCII pieces, one per character, except the `ll` merge."""
    out: list[str] = []
    for p in pieces:
        if p.startswith("<|"):
            out.append(p)
            continue
        i = 0
        while i < len(p):
            if p.startswith("ll", i):
                out.append("ll")
                i += 2
            else:
                out.append({"\n": "Ċ", " ": "Ġ"}.get(p[i], p[i]))
                i += 1
    return out


# -- hand-checked sequences --------------------------------------------------------------------------
def test_three_turn_conversation_tokens_and_mask_by_hand():
    art = tiny_artifact()
    conv = chat(("user", "Hi"), ("assistant", "Hello"), ("user", "Bye"))
    out = DocumentEncoder(art).encode(batch(["plain rendering, ignored"], [conv]))
    row = out.batch.to_pylist()[0]
    prompt = spelled("<|im_start|>", "user\nHi", "<|im_end|>", "\n", "<|im_start|>", "assistant\n")
    answer = spelled("Hello", "<|im_end|>")  # the content and its end of turn
    tail = spelled("\n", "<|im_start|>", "user\nBye", "<|im_end|>", "\n", "<|endoftext|>")
    assert tokens(art, row["input_ids"]) == prompt + answer + tail
    assert answer == ["H", "e", "ll", "o", "<|im_end|>"]
    assert row["loss_mask"] == [0] * len(prompt) + [1] * len(answer) + [0] * len(tail)
    assert row["loss_tokens"] == 5 and row["num_tokens"] == len(prompt) + 5 + len(tail)
    assert row["chunk"] == 0 and out.exclusions.num_rows == 0


def test_system_user_assistant_user_assistant_by_hand():
    art = tiny_artifact()
    conv = chat(("system", "Be terse."), ("user", "Hi"), ("assistant", "Yes."), ("user", "Well?"),
                ("assistant", "All good"))
    row = DocumentEncoder(art).encode(batch(["x"], [conv])).batch.to_pylist()[0]
    expected = (
        [(t, 0) for t in spelled("<|im_start|>", "system\nBe terse.", "<|im_end|>", "\n")]
        + [(t, 0) for t in spelled("<|im_start|>", "user\nHi", "<|im_end|>", "\n")]
        + [(t, 0) for t in spelled("<|im_start|>", "assistant\n")]
        + [(t, 1) for t in spelled("Yes.", "<|im_end|>")]
        + [(t, 0) for t in spelled("\n", "<|im_start|>", "user\nWell?", "<|im_end|>", "\n")]
        + [(t, 0) for t in spelled("<|im_start|>", "assistant\n")]
        + [(t, 1) for t in spelled("All good", "<|im_end|>")]
        + [(t, 0) for t in spelled("\n", "<|endoftext|>")]
    )
    assert list(zip(tokens(art, row["input_ids"]), row["loss_mask"], strict=True)) == expected
    assert spelled("Well?") == ["W", "e", "ll", "?"] and row["loss_tokens"] == 5 + 8


def test_gpt2_chat_matches_transformers_apply_chat_template(gpt2: TokenizerArtifact, tmp_path: Path):
    """Where no pre-token straddles a turn edge, ids and mask equal AutoTokenizer's own."""
    from transformers import AutoTokenizer

    from platform_assets.tokenize.tokenizer_build import save_artifact

    art = gpt2
    save_artifact(art, tmp_path)
    hf = AutoTokenizer.from_pretrained(str(tmp_path))
    convs = [
        chat(("system", "Be brief."), ("user", "Hi there"), ("assistant", "Hello! How can I help?"),
             ("user", "2+2?"), ("assistant", "4")),
        chat(("user", "Write code"), ("assistant", "def f(x):\n    return x * 2"), ("user", "Thanks"),
             ("assistant", "Gern geschehen. 日本語も")),
    ]
    rows = DocumentEncoder(art, TokenizeSettings()).encode(batch(["a", "b"], convs)).batch.to_pylist()
    for conv, row in zip(convs, rows, strict=True):
        ref = hf.apply_chat_template(conv["messages"], tokenize=True, return_dict=True,
                                     return_assistant_tokens_mask=True)
        assert row["input_ids"] == ref["input_ids"] + [art.eos_id]
        assert row["loss_mask"] == ref["assistant_masks"] + [0]
    first = rows[0]
    assert hf.convert_ids_to_tokens(first["input_ids"][15:20]) == ["<|im_start|>", "ass", "istant", "Ċ", "Hello"]
    assert first["loss_mask"][15:20] == [0, 0, 0, 0, 1]


def test_mask_is_exact_where_a_pretoken_would_straddle_the_turn_edge(gpt2: TokenizerArtifact):
    art = gpt2
    answers = ["\n\nIndented answer", "  two spaces", "\tTab", "ok\n\n"]
    convs = [chat(("user", "Q"), ("assistant", a)) for a in answers]
    rows = DocumentEncoder(art).encode(batch(["x"] * 4, convs)).batch.to_pylist()
    for answer, row in zip(answers, rows, strict=True):
        mask = np.array(row["loss_mask"], bool)
        ids = np.array(row["input_ids"])
        # the masked tokens decode to exactly the answer and its end of turn: nothing of the prompt
        assert art.tokenizer.decode(ids[mask].tolist(), skip_special_tokens=False) == answer + "<|im_end|>"
        assert art.tokenizer.decode(ids.tolist(), skip_special_tokens=False) == (
            f"<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\n{answer}<|im_end|>\n<|endoftext|>")


# -- plain text ----------------------------------------------------------------------------------------
def test_plain_text_has_null_mask_and_eos():
    art = tiny_artifact()
    out = DocumentEncoder(art).encode(batch(["Hello all", "x"]))
    rows = out.batch.to_pylist()
    assert tokens(art, rows[0]["input_ids"]) == spelled("Hello all", "<|endoftext|>")
    assert rows[0]["loss_mask"] is None and rows[0]["loss_tokens"] == rows[0]["num_tokens"] == 8
    assert tokens(art, rows[1]["input_ids"]) == ["x", "<|endoftext|>"]
    assert out.batch.schema.equals(tokenized_schema()) and out.stats.tokens == 10 == out.stats.loss_tokens


def test_special_token_strings_in_a_document_are_text():
    art = tiny_artifact()
    text = "a<|endoftext|>b<|im_start|>c"
    row = DocumentEncoder(art).encode(batch([text])).batch.to_pylist()[0]
    assert row["input_ids"].count(art.eos_id) == 1 and row["input_ids"][-1] == art.eos_id
    assert art.special_ids["chat_start"] not in row["input_ids"]
    assert art.tokenizer.decode(row["input_ids"][:-1], skip_special_tokens=False) == text


def test_bos_and_no_eos():
    art = tiny_artifact(add_bos=True, add_eos=False, special_tokens=SpecialTokens(bos="<|bos|>"))
    out = DocumentEncoder(art).encode(batch(["ab"], None))
    assert tokens(art, out.batch.column("input_ids")[0].as_py()) == ["<|bos|>", "a", "b"]
    conv = chat(("user", "q"), ("assistant", "a"))
    row = DocumentEncoder(art).encode(batch(["x"], [conv])).batch.to_pylist()[0]
    assert tokens(art, row["input_ids"])[:2] == ["<|bos|>", "<|im_start|>"] and row["loss_mask"][0] == 0


def test_no_second_bos_when_the_template_writes_it():
    template = ("{{ bos_token }}{% for m in messages %}{{ m['role'] }}:{% if m['role'] == 'assistant' %}"
                "{% generation %}{{ m['content'] }}{% endgeneration %}{% else %}{{ m['content'] }}{% endif %}"
                "{{ '\\n' }}{% endfor %}")
    s = TokenizerSettings(vocab_size=262, min_frequency=1, add_bos=True, special_tokens=SpecialTokens(bos="<|bos|>"),
                          chat_template=template)
    art = make_artifact(train_tokenizer([["llll"] * 20], s), s)
    row = DocumentEncoder(art).encode(batch(["x"], [chat(("user", "q"), ("assistant", "ok"))])).batch.to_pylist()[0]
    assert tokens(art, row["input_ids"]) == ["<|bos|>", *spelled("user:q\nassistant:ok\n"), "<|endoftext|>"]
    assert [m for t, m in zip(tokens(art, row["input_ids"]), row["loss_mask"], strict=True) if m] == [1, 1]


# -- overlong ----------------------------------------------------------------------------------------
def test_chunk_and_truncate_exact():
    art = tiny_artifact()
    docs = batch(["abcdefghij", "xyz"])  # 10 + EOS = 11 tokens; 3 + EOS = 4
    chunked = DocumentEncoder(art, TokenizeSettings(max_length=4, overlong="chunk")).encode(docs)
    rows = chunked.batch.to_pylist()
    assert [(r["id"], r["chunk"], tokens(art, r["input_ids"])) for r in rows] == [
        ("d0", 0, list("abcd")), ("d0", 1, list("efgh")), ("d0", 2, ["i", "j", "<|endoftext|>"]),
        ("d1", 0, ["x", "y", "z", "<|endoftext|>"]),
    ]
    assert chunked.stats.chunked_documents == 1 and chunked.stats.overlong_documents == 1
    assert chunked.stats.tokens == 15 and chunked.stats.truncated_tokens == 0

    truncated = DocumentEncoder(art, TokenizeSettings(max_length=4, overlong="truncate")).encode(docs)
    rows = truncated.batch.to_pylist()
    assert [tokens(art, r["input_ids"]) for r in rows] == [list("abcd"), ["x", "y", "z", "<|endoftext|>"]]
    assert truncated.stats.truncated_documents == 1 and truncated.stats.truncated_tokens == 7

    kept = DocumentEncoder(art, TokenizeSettings(max_length=4, overlong="keep")).encode(docs)
    assert kept.batch.column("num_tokens").to_pylist() == [11, 4] and kept.stats.overlong_documents == 1


def test_chat_chunks_keep_mask_aligned_and_drop_prompt_only_chunks():
    art = tiny_artifact()
    conv = chat(("user", "abcdefgh"), ("assistant", "xy"))
    whole = DocumentEncoder(art).encode(batch(["t"], [conv])).batch.to_pylist()[0]
    out = DocumentEncoder(art, TokenizeSettings(max_length=8, overlong="chunk")).encode(batch(["t"], [conv]))
    rows = out.batch.to_pylist()
    n = whole["num_tokens"]  # 32: 27 prompt tokens, x y <|im_end|> at 27..29, then Ċ and EOS
    assert n == 32 and whole["loss_mask"] == [0] * 27 + [1, 1, 1, 0, 0]
    assert [r["chunk"] for r in rows] == [3]  # chunks 0-2 are prompt only
    assert rows[0]["input_ids"] == whole["input_ids"][24:32] and rows[0]["loss_mask"] == whole["loss_mask"][24:32]
    assert out.stats.dropped_chunks == 3 and out.stats.dropped_chunk_tokens == n - 8
    truncated = DocumentEncoder(art, TokenizeSettings(max_length=8, overlong="truncate")).encode(batch(["t"], [conv]))
    assert truncated.batch.num_rows == 0
    assert truncated.exclusions.to_pylist() == [
        {"id": "d0", "rule": TokenizeRule.NO_LOSS_TOKENS, "value": "0 assistant tokens in 8 tokens", "bytes": 1}]


# -- batch == per document -------------------------------------------------------------------------------
def test_batch_encoding_equals_per_document_encoding(gpt2: TokenizerArtifact):
    art = gpt2
    rng = np.random.default_rng(7)
    alphabet = list("abcdefghij klmno\n\t.,;:()[]{}#'\"") + ["é", "ß", "日本", "😀", "  ", "\r\n", "<|endoftext|>"]
    texts = ["".join(rng.choice(alphabet, size=int(rng.integers(1, 400)))) for _ in range(300)]
    metas = [chat(("user", t[:20] or "q"), ("assistant", t[20:] or "a")) if i % 7 == 0 else None
             for i, t in enumerate(texts)]
    docs = batch(texts, metas)
    whole = DocumentEncoder(art, TokenizeSettings()).encode(docs)
    many_slices = DocumentEncoder(art, TokenizeSettings(encode_slice_bytes=500)).encode(docs)
    assert whole.batch.equals(many_slices.batch) and whole.exclusions.equals(many_slices.exclusions)
    rows, excluded = [], []
    for i in range(len(texts)):
        one = DocumentEncoder(art).encode(docs.slice(i, 1))
        rows += one.batch.to_pylist()
        excluded += one.exclusions.to_pylist()
    assert whole.batch.to_pylist() == rows and whole.exclusions.to_pylist() == excluded
    # chat documents whose text holds "<|endoftext|>" are refused, plain ones encode it as text
    assert {e["rule"] for e in excluded} == {TokenizeRule.CONTROL_TOKEN_IN_CONTENT} and 0 < len(excluded) < 43
    by_id = {r["id"]: r for r in rows}
    for i, (text, meta) in enumerate(zip(texts, metas, strict=True)):
        if meta is None:
            row = by_id[f"d{i}"]
            assert row["input_ids"] == art.text_tokenizer.encode(text, add_special_tokens=False).ids + [art.eos_id]
            assert row["loss_mask"] is None


def test_the_word_cache_capacity_is_applied_to_both_tokenizers_and_changes_no_token(gpt2: TokenizerArtifact,
                                                                                      monkeypatch):
    """tokenize.word_cache_capacity bounds the BPE model's word cache (its memory); the cache must never
    change an id: the same documents give the same rows whether every word is cached, a few, or none."""
    rng = np.random.default_rng(11)
    words = ["".join(rng.choice(list("abcdefghijklmnopqrstuvwxyz"), size=int(rng.integers(1, 12)))) for _ in range(400)]
    texts = [" ".join(rng.choice(words, size=int(rng.integers(5, 300)))) for _ in range(120)]
    metas = [chat(("user", t[:30] or "q"), ("assistant", t[30:] or "a")) if i % 9 == 0 else None
             for i, t in enumerate(texts)]
    calls: list[tuple[int, int]] = []
    real_resize = encode_module.resize_word_cache

    def recorded_resize(tokenizer, capacity):
        calls.append((id(tokenizer), capacity))
        return real_resize(tokenizer, capacity)

    monkeypatch.setattr(encode_module, "resize_word_cache", recorded_resize)
    outputs = {}
    for capacity in (None, 10_000, 1_000, 3, 0):
        art = TokenizerArtifact.from_files(gpt2.tokenizer.to_str().encode(), gpt2.to_json() | {"tokenizer_sha256": ""})
        calls.clear()
        encoder = DocumentEncoder(art, TokenizeSettings(word_cache_capacity=capacity))
        outputs[capacity] = encoder.encode(batch(texts, metas))
        expected = [] if capacity is None else [(id(art.text_tokenizer), capacity), (id(art.tokenizer), capacity)]
        assert calls == expected
    assert outputs[None].stats.chat_documents > 0
    for capacity, out in outputs.items():
        assert out.batch.equals(outputs[None].batch), capacity
    assert TokenizeSettings().word_cache_capacity == 1000


def test_large_documents_on_their_own_threads_and_any_thread_count_change_no_token(gpt2: TokenizerArtifact,
                                                                                  monkeypatch):
    """Documents (and chat segments) of own_thread_min_chars or more are encoded each on a thread started
    for it, the rest in one batched call on the encoder's thread; the rows are the same whatever the
    threshold and however many slices are encoded at once, and in input order."""
    rng = np.random.default_rng(5)
    texts = [" ".join(rng.choice(["alpha", "beta", "gamma", "dé", "日本", "\n"], size=int(rng.integers(1, 120))))
             for _ in range(90)]
    metas = [chat(("user", t[:40] or "q"), ("assistant", t[40:] or "a")) if i % 8 == 0 else None
             for i, t in enumerate(texts)]
    own_threads: list[tuple[str, int]] = []
    real_own_thread = encode_module._encode_on_own_thread

    def recorded_own_thread(tokenizer, text):
        encoding = real_own_thread(tokenizer, text)
        own_threads.append((text, len(encoding)))
        return encoding

    monkeypatch.setattr(encode_module, "_encode_on_own_thread", recorded_own_thread)
    docs = batch(texts, metas)
    reference = DocumentEncoder(gpt2, TokenizeSettings(own_thread_min_chars=None), threads=2).encode(docs)
    assert own_threads == [] and reference.stats.chat_documents > 0
    for min_chars, threads in ((300, 2), (300, 7), (1, 3), (10**9, 1)):
        own_threads.clear()
        settings = TokenizeSettings(own_thread_min_chars=min_chars, encode_slice_bytes=700)
        encoder = DocumentEncoder(gpt2, settings, threads=threads)
        assert encoder.pipeline_depth == max(2, threads)
        out = encoder.encode(docs)
        assert out.batch.equals(reference.batch) and out.exclusions.equals(reference.exclusions), (min_chars, threads)
        segments = [piece for m in metas if m for turn in m["messages"] for piece in (turn["content"],)]
        large_plain = [t for t, m in zip(texts, metas, strict=True) if m is None and len(t) >= min_chars]
        # slices finish in any order across threads: compare what went, not when
        assert sorted(t for t, _ in own_threads if t in set(large_plain)) == sorted(large_plain)
        assert bool(large_plain) == (min_chars < 10**9)
        if min_chars == 1:  # every text and every rendered chat segment went on a thread of its own
            assert len(own_threads) > len(texts) and any(s in t for t, _ in own_threads for s in segments[:1])
        if min_chars == 10**9:
            assert own_threads == []


def test_encode_runs_tokenizers_serially_and_puts_the_setting_back(gpt2: TokenizerArtifact, monkeypatch):
    """Inside serial_tokenizers tokenizers' batch calls run on the calling thread (TOKENIZERS_PARALLELISM
    false, what each encoding thread sees); leaving puts back what was there, unset or set, and an
    error inside does too."""
    seen: list[str | None] = []
    real_flat_ids = encode_module._flat_ids

    def recorded_flat_ids(tokenizer, texts, own_thread_min_chars=None):
        seen.append(os.environ.get("TOKENIZERS_PARALLELISM"))
        return real_flat_ids(tokenizer, texts, own_thread_min_chars)

    monkeypatch.setattr(encode_module, "_flat_ids", recorded_flat_ids)
    for before in (None, "true", "0"):
        if before is None:
            monkeypatch.delenv("TOKENIZERS_PARALLELISM", raising=False)
        else:
            monkeypatch.setenv("TOKENIZERS_PARALLELISM", before)
        seen.clear()
        DocumentEncoder(gpt2).encode(batch(["one document", "and another"]))
        assert seen and set(seen) == {"false"}
        assert os.environ.get("TOKENIZERS_PARALLELISM") == before
        with pytest.raises(RuntimeError), encode_module.serial_tokenizers():
            assert os.environ["TOKENIZERS_PARALLELISM"] == "false"
            raise RuntimeError("inside")
        assert os.environ.get("TOKENIZERS_PARALLELISM") == before


def test_resize_word_cache_is_for_models_that_have_one():
    assert encode_module.resize_word_cache(Tokenizer(BPE()), 10)
    assert encode_module.resize_word_cache(Tokenizer(Unigram([("a", -1.0), ("<unk>", -2.0)], 1)), 0)
    assert not encode_module.resize_word_cache(Tokenizer(WordPiece({"a": 0, "[UNK]": 1}, unk_token="[UNK]")), 0)


def test_parts_are_the_slices_in_row_order_and_join_to_the_batch(gpt2: TokenizerArtifact):
    """encode_parts hands out one slice at a time (what the stage writes before it makes the next): the
    parts cover the batch's rows once, in order, each within encode_slice_bytes of text unless it is a
    single document, and joined they are encode's batch, exclusions and counts."""
    rng = np.random.default_rng(11)
    texts = ["".join(rng.choice(list("abc de\nfg"), size=int(rng.integers(1, 300)))) for _ in range(200)]
    texts[5], texts[9] = "", "x" * 1200  # an empty document (excluded) and one larger than a slice
    metas = [chat(("user", "q"), ("assistant", t or "a")) if i % 9 == 0 else None for i, t in enumerate(texts)]
    metas[18] = {"messages": 3}  # malformed: excluded before any slice is cut
    docs = batch(texts, metas)
    encoder = DocumentEncoder(gpt2, TokenizeSettings(encode_slice_bytes=500, max_length=64, overlong="chunk"))
    parts = list(encoder.encode_parts(docs))
    whole = encoder.encode(docs)

    assert len(parts) > 10
    ranges = []
    for part in parts:
        ids = part.batch.column("id").to_pylist() + part.exclusions.column("id").to_pylist()
        rows = sorted({int(i[1:]) for i in ids})
        assert rows == list(range(rows[0], rows[-1] + 1))  # contiguous rows of the batch
        assert part.stats.documents == len(rows)
        ranges.append((rows[0], rows[-1] + 1))
        plain = [len(texts[r].encode()) for r in rows if metas[r] is None]
        assert len(rows) == 1 or len(plain) < len(rows) or sum(plain) <= 500
    assert [a for a, _ in ranges] == [0] + [b for _, b in ranges[:-1]] and ranges[-1][1] == len(texts)
    assert ranges[[a for a, _ in ranges].index(9)] == (9, 10)  # the large document is a slice by itself

    assert pa.Table.from_batches([p.batch for p in parts]).equals(pa.Table.from_batches([whole.batch]))
    assert pa.Table.from_batches([p.exclusions for p in parts]).equals(pa.Table.from_batches([whole.exclusions]))
    assert {e["id"] for e in whole.exclusions.to_pylist()} >= {"d5", "d18"}
    assert whole.stats.documents == len(texts) and whole.stats.chunked_documents > 0
    assert sum(p.stats.tokens for p in parts) == whole.stats.tokens == sum(whole.batch.column("num_tokens").to_pylist())
    assert sum(p.stats.chat_documents for p in parts) == whole.stats.chat_documents > 0
    assert list(encoder.encode_parts(batch([]))) == [] and encoder.encode(batch([])).batch.num_rows == 0


def test_slices_of_large_documents_are_not_in_the_tokenizer_at_once(gpt2: TokenizerArtifact, monkeypatch):
    """Two slices are encoded at once while their largest documents add up to at most a slice's bytes
    (a document's cost inside tokenizers follows its own size): slices of one large document each go
    one at a time, slices of small documents two at a time; the output is the same either way."""
    import threading
    import time

    from platform_assets.tokenize import encode as encode_module

    active, most, lock = [0], [0], threading.Lock()
    real = encode_module.DocumentEncoder._tokenize_slice

    def counted(self, *args):
        with lock:
            active[0] += 1
            most[0] = max(most[0], active[0])
        time.sleep(0.05)  # long enough for a second slice in flight to start beside this one
        try:
            return real(self, *args)
        finally:
            with lock:
                active[0] -= 1

    monkeypatch.setattr(encode_module.DocumentEncoder, "_tokenize_slice", counted)
    encoder = DocumentEncoder(gpt2, TokenizeSettings(encode_slice_bytes=1000))
    large = batch(["word " * 120 + str(i) for i in range(6)])  # ~600 bytes: a slice each
    small = batch(["word " * 20 + str(i) for i in range(60)])  # ~100 bytes: ~10 a slice
    for docs, expected in ((large, 1), (small, 2)):
        most[0] = 0
        parts = list(encoder.encode_parts(docs))
        assert len(parts) == (6 if docs is large else 7)
        assert most[0] == expected
        joined = pa.Table.from_batches([p.batch for p in parts])
        assert joined.column("input_ids").to_pylist() == [
            gpt2.text_tokenizer.encode(t, add_special_tokens=False).ids + [gpt2.eos_id]
            for t in docs.column("text").to_pylist()]


# -- sequences ---------------------------------------------------------------------------------------
def test_assemble_places_bodies_between_bos_and_eos_and_cuts():
    src = np.array([10, 11, 12, 20, 21, 30], np.int32)
    mask = np.array([1, 0, 1, 1, 1, 0], np.uint8)
    # rows out of source order: row 0 is the body at 3..5, row 1 at 0..3, row 2 the empty body at 6
    starts, lengths = np.array([3, 0, 6]), np.array([2, 3, 0])
    a = assemble(src, mask, starts, lengths, np.array([True, False, True]), np.array([True, True, True]), 1, 2)
    rows = [a.values[a.offsets[i]:a.offsets[i + 1]].tolist() for i in range(3)]
    assert rows == [[1, 20, 21, 2], [10, 11, 12, 2], [1, 2]]
    assert a.mask.tolist() == [0, 1, 1, 0, 1, 0, 1, 0, 0, 0] and a.full_lengths.tolist() == [4, 4, 2]
    cut = assemble(src, mask, starts, lengths, np.array([True, False, True]), np.array([True, True, True]), 1, 2,
                   limit=3)
    assert [cut.values[cut.offsets[i]:cut.offsets[i + 1]].tolist() for i in range(3)] == [[1, 20, 21], [10, 11, 12],
                                                                                           [1, 2]]
    with pytest.raises(ValueError, match="no bos token"):
        assemble(src, mask, starts, lengths, np.array([True, False, False]), np.array([True] * 3), None, 2)


def test_chunk_offsets_and_segment_sums():
    ch = chunk(np.array([0, 5, 5, 8]), 2)  # rows of 5, 0 and 3 tokens
    assert ch.offsets.tolist() == [0, 2, 4, 5, 5, 7, 8]
    assert ch.row.tolist() == [0, 0, 0, 1, 2, 2] and ch.index.tolist() == [0, 1, 2, 0, 0, 1]
    assert segment_sums(np.array([1, 0, 1, 1, 1, 0, 1, 1], np.uint8), ch.offsets).tolist() == [1, 2, 1, 0, 1, 1]


# -- exclusions --------------------------------------------------------------------------------------------
def test_malformed_chat_documents_become_exclusions_and_the_batch_goes_on():
    art = tiny_artifact()
    metas = [
        {"messages": "hi"},
        {"messages": []},
        {"messages": ["hi"]},
        {"messages": [{"role": "bot", "content": "x"}]},
        {"messages": [{"content": "x"}]},
        {"messages": [{"role": "user"}]},
        {"messages": [{"role": "user", "content": 3}]},
        {"messages": [{"role": "user", "content": "a<|im_end|>b"}, {"role": "assistant", "content": "c"}]},
        '{"messages": [',
        {"messages": [{"role": "user", "content": "only a question"}]},
        {"source_field": "messages are mentioned only in a value: \"messages\""},
        None,
        chat(("user", "q"), ("assistant", "a")),
    ]
    texts = ["t"] * 12 + [""]  # the chat document's text is ignored, even when empty
    out = DocumentEncoder(art).encode(batch(texts, metas))
    ex = out.exclusions.to_pylist()
    assert [(e["id"], e["rule"], e["value"]) for e in ex] == [
        ("d0", TokenizeRule.MESSAGES_NOT_A_LIST, "messages is str"),
        ("d1", TokenizeRule.EMPTY_CONVERSATION, "messages is []"),
        ("d2", TokenizeRule.MESSAGE_NOT_AN_OBJECT, "messages[0] is str"),
        ("d3", TokenizeRule.UNKNOWN_ROLE, "messages[0]: role 'bot'"),
        ("d4", TokenizeRule.UNKNOWN_ROLE, "messages[0]: no role"),
        ("d5", TokenizeRule.MISSING_CONTENT, "messages[0] (user): no content"),
        ("d6", TokenizeRule.MISSING_CONTENT, "messages[0] (user): content is int"),
        ("d7", TokenizeRule.CONTROL_TOKEN_IN_CONTENT, "messages[0] (user): '<|im_end|>'"),
        ("d8", TokenizeRule.META_NOT_JSON, ex[8]["value"]),
        ("d9", TokenizeRule.NO_LOSS_TOKENS, ex[9]["value"]),
    ]
    assert ex[8]["value"] and ex[9]["value"].startswith("0 assistant tokens in ")
    assert all(e["bytes"] == 1 for e in ex)
    assert out.batch.column("id").to_pylist() == ["d10", "d11", "d12"]
    assert out.batch.column("loss_mask").to_pylist()[:2] == [None, None]
    assert out.stats.excluded[TokenizeRule.UNKNOWN_ROLE] == 2 and sum(out.stats.excluded.values()) == 10
    assert out.stats.chat_documents == 1 and out.stats.documents == 13


def test_template_errors_empty_and_null_texts_are_exclusions():
    s = TokenizerSettings(vocab_size=261, min_frequency=1, chat_template=(
        "{% for m in messages %}{% if m['role'] == 'system' %}{{ raise_exception('no system role') }}{% endif %}"
        "{% generation %}{{ m['content'] }}{% endgeneration %}{% endfor %}"))
    art = make_artifact(train_tokenizer([["llll"] * 20], s), s)
    docs = batch(["", None, "x", "y"], [None, None, chat(("system", "s"), ("assistant", "a")),
                                        chat(("user", "u"), ("assistant", "a"))])
    out = DocumentEncoder(art).encode(docs)
    assert [(e["id"], e["rule"]) for e in out.exclusions.to_pylist()] == [
        ("d0", TokenizeRule.NO_TOKENS), ("d1", TokenizeRule.MISSING_TEXT), ("d2", TokenizeRule.CHAT_TEMPLATE_ERROR)]
    assert "no system role" in out.exclusions.column("value")[2].as_py()
    assert out.batch.column("id").to_pylist() == ["d3"]


def test_empty_and_fully_excluded_batches():
    art = tiny_artifact()
    empty = DocumentEncoder(art).encode(batch([]))
    assert empty.batch.num_rows == 0 and empty.exclusions.num_rows == 0 and empty.batch.schema == tokenized_schema()
    dropped = DocumentEncoder(art).encode(batch(["", "x"], [None, {"messages": 1}]))
    assert dropped.batch.num_rows == 0 and dropped.exclusions.column("rule").to_pylist() == [
        TokenizeRule.NO_TOKENS, TokenizeRule.MESSAGES_NOT_A_LIST]


def test_missing_column_is_a_clear_error():
    art = tiny_artifact()
    with pytest.raises(ValueError, match="no 'split' column"):
        DocumentEncoder(art).encode(pa.RecordBatch.from_pydict({"id": ["a"], "source": ["s"], "text": ["t"]}))
