"""Offline packing (best_fit_decreasing) keeps memory bounded by its configuration, not by a set's
size: a tokenized_documents input whose token ids alone are larger than the process's memory limit is
packed under `setrlimit(RLIMIT_DATA)`, its sets spilled (packing/token_store.py). Before the spill the
pass held every token of a set in memory (4 bytes each), which this input cannot fit.

RLIMIT_DATA as in tests/test_bounded_memory.py: it caps heap and anonymous maps (what held tokens
grow), not the page cache the spill files sit in."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
LIMIT = 384 * 2**20
WEB_TOKENS = 110_000_000  # 440 MB of int32 ids: more than the limit (403 MB) by itself
CHAT_TOKENS = 6_000_000  # a set with loss masks (spilled with its mask file)
VOCAB, EOS = 50257, 50256

STAGE = """
import json, resource, sys
resource.setrlimit(resource.RLIMIT_DATA, ({limit}, {limit}))
from platform_assets.contracts import IOSettings
from platform_assets.packing.settings import PackingSettings
from platform_assets.packing.shard_index import verify_shards
from platform_assets.packing.stage import pack_outputs
from platform_assets.storage import Storage
root, io_batch_bytes = sys.argv[1], int(sys.argv[2])
tokenizer = {{"vocab_size": {vocab}, "pad_id": None, "eos_id": {eos}, "bos_id": None, "name": "gpt2",
             "sha256": "5" * 64}}
settings = PackingSettings(formats=("flat",), spill_dir=root + "/spill")
r = pack_outputs(Storage(root), "tokenized", "packed", settings, tokenizer, IOSettings(batch_bytes=io_batch_bytes))
storage = Storage(root)
hwm = next(line for line in open("/proc/self/status") if line.startswith("VmHWM:"))
print(json.dumps({{"tokens_in": r.tokens_in, "packed": sum(s.tokens for s in r.sets),
                  "loss_tokens": sum(s.loss_tokens for s in r.sets), "sequences": r.totals.sequences,
                  "efficiency": r.totals.efficiency, "problems": verify_shards(storage.path("packed/flat")),
                  "peak_rss": int(hwm.split()[1]) * 1024}}))
"""


def _write_set(root: Path, split: str, source: str, tokens: int, masks: bool, seed: int) -> tuple[int, int]:
    """Documents of 1..12,000 tokens (a tenth over 2048: split) in parts of ~4 M tokens, written a
    part at a time. Returns (tokens, loss tokens)."""
    rng = np.random.default_rng(seed)
    out = root / "tokenized" / split / source
    out.mkdir(parents=True)
    written = loss = part = 0
    while written < tokens:
        remaining = tokens - written
        lengths = rng.integers(1, 2048, 2000)
        lengths[rng.random(lengths.size) < 0.1] += 10_000
        if lengths.sum() >= remaining:  # the last part: up to the exact total
            lengths = lengths[np.cumsum(lengths) < remaining]
            lengths = np.append(lengths, remaining - int(lengths.sum()))
        offsets = np.concatenate(([0], np.cumsum(lengths))).astype(np.int32)
        values = rng.integers(0, EOS, int(offsets[-1]), dtype=np.int32)
        values[offsets[1:] - 1] = EOS
        n = lengths.size
        ids = pa.array([f"{source}-{part}-{i}" for i in range(n)], pa.string())
        columns = {"id": ids, "source": pa.array([source] * n), "split": pa.array([split] * n),
                   "chunk": pa.array(np.zeros(n, np.int32)),
                   "input_ids": pa.ListArray.from_arrays(pa.array(offsets), pa.array(values))}
        if masks:
            mask = (rng.random(values.size) < 0.5).astype(np.uint8)
            columns["loss_mask"] = pa.ListArray.from_arrays(pa.array(offsets), pa.array(mask))
            loss_per_doc = np.add.reduceat(mask, offsets[:-1], dtype=np.int64)
        else:
            columns["loss_mask"] = pa.nulls(n, pa.list_(pa.uint8()))
            loss_per_doc = lengths
        columns["num_tokens"] = pa.array(lengths.astype(np.int32))
        columns["loss_tokens"] = pa.array(loss_per_doc.astype(np.int32))
        pq.write_table(pa.table(columns), out / f"part-{part:05d}.parquet", row_group_size=2000)
        written += int(offsets[-1])
        loss += int(loss_per_doc.sum())
        part += 1
    return written, loss


def test_best_fit_decreasing_packs_a_set_larger_than_the_memory_limit(tmp_path):
    web = _write_set(tmp_path, "train", "web", WEB_TOKENS, masks=False, seed=1)
    chat = _write_set(tmp_path, "train", "chat", CHAT_TOKENS, masks=True, seed=2)
    assert web[0] == WEB_TOKENS and 4 * WEB_TOKENS > LIMIT
    # RLIMIT_DATA counts reserved address space: the system allocator with two arenas makes it measure
    # what is used (tests/test_bounded_memory.py)
    env = {**os.environ, "MALLOC_ARENA_MAX": "2", "ARROW_DEFAULT_MEMORY_POOL": "system"}

    def run(io_batch_bytes: int) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-c", STAGE.format(limit=LIMIT, vocab=VOCAB, eos=EOS), str(tmp_path),
                               str(io_batch_bytes)], cwd=REPO, env=env, capture_output=True, text=True, timeout=900)

    res = run(64 * 2**20)  # the default io batch: sets over 4 Mi tokens are spilled
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["tokens_in"] == out["packed"] == web[0] + chat[0]
    assert out["loss_tokens"] == web[1] + chat[1]
    assert out["problems"] == []
    assert out["efficiency"] > 0.99  # best-fit decreasing, as in memory (the layout comes from lengths only)
    assert out["peak_rss"] < LIMIT
    assert not list((tmp_path / "spill").iterdir())  # the spill files went with the stage
    # the same input held in memory (an io batch large enough to hold the set) does not fit the limit
    held = run(2**33)
    assert held.returncode != 0 and "MemoryError" in held.stderr, held.stderr[-3000:]
