"""tokenized_documents in memory bounded by its configuration: what the Rust tokenizer holds is bounded by
`tokenize.encode_slice_bytes` (two slices in flight), not by the batch or by how token-dense the text is.

The input is the densest text a byte-level BPE meets: 24 MiB of random letters and digits under a
300-token vocabulary (~0.97 tokens per byte; English under GPT-2 is ~0.25), read in 8 MiB batches.
Its Encoding objects live per token, so the slice bound is what holds the stage's memory: under
`setrlimit(RLIMIT_DATA)` of 464 MiB the default 1 MiB slices pass (they needed 352-416 MiB when
measured), and the previous default of 4 MiB is refused an allocation (it needed more than 512 MiB;
its peak RSS without a limit was 481-487 MB against 340-356 MB). That is tokenizers' path
(`tokenize.encoder: tokenizers`). tiktoken's (the default for this byte-level BPE, tiktoken_bpe.py)
holds ~36 bytes a token in Python id lists: its 4 MiB slices fit under the same limit (peak 266 MB in
CI) and stay below tokenizers' 1 MiB peak.
"""

import os
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pytest
import yaml
from limited_stage_runs import _HEAD, _TAIL, REPO, run_under_limit

from platform_assets.parquet_parts import PartWriter
from platform_assets.storage import Storage
from platform_assets.tokenize.settings import TokenizerSettings, TokenizeSettings
from platform_assets.tokenize.stage import build_tokenizer

pytestmark = pytest.mark.slow

LIMIT = 464 * 2**20
DOC_BYTES, DOCS = 64 * 1024, 384  # 24 MiB of text: three 8 MiB batches
IO = {"batch_bytes": 8 * 2**20}
SPLITS_SCHEMA = pa.schema([("id", pa.string()), ("source", pa.string()), ("text", pa.large_string()),
                           ("split", pa.string())])

STAGE = """
from platform_assets.tokenize.stage import tokenize_outputs
r = tokenize_outputs(storage, "dataset_splits/_all", "tokenizer/_all", "tokenized/_all", cfg.tokenize, cfg.io)
out = {"documents": r.documents, "tokens": r.tokens, "slice": cfg.tokenize.encode_slice_bytes,
       "encoder": r.encoder}
"""


def _write_inputs(storage: Storage) -> None:
    """The split output (random alphanumeric documents) and a 300-token BPE trained on 1 MiB of it."""
    rng = np.random.default_rng(0)
    alphabet = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz0123456789", np.uint8)
    with storage.staged_dir("dataset_splits/_all") as staged:
        with PartWriter(staged, SPLITS_SCHEMA) as writer:
            for lo in range(0, DOCS, 64):
                texts = [rng.choice(alphabet, DOC_BYTES).tobytes().decode() for _ in range(64)]
                writer.write(pa.RecordBatch.from_pydict(
                    {"id": [f"d{lo + i}" for i in range(64)], "source": ["s"] * 64, "text": texts,
                     "split": ["train"] * 64}, schema=SPLITS_SCHEMA))
    build_tokenizer(storage, "dataset_splits/_all", "tokenizer/_all",
                    TokenizerSettings(vocab_size=300, max_train_bytes=2**20, roundtrip_sample=10))


def test_token_dense_text_is_encoded_within_the_slice_bound(tmp_path):
    storage = Storage(str(tmp_path / "out"))
    _write_inputs(storage)
    config = {"storage": {"root": str(tmp_path / "out")}, "sources": [], "io": IO,
              "tokenize": {"encoder": "tokenizers"}}
    assert TokenizeSettings().encode_slice_bytes == 2**20  # the default is what runs here
    out = run_under_limit(STAGE, LIMIT, config, tmp_path)
    assert out["encoder"] == "tokenizers (encoder: tokenizers)"
    assert out["documents"] == DOCS
    assert out["tokens"] > 0.9 * DOCS * DOC_BYTES  # as dense as intended: ~1 token per byte
    assert out["peak_rss"] < LIMIT, out

    # The same stage with 4 MiB slices does not fit: the limit is what the slice bound holds
    wide = {**config, "tokenize": {"encoder": "tokenizers", "encode_slice_bytes": 4 * 2**20}}
    refused = _run_expecting_failure(wide, tmp_path)
    assert "MemoryError" in refused or "memory" in refused.lower(), refused[-2000:]

    # tiktoken (the default encoder for this tokenizer) holds a third of that per token: 4 MiB slices
    # fit, and peak below tokenizers' 1 MiB slices
    fast = run_under_limit(STAGE, LIMIT, {**config, "tokenize": {"encode_slice_bytes": 4 * 2**20}}, tmp_path)
    assert fast["encoder"] == "tiktoken"
    assert (fast["documents"], fast["tokens"]) == (out["documents"], out["tokens"])
    assert fast["peak_rss"] < out["peak_rss"], (fast, out)


def _run_expecting_failure(config: dict, tmp_path) -> str:
    """run_under_limit's child, which must fail here: its stderr."""
    (tmp_path / "wide.yaml").write_text(yaml.safe_dump(config))
    env = {**os.environ, "MALLOC_ARENA_MAX": "2", "ARROW_DEFAULT_MEMORY_POOL": "system"}
    script = _HEAD.format(limit=LIMIT) + STAGE + _TAIL
    res = subprocess.run([sys.executable, "-c", script, str(tmp_path / "wide.yaml")], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=900)
    assert res.returncode != 0, res.stdout[-2000:]
    return res.stderr
