"""Cleaning in slices of `io.work_bytes`: the slices cover the batch in order, each about that much
payload, and a batch cleaned in slices gives the result and the bytes of the batch cleaned whole."""

import gzip
import json
from pathlib import Path

import pyarrow as pa
import pytest
from document_batches import documents_batch

from platform_assets.cleaning.pipeline import build_pipeline, merge_results
from platform_assets.cleaning.settings import CleaningSettings
from platform_assets.cleaning.stage import clean_output, row_payload_bytes, work_slices
from platform_assets.contracts import IOSettings
from platform_assets.parquet_parts import TableSink
from platform_assets.schema import DOCUMENTS_SCHEMA
from platform_assets.storage import Storage

SEED = Path(__file__).resolve().parents[2] / "sample_data" / "real_docs.jsonl.gz"


def _texts() -> list[str]:
    with gzip.open(SEED, "rt") as f:
        texts = [json.loads(line)["text"] for line in f]
    # what several steps remove, spread between the prose so that every slice excludes something
    bad = ["", "buy now " * 300, "Short.", "<html><body><p>cookie</p></body></html>"]
    return [t for i, text in enumerate(texts) for t in (text, bad[i % len(bad)])]


def test_slices_cover_the_batch_in_order_at_about_work_bytes():
    batch = documents_batch(["a" * 1000] * 10 + ["b" * 5000] + ["c" * 10] * 5)
    assert row_payload_bytes(batch).tolist() == [1000] * 10 + [5000] + [10] * 5
    pieces = work_slices(batch, 2500)
    # a slice ends once it holds 2,500 bytes or more: at most that plus one row (1,000 + 5,000)
    assert [p.num_rows for p in pieces] == [3, 3, 3, 2, 5]
    assert pa.Table.from_batches(pieces).equals(pa.Table.from_batches([batch]))
    assert [p.num_rows for p in work_slices(batch, 10**9)] == [16]
    assert [p.num_rows for p in work_slices(batch.slice(0, 0), 1)] == [0]


def test_merged_slices_equal_the_batch_cleaned_whole():
    batch = documents_batch(_texts(), meta="{}")
    whole = build_pipeline(CleaningSettings()).process_batch(batch)
    pieces = work_slices(batch, 20_000)
    assert len(pieces) > 5
    pipeline = build_pipeline(CleaningSettings())
    merged = merge_results([pipeline.process_batch(p) for p in pieces])
    assert whole.exclusions.num_rows > 0 and len({r for r in whole.exclusions.column("rule").to_pylist()}) > 2
    assert merged.kept.equals(whole.kept)
    assert merged.exclusions.equals(whole.exclusions)  # step by step, not slice by slice
    for a, b in zip(merged.stats, whole.stats, strict=True):
        assert (a.step, a.docs_in, a.docs_out, a.bytes_in, a.bytes_out, a.removed_docs, a.counters) == \
            (b.step, b.docs_in, b.docs_out, b.bytes_in, b.bytes_out, b.removed_docs, b.counters)


@pytest.mark.parametrize("workers", [1, 2])
def test_the_output_does_not_depend_on_work_bytes(tmp_path, workers):
    storage = Storage(str(tmp_path))
    io = IOSettings(batch_rows=64, workers=workers)
    texts = _texts()
    with TableSink(storage, "raw", DOCUMENTS_SCHEMA, io) as sink:
        sink.write(documents_batch(texts, uris=[f"u{i}" for i in range(len(texts))], meta="{}"))
    whole = clean_output(storage, "raw", "whole", CleaningSettings(), io.model_copy(update={"work_bytes": 2**30}))
    sliced = clean_output(storage, "raw", "sliced", CleaningSettings(), io.model_copy(update={"work_bytes": 8_192}))
    assert whole.workers == 1 and sliced.workers == workers
    assert whole.excluded > 0 and whole.excluded == sliced.excluded
    # parts and _exclusions.parquet, byte for byte
    assert "_exclusions.parquet" in whole.files and len(whole.files) > 1
    assert {k: v["sha256"] for k, v in whole.files.items()} == {k: v["sha256"] for k, v in sliced.files.items()}
    assert whole.funnel.removed_by_rule() == sliced.funnel.removed_by_rule()
