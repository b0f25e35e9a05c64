"""The packing passes read token lists in batches bounded by tokens (packing/token_batches.py): a run
of long documents in a set of short ones is read in fewer rows a batch, so the largest batch, which
sets the stage's peak, no longer grows with how many batches an input has (issue #13)."""

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from platform_assets.packing import offline_pass, streaming_pass
from platform_assets.packing.settings import PackingSettings
from platform_assets.packing.stage import pack_outputs
from platform_assets.packing.token_batches import READ_BATCH_TOKENS, batch_rows_within, part_token_batches
from platform_assets.storage import Storage


def _naive(lengths, max_tokens, max_rows):
    best = 1
    for r in range(1, min(max_rows, len(lengths)) + 1):
        if max(sum(lengths[i:i + r]) for i in range(len(lengths) - r + 1)) <= max_tokens:
            best = r
    return best


def test_batch_rows_keep_every_run_of_rows_within_the_tokens():
    assert batch_rows_within(np.array([10] * 50), 100, 8192) == 10
    assert batch_rows_within(np.array([10] * 50), 10_000, 20) == 20  # the row cap
    assert batch_rows_within(np.array([1, 1, 500, 1, 1]), 100, 8192) == 1  # a row over the bound: alone
    assert batch_rows_within(np.array([], np.int64), 100, 64) == 64
    rng = np.random.default_rng(5)
    for _ in range(200):
        lengths = rng.integers(1, 50, rng.integers(1, 40))
        lengths[rng.integers(0, len(lengths))] *= 20
        max_tokens, max_rows = int(rng.integers(1, 400)), int(rng.integers(1, 50))
        assert batch_rows_within(lengths, max_tokens, max_rows) == _naive(lengths.tolist(), max_tokens, max_rows)


def _tokenized(root, lengths: np.ndarray, row_group_rows: int | None = None) -> None:
    part = root / "tokenized" / "train" / "web"
    part.mkdir(parents=True)
    n = len(lengths)
    offsets = np.concatenate(([0], np.cumsum(lengths))).astype(np.int32)
    values = np.random.default_rng(0).integers(0, 50256, int(offsets[-1]), dtype=np.int32)
    pq.write_table(pa.table({
        "id": [f"web-{i}" for i in range(n)], "source": ["web"] * n, "split": ["train"] * n,
        "chunk": pa.array(np.zeros(n, np.int32)),
        "input_ids": pa.ListArray.from_arrays(pa.array(offsets), pa.array(values)),
        "num_tokens": pa.array(lengths.astype(np.int32)), "loss_tokens": pa.array(lengths.astype(np.int32))}),
        part / "part-00000.parquet", row_group_size=row_group_rows)


def test_part_batches_are_bounded_by_tokens_and_give_every_row_in_order(tmp_path):
    lengths = np.array([5] * 300 + [400] * 7 + [5] * 300)
    _tokenized(tmp_path, lengths, row_group_rows=250)
    storage = Storage(str(tmp_path))
    path = storage.path("tokenized/train/web/part-00000.parquet")
    batches = list(part_token_batches(storage, path, ["id", "input_ids"], max_rows=8192, max_tokens=1000))
    assert [i for b in batches for i in b.column("id").to_pylist()] == [f"web-{i}" for i in range(len(lengths))]
    tokens = [int(pa.compute.sum(pa.compute.list_value_length(b.column("input_ids"))).as_py()) for b in batches]
    assert max(tokens) <= 1000
    assert max(b.num_rows for b in batches) == 200  # the short rows' row groups still read in large batches


@pytest.mark.parametrize("strategy", ["best_fit_decreasing", "streaming_best_fit"])
def test_a_run_of_long_documents_is_read_within_the_batch_tokens(tmp_path, monkeypatch, strategy):
    # 4,000 rows of 100 tokens around 300 of 8,000: rows per batch from the input's average row (1 Mi
    # tokens' worth: ~1,600 rows) put the whole long run, 2.4 M tokens, in one batch
    lengths = np.array([100] * 2000 + [8000] * 300 + [100] * 2000)
    _tokenized(tmp_path, lengths)
    module = streaming_pass if strategy == "streaming_best_fit" else offline_pass
    seen: list[int] = []
    real = module.flatten

    def flatten(input_ids, *args, **kwargs):
        seen.append(len(pa.compute.list_flatten(input_ids)))
        return real(input_ids, *args, **kwargs)

    monkeypatch.setattr(module, "flatten", flatten)
    tokenizer = {"vocab_size": 50257, "pad_id": None, "eos_id": 50256, "bos_id": None, "name": "gpt2",
                 "sha256": "5" * 64}
    settings = PackingSettings(seq_len=2048, formats=("flat",), strategy=strategy, overlong="split")
    result = pack_outputs(Storage(str(tmp_path)), "tokenized", "packed", settings, tokenizer)
    assert result.tokens_in == int(lengths.sum()) == result.totals.tokens
    assert sum(seen) == int(lengths.sum()) and max(seen) <= READ_BATCH_TOKENS, max(seen)
