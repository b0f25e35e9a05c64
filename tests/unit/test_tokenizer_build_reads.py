"""The tokenizer stage reads the split output in batches of `io.work_bytes` of text, not `io.batch_bytes`:
both of its passes keep only hashes and sizes of a batch (and a few sample texts), so the batch is
all its reading costs. At the default 64 MiB batches its peak grew with the input until the input
passed 64 MiB (pipeline_scaling, 32 MB base: 440 MB at 1x, 486 MB at 4x). The sample, the training
choice and the trained tokenizer are the same whatever the batching."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest

import platform_assets.tokenize.stage as tokenize_stage
from platform_assets.contracts import IOSettings
from platform_assets.parquet_parts import PartWriter
from platform_assets.storage import Storage
from platform_assets.tokenize.settings import TokenizerSettings
from platform_assets.tokenize.stage import build_tokenizer

SPLITS = "dataset_splits/_all"
SCHEMA = pa.schema([("id", pa.string()), ("source", pa.string()), ("text", pa.large_string()),
                    ("split", pa.string())])
ROW_GROUP_DOCS = 40
WORK_BYTES = 16 * 1024


def _write_splits(storage: Storage) -> int:
    """400 documents of ~0.6-3 KB in row groups of 40 (~70 KB of text each, ~1 MB in all); returns the
    largest document's UTF-8 bytes."""
    rng = random.Random(3)
    words = ["".join(rng.choice("abcdefghijklmnoprstu") for _ in range(rng.randint(2, 8))) for _ in range(500)]
    docs = [{"id": f"d{i:04d}", "source": "web", "text": " ".join(rng.choices(words, k=rng.randint(100, 500))),
             "split": "validation" if i % 25 == 0 else "train"} for i in range(400)]
    with storage.staged_dir(SPLITS) as staged, PartWriter(staged, SCHEMA) as writer:
        for lo in range(0, len(docs), ROW_GROUP_DOCS):
            writer.write(pa.Table.from_pylist(docs[lo:lo + ROW_GROUP_DOCS], schema=SCHEMA))
    return max(len(d["text"].encode()) for d in docs)


@pytest.fixture
def text_bytes_read(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The text bytes of every batch the stage reads from its input."""
    seen: list[int] = []
    batches = tokenize_stage.TableSource.batches

    def recording(self, *args, **kwargs):
        for batch in batches(self, *args, **kwargs):
            seen.append(batch.column("text").nbytes)
            yield batch

    monkeypatch.setattr(tokenize_stage.TableSource, "batches", recording)
    return seen


def test_both_passes_read_batches_of_work_bytes(storage: Storage, text_bytes_read: list[int]):
    largest_doc = _write_splits(storage)
    io = IOSettings(batch_bytes=64 * 2**20, work_bytes=WORK_BYTES)
    result = build_tokenizer(storage, SPLITS, "tokenizer/_all", TokenizerSettings(vocab_size=300), io)
    assert result.train_documents == 384 and result.sanity.roundtrip_checked == 400
    # a row group over the bound is read at its average row size: a batch can pass it by one document
    # (and its offsets); at io.batch_bytes the first pass read the whole ~1 MB output as one batch
    assert sum(text_bytes_read) > 2 * 20 * WORK_BYTES  # two passes over > 20 work slices of text
    assert max(text_bytes_read) <= WORK_BYTES + largest_doc + 8 * 64, max(text_bytes_read)


def test_the_batching_changes_nothing_built(storage: Storage, text_bytes_read: list[int]):
    _write_splits(storage)
    settings = TokenizerSettings(vocab_size=300, roundtrip_sample=30, roundtrip_sample_chars=20_000,
                                 max_train_documents=200)
    small = build_tokenizer(storage, SPLITS, "small/_all", settings, IOSettings(work_bytes=WORK_BYTES))
    whole = build_tokenizer(storage, SPLITS, "whole/_all", settings, IOSettings(work_bytes=64 * 2**20))
    assert {n: f["sha256"] for n, f in small.files.items()} == {n: f["sha256"] for n, f in whole.files.items()}
    assert small.sanity == whole.sanity and small.sanity.roundtrip_checked > 1
    assert (small.train_documents, small.train_bytes) == (whole.train_documents, whole.train_bytes) == (
        200, small.train_bytes)
