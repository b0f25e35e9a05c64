"""dataset_splits in memory bounded by its configuration: an output of deduplicated documents larger
than the process's memory limit is split and leak-checked under `setrlimit(RLIMIT_DATA)`.

Before the leak check spilled (splits/leakage.py), it held 4 B per shingle (~0.7 B per byte of text)
and ~2.7 KB per train document in an in-memory LSH index: ~780 MB for this input, over the limit.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import yaml

from platform_assets.contracts import IOSettings
from platform_assets.parquet_parts import TableSink
from platform_assets.schema import DOCUMENTS_SCHEMA
from platform_assets.storage import Storage

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
LIMIT = 768 * 2**20
INPUT_BYTES = 900 * 2**20  # of text, larger than the limit

STAGE = """
import json, resource, sys
resource.setrlimit(resource.RLIMIT_DATA, ({limit}, {limit}))
from platform_assets.config import load_config
from platform_assets.storage import Storage
from platform_assets.splits.stage import check_split_leakage, split_outputs
cfg = load_config(sys.argv[1])
storage = Storage(cfg.storage_root)
r = split_outputs(storage, "dedup", "splits", cfg.splits, cfg.io, cfg.statistics)
leaks = check_split_leakage(storage, "splits", cfg.dedup, cfg.splits, cfg.io)
out = {{"rows": r.rows, "counts": r.counts, "leak_ok": leaks.ok, "checked": leaks.counts["documents"]}}
# VmHWM, not ru_maxrss (Linux carries ru_maxrss across exec from the pytest process)
hwm = next(line for line in open("/proc/self/status") if line.startswith("VmHWM:"))
out["peak_rss"] = int(hwm.split()[1]) * 1024
print(json.dumps(out))
"""


def _write_documents(storage: Storage, io: IOSettings) -> tuple[int, int]:
    """Distinct documents of ~8 KB: 400 sentences each drawn from 4,096 random 20-word sentences, so
    two documents share ~5% of their shingles (no near duplicates, few LSH candidates). Returns
    (documents, text bytes)."""
    rng = np.random.default_rng(0)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    vocab = ["".join(rng.choice(letters, n)) for n in rng.integers(3, 10, 20_000).tolist()]
    sentences = np.array([" ".join(rng.choice(vocab, 20)) + ". " for _ in range(4096)], dtype=object)
    docs = text_bytes = 0
    with TableSink(storage, "dedup", DOCUMENTS_SCHEMA, io) as sink:
        while text_bytes < INPUT_BYTES:
            picks = rng.integers(0, len(sentences), (1024, 60))
            texts = ["".join(row) for row in sentences[picks]]
            n = len(texts)
            sink.write(pa.RecordBatch.from_pydict({
                "id": [f"doc-{docs + i}" for i in range(n)], "source": ["big"] * n, "text": texts,
                "modality": ["text"] * n, "uri": ["u"] * n, "license": [None] * n, "meta": [None] * n,
                "ingested_at": [None] * n, "media": [None] * n}, schema=DOCUMENTS_SCHEMA))
            docs += n
            text_bytes += sum(len(t) for t in texts)
    return docs, text_bytes


def test_split_and_leak_check_an_input_larger_than_the_memory_limit(tmp_path):
    io = {"batch_bytes": 8 * 2**20}  # the write pass holds ~2 batches; the check reads io.work_bytes
    docs, text_bytes = _write_documents(Storage(str(tmp_path / "out")), IOSettings(**io))
    assert text_bytes > LIMIT
    config = {"storage": {"root": str(tmp_path / "out")}, "sources": [], "io": io}
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(config))
    # as tests/test_bounded_memory.py: RLIMIT_DATA counts reserved address space, so the system
    # allocator with two arenas makes it measure what is used
    env = {**os.environ, "MALLOC_ARENA_MAX": "2", "ARROW_DEFAULT_MEMORY_POOL": "system"}
    res = subprocess.run([sys.executable, "-c", STAGE.format(limit=LIMIT), str(tmp_path / "p.yaml")],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["rows"] == out["checked"] == docs == sum(out["counts"].values())
    assert out["counts"]["validation"] > 0 and out["counts"]["test"] > 0
    assert out["leak_ok"], out
    assert out["peak_rss"] < LIMIT, out  # resident memory stayed under the limit too
