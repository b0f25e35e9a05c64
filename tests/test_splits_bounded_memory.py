"""dataset_splits in memory bounded by its configuration: an output of deduplicated documents larger
than the process's memory limit is split and leak-checked under `setrlimit(RLIMIT_DATA)`.

Before the leak check spilled (splits/leakage.py), it held 4 B per shingle (~0.7 B per byte of text)
and ~2.7 KB per train document in an in-memory LSH index: ~780 MB for this input, over the limit.
"""

import numpy as np
import pytest
from limited_stage_runs import documents_batch, random_sentences, run_under_limit

from platform_assets.contracts import IOSettings
from platform_assets.parquet_parts import TableSink
from platform_assets.schema import DOCUMENTS_SCHEMA
from platform_assets.storage import Storage

pytestmark = pytest.mark.slow

LIMIT = 768 * 2**20
INPUT_BYTES = 900 * 2**20  # of text, larger than the limit

STAGE = """
from platform_assets.splits.stage import check_split_leakage, split_outputs
r = split_outputs(storage, "dedup", "splits", cfg.splits, cfg.io, cfg.statistics)
leaks = check_split_leakage(storage, "splits", cfg.dedup, cfg.splits, cfg.io)
out = {"rows": r.rows, "counts": r.counts, "leak_ok": leaks.ok, "checked": leaks.counts["documents"]}
"""


def _write_documents(storage: Storage, io: IOSettings) -> tuple[int, int]:
    """Distinct documents of ~8 KB: 400 sentences each drawn from 4,096 random 20-word sentences, so
    two documents share ~5% of their shingles (no near duplicates, few LSH candidates). Returns
    (documents, text bytes)."""
    rng = np.random.default_rng(0)
    sentences = random_sentences(rng)
    docs = text_bytes = 0
    with TableSink(storage, "dedup", DOCUMENTS_SCHEMA, io) as sink:
        while text_bytes < INPUT_BYTES:
            picks = rng.integers(0, len(sentences), (1024, 60))
            texts = ["".join(row) for row in sentences[picks]]
            sink.write(documents_batch(docs, texts))
            docs += len(texts)
            text_bytes += sum(len(t) for t in texts)
    return docs, text_bytes


def test_split_and_leak_check_an_input_larger_than_the_memory_limit(tmp_path):
    io = {"batch_bytes": 8 * 2**20}  # the write pass holds ~2 batches; the check reads io.work_bytes
    docs, text_bytes = _write_documents(Storage(str(tmp_path / "out")), IOSettings(**io))
    assert text_bytes > LIMIT
    out = run_under_limit(STAGE, LIMIT, {"storage": {"root": str(tmp_path / "out")}, "sources": [], "io": io},
                          tmp_path)
    assert out["rows"] == out["checked"] == docs == sum(out["counts"].values())
    assert out["counts"]["validation"] > 0 and out["counts"]["test"] > 0
    assert out["leak_ok"], out
    assert out["peak_rss"] < LIMIT, out  # resident memory stayed under the limit too
