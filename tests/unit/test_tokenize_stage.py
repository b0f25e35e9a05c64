"""The tokenizer and tokenize stages over a tmp Storage: training on the train split only, the
training cap, atomic reproducible outputs, one part sequence per (split, source), exclusions."""

from __future__ import annotations

import json
import os
import random

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from gpt2_tokenizer import GPT2_JSON

from platform_assets.contracts import IOSettings
from platform_assets.parquet_parts import PartWriter, read_batches
from platform_assets.splits.assignment import id_unit_interval
from platform_assets.storage import Storage
from platform_assets.tokenize import encode as encode_module
from platform_assets.tokenize.encode import DocumentEncoder
from platform_assets.tokenize.exclusion_rules import TokenizeRule
from platform_assets.tokenize.settings import TokenizerSettings, TokenizeSettings
from platform_assets.tokenize.stage import EXCLUSIONS_FILE, SAMPLE_SEED, build_tokenizer, tokenize_outputs
from platform_assets.tokenize.tokenizer_artifact import ARTIFACT_FILE, TOKENIZER_FILE, TokenizerArtifact

SPLITS = "dataset_splits/_all"
SYLLABLES = ["ka", "to", "ri", "men", "sa", "lo", "the", "ing", "er", "pla", "da", "ta", "form", "un", "re", "ß", "ü"]
SCHEMA = pa.schema([("id", pa.string()), ("source", pa.string()), ("text", pa.large_string()),
                    ("meta", pa.string()), ("split", pa.string())])


def _documents() -> list[dict]:
    """240 web documents (validation ones full of `qz`, a syllable no train document has), 30 chat
    documents and 3 malformed ones, split by position."""
    rng = random.Random(5)
    words = ["".join(rng.choice(SYLLABLES) for _ in range(rng.randint(1, 3))) for _ in range(800)]
    docs = []
    for i in range(240):
        split = "validation" if i % 10 == 0 else "test" if i % 10 == 1 else "train"
        text = " ".join(rng.choices(words, k=rng.randint(20, 200)))
        if split == "validation":
            text = " ".join(["qzqzqz"] * 50)
        docs.append({"id": f"w{i:03d}", "source": "web", "text": text, "meta": json.dumps({"url": f"u{i}"}),
                     "split": split})
    for i in range(33):
        messages = [{"role": "user", "content": " ".join(rng.choices(words, k=8))},
                    {"role": "assistant", "content": " ".join(rng.choices(words, k=12))}]
        if i == 30:
            messages[1]["role"] = "bot"
        if i == 31:
            messages = [{"role": "user"}]
        meta = json.dumps({"messages": messages}) if i != 32 else '{"messages": 7}'
        docs.append({"id": f"c{i:03d}", "source": "chat", "text": "user: ... assistant: ...", "meta": meta,
                     "split": "train" if i % 3 else "test"})
    return docs


@pytest.fixture
def splits(storage: Storage) -> list[dict]:
    docs = _documents()
    with storage.staged_dir(SPLITS) as staged:
        with PartWriter(staged, SCHEMA, part_max_bytes=20_000) as writer:  # several parts
            for i in range(0, len(docs), 50):
                writer.write(pa.Table.from_pylist(docs[i:i + 50], schema=SCHEMA))
    assert len(writer.parts) > 1
    return docs


def _hashes(files: dict) -> dict[str, str]:
    return {name: info["sha256"] for name, info in files.items()}


# -- tokenizer ---------------------------------------------------------------------------------------------
def test_build_trains_on_the_train_split_only_and_is_reproducible(storage: Storage, splits: list[dict]):
    settings = TokenizerSettings(vocab_size=400, roundtrip_sample=50)
    result = build_tokenizer(storage, SPLITS, "tokenizer/_all", settings, io=IOSettings(batch_rows=32))
    train = [d for d in splits if d["split"] == "train"]
    assert result.train_documents == len(train) == 214
    assert result.train_bytes == sum(len(d["text"].encode()) for d in train)
    assert result.vocab_size == 400 and result.sanity.ok, result.sanity.to_dict()
    assert result.sanity.roundtrip_checked == 50 and result.sanity.bytes_per_token > 2
    assert set(result.files) == {"chat_template.jinja", ARTIFACT_FILE, TOKENIZER_FILE, "tokenizer_config.json"}
    art = TokenizerArtifact.load(storage, "tokenizer/_all")
    assert art.tokenizer_sha256 == result.tokenizer_sha256 == result.files[TOKENIZER_FILE]["sha256"]
    assert art.info["train_documents"] == 214
    vocab = art.tokenizer.get_vocab()
    assert not [t for t in vocab if "qz" in t]  # validation text never reached the trainer
    assert any(len(t) > 3 for t in vocab)  # (and the check could fail: merges were learnt)

    again = build_tokenizer(storage, SPLITS, "tokenizer_again/_all", settings, io=IOSettings(batch_rows=97))
    assert _hashes(again.files) == _hashes(result.files)


def test_training_cap_takes_the_smallest_id_hashes(storage: Storage, splits: list[dict]):
    result = build_tokenizer(storage, SPLITS, "tokenizer/_all",
                             TokenizerSettings(vocab_size=300, max_train_documents=25, roundtrip_sample=0))
    train = [d for d in splits if d["split"] == "train"]
    u = id_unit_interval(pa.array([d["id"] for d in train]), SAMPLE_SEED)
    chosen = [train[i] for i in np.argsort(u)[:25]]
    assert result.train_documents == 25 and result.train_bytes == sum(len(d["text"].encode()) for d in chosen)
    assert {d["source"] for d in chosen} == {"web", "chat"}  # a sample across sources, not the first part
    by_bytes = build_tokenizer(storage, SPLITS, "tokenizer/_all",
                               TokenizerSettings(vocab_size=300, max_train_bytes=10_000, roundtrip_sample=0))
    sizes = np.cumsum([len(chosen_doc["text"].encode()) for chosen_doc in [train[i] for i in np.argsort(u)]])
    assert by_bytes.train_documents == int(np.searchsorted(sizes, 10_000, side="right"))
    assert by_bytes.train_bytes <= 10_000


def test_build_from_gpt2_through_storage(storage: Storage, splits: list[dict]):
    if not GPT2_JSON.is_file():
        pytest.skip(f"{GPT2_JSON} not present")
    from transformers import AutoTokenizer

    result = build_tokenizer(storage, SPLITS, "tokenizer/_all",
                             TokenizerSettings(source="pretrained", path=str(GPT2_JSON)))
    assert result.special_tokens["pad"] == {"token": "<|endoftext|>", "id": 50256}
    assert result.special_tokens["chat_end"] == {"token": "<|im_end|>", "id": 50258}
    assert result.train_documents == 0 and result.vocab_size == 50259
    assert result.sanity.roundtrip_checked == len(splits) and result.sanity.ok
    hf = AutoTokenizer.from_pretrained(storage.path("tokenizer/_all"))
    assert hf.pad_token_id == 50256 and hf.convert_tokens_to_ids("<|im_start|>") == 50257


def test_build_needs_input(storage: Storage):
    with pytest.raises(ValueError, match="no documents under dataset_splits/_all"):
        build_tokenizer(storage, SPLITS, "tokenizer/_all", TokenizerSettings())


# -- tokenized documents ----------------------------------------------------------------------------------
@pytest.fixture
def tokenizer_rel(storage: Storage, splits: list[dict]) -> str:
    build_tokenizer(storage, SPLITS, "tokenizer/_all", TokenizerSettings(vocab_size=400, roundtrip_sample=0))
    return "tokenizer/_all"


def test_tokenize_writes_one_part_sequence_per_set_and_is_reproducible(storage: Storage, splits: list[dict],
                                                                       tokenizer_rel: str):
    out = "tokenized_documents/_all"
    result = tokenize_outputs(storage, SPLITS, tokenizer_rel, out, TokenizeSettings(),
                              io=IOSettings(batch_rows=40, part_max_bytes=4000))
    keys = [(s["split"], s["source"]) for s in result.sets]
    assert keys == sorted({(d["split"], d["source"]) for d in splits}) == [
        ("test", "chat"), ("test", "web"), ("train", "chat"), ("train", "web"), ("validation", "web")]
    assert all(p.startswith(("test/", "train/", "validation/")) for p in result.parts)
    assert "train/web/part-00001.parquet" in result.parts  # part_max_bytes rolled over within a set
    # the counts are what the files hold
    for s in result.sets:
        t = pa.Table.from_batches(list(read_batches(storage, f"{out}/{s['dir']}")))
        assert set(t.column("split").to_pylist()) == {s["split"]} and set(t.column("source").to_pylist()) == {
            s["source"]}
        assert (t.num_rows, len(set(t.column("id").to_pylist())), sum(t.column("num_tokens").to_pylist()),
                sum(t.column("loss_tokens").to_pylist())) == (s["rows"], s["documents"], s["tokens"],
                                                              s["loss_tokens"])
    assert result.documents == len(splits) - 3 == result.rows and result.excluded == 3
    # rows in input order within a set, identical to encoding the input directly
    art = TokenizerArtifact.load(storage, tokenizer_rel)
    direct = DocumentEncoder(art).encode(pa.Table.from_pylist(splits, schema=SCHEMA)).batch.to_pylist()
    written = pa.Table.from_batches(list(read_batches(storage, out))).to_pylist()
    assert written == sorted(direct, key=lambda r: (r["split"], r["source"]))  # a stable sort keeps input order
    ex = pq.read_table(storage.path(f"{out}/{EXCLUSIONS_FILE}")).to_pylist()
    assert [(e["id"], e["rule"]) for e in ex] == [("c030", TokenizeRule.UNKNOWN_ROLE),
                                                  ("c031", TokenizeRule.MISSING_CONTENT),
                                                  ("c032", TokenizeRule.MESSAGES_NOT_A_LIST)]
    schema = pq.read_schema(storage.path(f"{out}/{result.parts[0]}"))
    assert schema.metadata[b"platform.tokenizer_sha256"] == art.tokenizer_sha256.encode()

    again = tokenize_outputs(storage, SPLITS, tokenizer_rel, "tokenized_again/_all", TokenizeSettings(),
                             io=IOSettings(batch_rows=40, part_max_bytes=4000))
    assert _hashes(again.files) == _hashes(result.files)


def test_tokenize_encodes_serially_on_io_workers_threads_and_the_output_does_not_depend_on_them(
        storage: Storage, splits: list[dict], tokenizer_rel: str, monkeypatch):
    """The stage encodes with tokenizers' own pool off (TOKENIZERS_PARALLELISM false while it runs, put
    back after) on io.workers threads, and writes the same files for any number of them."""
    seen: set[tuple[str | None, int]] = set()
    real_tokenize_slice = encode_module.DocumentEncoder._tokenize_slice

    def recorded_tokenize_slice(self, *args):
        seen.add((os.environ.get("TOKENIZERS_PARALLELISM"), self.pipeline_depth))
        return real_tokenize_slice(self, *args)

    monkeypatch.setattr(encode_module.DocumentEncoder, "_tokenize_slice", recorded_tokenize_slice)
    monkeypatch.delenv("TOKENIZERS_PARALLELISM", raising=False)
    files = {}
    for workers in (1, 2, 5):
        seen.clear()
        result = tokenize_outputs(storage, SPLITS, tokenizer_rel, f"w{workers}/_all",
                                  TokenizeSettings(encode_slice_bytes=2000), io=IOSettings(workers=workers))
        assert seen == {("false", max(2, workers))}
        assert "TOKENIZERS_PARALLELISM" not in os.environ
        files[workers] = _hashes(result.files)
    assert files[1] == files[2] == files[5]


def test_batch_size_changes_row_groups_not_rows(storage: Storage, splits: list[dict], tokenizer_rel: str):
    small = tokenize_outputs(storage, SPLITS, tokenizer_rel, "a/_all", TokenizeSettings(),
                             io=IOSettings(batch_rows=16))
    large = tokenize_outputs(storage, SPLITS, tokenizer_rel, "b/_all", TokenizeSettings(),
                             io=IOSettings(batch_rows=1000))
    # io.batch_bytes and tokenize.row_group_bytes, the smaller, bound what a set holds back too (its row
    # groups), whatever the rows
    by_bytes = tokenize_outputs(storage, SPLITS, tokenizer_rel, "c/_all", TokenizeSettings(),
                                io=IOSettings(batch_rows=1000, batch_bytes=2048))
    by_row_group = tokenize_outputs(storage, SPLITS, tokenizer_rel, "d/_all", TokenizeSettings(row_group_bytes=2048),
                                    io=IOSettings(batch_rows=1000))
    row_groups = {rel: pq.ParquetFile(storage.path(f"{rel}/train/web/part-00000.parquet")).num_row_groups
                  for rel in ("a/_all", "b/_all", "c/_all", "d/_all")}
    assert row_groups["a/_all"] > 1 and row_groups["b/_all"] == 1
    assert row_groups["c/_all"] > 1 and row_groups["d/_all"] > 1  # a set is written once an add passes the bound
    rows = [pa.Table.from_batches(list(read_batches(storage, rel))).to_pylist() for rel in row_groups]
    assert rows[0] == rows[1] == rows[2] == rows[3]
    assert small.sets == large.sets == by_bytes.sets == by_row_group.sets


def test_chunked_output_keeps_every_token(storage: Storage, splits: list[dict], tokenizer_rel: str):
    whole = tokenize_outputs(storage, SPLITS, tokenizer_rel, "whole/_all", TokenizeSettings())
    chunked = tokenize_outputs(storage, SPLITS, tokenizer_rel, "chunked/_all",
                               TokenizeSettings(max_length=64, overlong="chunk"))
    rows = pa.Table.from_batches(list(read_batches(storage, "chunked/_all"))).to_pylist()
    assert max(r["num_tokens"] for r in rows) == 64 and chunked.stats.chunked_documents > 100
    assert chunked.tokens + chunked.stats.dropped_chunk_tokens == whole.tokens
    assert chunked.loss_tokens == whole.loss_tokens and chunked.documents == whole.documents
    for doc_id in ("w002", "w150"):
        pieces = [r for r in rows if r["id"] == doc_id]
        assert [r["chunk"] for r in pieces] == list(range(len(pieces))) and len(pieces) > 1
        joined = [t for r in pieces for t in r["input_ids"]]
        assert joined == next(r for r in read_batches(storage, "whole/_all") for r in r.to_pylist()
                              if r["id"] == doc_id)["input_ids"]


def test_tokenize_errors(storage: Storage, splits: list[dict]):
    with pytest.raises(FileNotFoundError, match="materialize the tokenizer first"):
        tokenize_outputs(storage, SPLITS, "tokenizer/_all", "out/_all", TokenizeSettings())
    with pytest.raises(ValueError, match="no documents under nothing/_all"):
        tokenize_outputs(storage, "nothing/_all", "tokenizer/_all", "out/_all", TokenizeSettings())
