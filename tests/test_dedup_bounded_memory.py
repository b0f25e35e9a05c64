"""deduplicated_documents in memory bounded by its configuration: cleaned documents with more text
than the process's memory limit are deduplicated under `setrlimit(RLIMIT_DATA)` in 16 MiB batches
(`io.batch_bytes`: what one batch costs is bounded by it, not by the input), with planted exact
and near duplicates that must all be found.

With `dedup.malloc_mmap_threshold: null` (glibc's dynamic threshold, platform_assets/heap.py) this input fails
under the limit (a 32 MB malloc refused). The batch is keyed and shingled in `dedup.slice_bytes`
slices (dedup/batch_slices.py); what grows
with the input is ~600 B per document (id, source, text hash, the 512 B signature) and the band
keys, which go to bucket files (`near.storage.type: disk`).
"""

import numpy as np
import pytest
from limited_stage_runs import documents_batch, random_sentences, run_under_limit

from platform_assets.contracts import IOSettings
from platform_assets.parquet_parts import TableSink
from platform_assets.schema import DOCUMENTS_SCHEMA
from platform_assets.storage import Storage

pytestmark = pytest.mark.slow

LIMIT = 640 * 2**20
INPUT_BYTES = 700 * 2**20  # of text, larger than the limit
EXACT_EVERY, NEAR_EVERY = 50, 97  # a verbatim copy of every 50th document, an edited one of every 97th

STAGE = """
from platform_assets.dedup.stage import deduplicate_outputs
r = deduplicate_outputs(storage, ["cleaned/big"], "dedup", cfg.dedup, cfg.io)
c = r.result.counts
out = {"rows_in": r.rows_in, "rows": r.rows, "exact": c.removed_exact, "near": c.removed_near}
"""


def _write_documents(storage: Storage, io: IOSettings) -> tuple[int, int, int, int]:
    """Distinct ~8 KB documents of 60 sentences drawn from 4,096 random 20-word ones (two share ~1
    sentence: no near duplicates among them), plus planted copies. Returns (documents, text bytes,
    exact copies, near copies); a near copy has 2 of its 60 sentences replaced (Jaccard ~0.93)."""
    rng = np.random.default_rng(0)
    sentences = random_sentences(rng)
    docs = text_bytes = exact = near = 0
    with TableSink(storage, "cleaned/big", DOCUMENTS_SCHEMA, io) as sink:
        while text_bytes < INPUT_BYTES:
            picks = rng.integers(0, len(sentences), (1024, 60))
            texts = ["".join(row) for row in sentences[picks]]
            for i in range(0, 1024, EXACT_EVERY):
                texts.append(texts[i])
                exact += 1
            for i in range(0, 1024, NEAR_EVERY):
                edited = picks[i].copy()
                edited[[5, 40]] = rng.integers(0, len(sentences), 2)
                texts.append("".join(sentences[edited]))
                near += 1
            sink.write(documents_batch(docs, texts))
            docs += len(texts)
            text_bytes += sum(len(t) for t in texts)
    return docs, text_bytes, exact, near


def test_dedup_an_input_larger_than_the_memory_limit(tmp_path):
    # before heap.py, at the default 64 MiB the first pass's Parquet reader failed a 64 MB malloc at 512 MiB
    io = {"batch_bytes": 16 * 2**20}
    docs, text_bytes, exact, near = _write_documents(Storage(str(tmp_path / "out")), IOSettings(**io))
    assert text_bytes > LIMIT
    out = run_under_limit(STAGE, LIMIT, {"storage": {"root": str(tmp_path / "out")}, "sources": [], "io": io},
                          tmp_path)
    assert out["rows_in"] == docs
    assert (out["exact"], out["near"]) == (exact, near), out  # every planted copy, nothing else
    assert out["rows"] == docs - exact - near
    assert out["peak_rss"] < LIMIT, out  # resident memory stayed under the limit too
