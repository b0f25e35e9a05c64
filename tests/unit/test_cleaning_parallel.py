"""The cleaning stage in several processes: the same bytes and the same funnel as in one."""

import gzip
import json
from pathlib import Path

from document_batches import documents_batch

from platform_assets.cleaning.settings import CleaningSettings
from platform_assets.cleaning.stage import clean_output
from platform_assets.contracts import IOSettings
from platform_assets.parquet_parts import TableSink, TableSource
from platform_assets.schema import DOCUMENTS_SCHEMA
from platform_assets.storage import Storage

SEED = Path(__file__).resolve().parents[2] / "sample_data" / "real_docs.jsonl.gz"


def _raw(storage: Storage, io: IOSettings) -> int:
    with gzip.open(SEED, "rt") as f:
        texts = [json.loads(line)["text"] for line in f]
    # real prose in several languages plus what the steps remove: empty, repetitive, short
    texts += ["", "buy now " * 300, "Short.", "<html><body><p>cookie</p></body></html>"] * 3
    with TableSink(storage, "raw", DOCUMENTS_SCHEMA, io) as sink:
        sink.write(documents_batch(texts, uris=[f"u{i}" for i in range(len(texts))], meta="{}"))
    return len(texts)


def test_any_number_of_workers_writes_the_same_bytes_and_funnel(tmp_path):
    storage = Storage(str(tmp_path))
    # many batches, and slices of them, from a small input, so that the workers share them
    io = IOSettings(batch_rows=16, work_bytes=16_384)
    n = _raw(storage, io)
    one = clean_output(storage, "raw", "one", CleaningSettings(), io.model_copy(update={"workers": 1}))
    two = clean_output(storage, "raw", "two", CleaningSettings(), io.model_copy(update={"workers": 2}))
    assert (one.workers, two.workers) == (1, 2)
    assert one.funnel.docs_in == n and one.funnel.docs_removed > 0 and one.rows > 0

    def timeless(funnel):
        d = funnel.to_dict()
        for step in d["steps"]:
            step.pop("seconds", None)
        return d

    assert timeless(one.funnel) == timeless(two.funnel)
    assert {k: v["sha256"] for k, v in one.files.items()} == {k: v["sha256"] for k, v in two.files.items()}


def test_workers_are_not_started_for_a_single_slice(tmp_path):
    storage = Storage(str(tmp_path))
    io = IOSettings(batch_rows=8192, workers=2)  # the sample's ~0.5 MB: one slice of io.work_bytes (2 MiB)
    _raw(storage, io)
    assert clean_output(storage, "raw", "out", CleaningSettings(), io).workers == 1


def test_batches_are_cut_by_bytes_for_wide_rows(tmp_path):
    storage = Storage(str(tmp_path))
    io = IOSettings(batch_rows=8192, batch_bytes=200_000)
    with TableSink(storage, "wide", DOCUMENTS_SCHEMA, io) as sink:
        sink.write(documents_batch(["w" * 10_000] * 100))  # one row group of 100 rows of ~10 kB: ~1 MB
    source = TableSource(storage, "wide", io)
    rows = [b.num_rows for b in source.batches()]
    assert 10 <= rows[0] <= 20  # ~200 kB a batch, not 100 rows (1 MB) at once
    assert sum(rows) == source.num_rows == 100
