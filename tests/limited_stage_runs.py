"""What the setrlimit tests of single stages share (test_dedup_bounded_memory, test_splits_bounded_memory):
distinct documents made of random sentences, written as documents-schema batches, and a stage's script run
in a child process under RLIMIT_DATA that reports its peak resident memory."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import yaml

from platform_assets.schema import DOCUMENTS_SCHEMA

REPO = Path(__file__).resolve().parents[1]

_HEAD = """
import json, resource, sys
resource.setrlimit(resource.RLIMIT_DATA, ({limit}, {limit}))
from platform_assets.config import load_config
from platform_assets.storage import Storage
cfg = load_config(sys.argv[1])
storage = Storage(cfg.storage_root)
"""
_TAIL = """
# VmHWM, not ru_maxrss (Linux carries ru_maxrss across exec from the pytest process)
hwm = next(line for line in open("/proc/self/status") if line.startswith("VmHWM:"))
out["peak_rss"] = int(hwm.split()[1]) * 1024
print(json.dumps(out))
"""


def random_sentences(rng: np.random.Generator) -> np.ndarray:
    """4,096 sentences of 20 random words (3-9 letters, from a vocabulary of 20,000): documents of 60
    sentences drawn from them share ~1 sentence, far from near duplicates."""
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    vocab = ["".join(rng.choice(letters, n)) for n in rng.integers(3, 10, 20_000).tolist()]
    return np.array([" ".join(rng.choice(vocab, 20)) + ". " for _ in range(4096)], dtype=object)


def documents_batch(first_id: int, texts: list[str]) -> pa.RecordBatch:
    """`texts` as documents of source `big`, ids doc-<first_id>, doc-<first_id + 1>, ..."""
    n = len(texts)
    return pa.RecordBatch.from_pydict({
        "id": [f"doc-{first_id + i}" for i in range(n)], "source": ["big"] * n, "text": texts,
        "modality": ["text"] * n, "uri": ["u"] * n, "license": [None] * n, "meta": [None] * n,
        "ingested_at": [None] * n, "media": [None] * n}, schema=DOCUMENTS_SCHEMA)


def run_under_limit(body: str, limit: int, config: dict[str, Any], tmp_path: Path) -> dict[str, Any]:
    """Run `body` (with `cfg` and `storage` of `config` in scope; it sets `out`, a dict) in a child whose
    RLIMIT_DATA is `limit`; returns `out` with the child's `peak_rss`. As tests/test_bounded_memory.py:
    RLIMIT_DATA counts reserved address space, so the system allocator with two arenas makes it measure
    what is used."""
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(config))
    env = {**os.environ, "MALLOC_ARENA_MAX": "2", "ARROW_DEFAULT_MEMORY_POOL": "system"}
    script = _HEAD.format(limit=limit) + body + _TAIL
    res = subprocess.run([sys.executable, "-c", script, str(tmp_path / "p.yaml")], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout.strip().splitlines()[-1])
