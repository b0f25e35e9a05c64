"""Collation: exact labels, positions, segment ids and cu_seqlens on hand-made samples (segments,
padding, a loss mask), the same rules on random samples against a per-token reference, and padded
collation with length bucketing."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from loader_runs import take
from shard_fixtures import FixtureSample, build_sets, write_flat

from training.data import LoaderConfig, PackedLoader
from training.data.batch_transfer import pack, unpack
from training.data.collate import IGNORE_INDEX, collate_packed, collate_padded
from training.data.length_buckets import BUCKET_WINDOW_STEPS
from training.data.shard_reader import SampleBatch

X = IGNORE_INDEX
PAD = 0


def _batch(rows: list[list[list[int]]], width: int, masks: list[list[int]] | None = None) -> SampleBatch:
    tokens = np.full((len(rows), width), PAD, np.int64)
    mask = np.zeros((len(rows), width), np.uint8) if masks is not None else None
    for r, segs in enumerate(rows):
        flat = [t for s in segs for t in s]
        tokens[r, : len(flat)] = flat
        if mask is not None:
            mask[r, : len(masks[r])] = masks[r]
    segs = [np.array([len(s) for s in segs], np.int32) for segs in rows]
    return SampleBatch.from_segments(tokens, mask, segs, np.arange(len(rows), dtype=np.int64))


# row 0: three segments (3 + 2 + 4 tokens) then 3 padding positions; row 1: one segment filling the row
ROWS = [[[5, 6, 7], [8, 9], [10, 11, 12, 13]], [list(range(20, 32))]]


def test_packed_collate_three_segments_and_padding():
    out = collate_packed(_batch(ROWS, 12))
    assert out["input_ids"].tolist() == [[5, 6, 7, 8, 9, 10, 11, 12, 13, PAD, PAD, PAD], list(range(20, 32))]
    assert out["labels"].tolist() == [[6, 7, X, 9, X, 11, 12, 13, X, X, X, X], list(range(21, 32)) + [X]]
    assert out["position_ids"].tolist() == [[0, 1, 2, 0, 1, 0, 1, 2, 3, 0, 0, 0], list(range(12))]
    assert out["segment_ids"].tolist() == [[1, 1, 1, 2, 2, 3, 3, 3, 3, 0, 0, 0], [1] * 12]
    assert out["cu_seqlens"].tolist() == [0, 3, 5, 9, 21]
    assert out["max_seqlen"] == 12
    assert out["num_tokens"].item() == 21 and out["num_loss_tokens"].item() == 6 + 11
    dtypes = {k: v.dtype for k, v in out.items() if isinstance(v, torch.Tensor)}
    assert dtypes == {"input_ids": torch.int64, "labels": torch.int64, "position_ids": torch.int64,
                      "segment_ids": torch.int32, "cu_seqlens": torch.int32, "sample_ids": torch.int64,
                      "num_tokens": torch.int64, "num_loss_tokens": torch.int64}
    assert out["num_tokens"].dim() == 0 and out["num_loss_tokens"].dim() == 0
    # cu_seqlens index the non-padding tokens, row-major
    flat = out["input_ids"][out["segment_ids"] > 0]
    cu = out["cu_seqlens"].tolist()
    assert [flat[a:b].tolist() for a, b in zip(cu[:-1], cu[1:], strict=True)] == [s for r in ROWS for s in r]


def test_packed_collate_rows_without_padding():
    # every row full (the usual packed case takes a shortcut: no per-row placement)
    out = collate_packed(_batch([[[1, 2, 3], [4, 5]], [[6, 7, 8, 9, 10]]], 5))
    assert out["labels"].tolist() == [[2, 3, X, 5, X], [7, 8, 9, 10, X]]
    assert out["position_ids"].tolist() == [[0, 1, 2, 0, 1], [0, 1, 2, 3, 4]]
    assert out["segment_ids"].tolist() == [[1, 1, 1, 2, 2], [1, 1, 1, 1, 1]]
    assert out["cu_seqlens"].tolist() == [0, 3, 5, 10] and out["num_loss_tokens"].item() == 7


def test_packed_collate_with_a_loss_mask():
    # row 0: prompt/answer per segment; the label at t exists only where mask[t+1] == 1
    masks = [[1, 0, 1, 0, 1, 1, 1, 0, 1], [0] * 6 + [1] * 6]
    out = collate_packed(_batch(ROWS, 12, masks))
    assert out["labels"].tolist() == [[X, 7, X, 9, X, 11, X, 13, X, X, X, X],
                                      [X] * 5 + list(range(26, 32)) + [X]]
    assert out["num_loss_tokens"].item() == 4 + 6
    assert out["position_ids"].tolist()[0] == [0, 1, 2, 0, 1, 0, 1, 2, 3, 0, 0, 0]  # the mask moves no segment


def test_padded_collate_trims_to_the_longest_row():
    rows = [[[5, 6, 7, 8, 9]], [[20, 21, 22, 23, 24, 25, 26, 27]], [[30, 31]]]
    out = collate_padded(_batch(rows, 8))
    assert out["input_ids"].tolist() == [[5, 6, 7, 8, 9, 0, 0, 0], list(range(20, 28)), [30, 31] + [0] * 6]
    assert out["attention_mask"].tolist() == [[1] * 5 + [0] * 3, [1] * 8, [1, 1] + [0] * 6]
    assert out["labels"].tolist() == [[6, 7, 8, 9, X, X, X, X], list(range(21, 28)) + [X], [31] + [X] * 7]
    assert out["position_ids"].tolist() == [[0, 1, 2, 3, 4, 0, 0, 0], list(range(8)), [0, 1] + [0] * 6]
    assert out["cu_seqlens"].tolist() == [0, 5, 13, 15] and out["max_seqlen"] == 8


def test_segments_longer_than_the_row_are_refused():
    batch = _batch([[[1, 2, 3]]], 3)
    bad = SampleBatch.from_segments(batch.tokens, None, [np.array([4], np.int32)], np.array([77], np.int64))
    with pytest.raises(ValueError, match="sample 77: segments hold 4 tokens, more than the row's 3 positions"):
        collate_packed(bad)


def test_transfer_buffer_round_trip_keeps_keys_values_and_dtypes():
    batches = [collate_packed(_batch(ROWS, 12, [[1] * 9, [1] * 12])),
               collate_padded(_batch([[[5, 6, 7]], [[8, 9]]], 3))]
    message = pack(batches)
    assert message.buffer.is_shared()  # allocated in shared memory: the send does not copy it again
    back = unpack(message)
    assert len(back) == 2
    for got, want in zip(back, batches, strict=True):
        assert list(got) == list(want)
        for k, v in want.items():
            if isinstance(v, torch.Tensor):
                assert got[k].dtype == v.dtype and got[k].shape == v.shape and torch.equal(got[k], v), k
                assert got[k].untyped_storage().data_ptr() == message.buffer.untyped_storage().data_ptr()  # views
            else:
                assert got[k] == v


# -- the loader end to end against a per-token reference --------------------------------------------------
def _reference_row(sample: FixtureSample, seq_len: int) -> tuple[list[int], list[int], list[int], list[int]]:
    tokens, labels, positions, segments = [], [], [], []
    mask = list(sample.tokens * 0 + 1) if sample.mask is None else sample.mask.tolist()
    k = 0
    for n, seg in enumerate(sample.segments, start=1):
        for p, tok in enumerate(seg.tolist()):
            tokens.append(tok)
            nxt_ok = p + 1 < len(seg) and mask[k + 1] == 1
            labels.append(int(seg[p + 1]) if nxt_ok else X)
            positions.append(p)
            segments.append(n)
            k += 1
    pad = seq_len - len(tokens)
    return tokens + [PAD] * pad, labels + [X] * pad, positions + [0] * pad, segments + [0] * pad


@pytest.mark.parametrize("num_workers", [0, 2])
def test_loader_batches_match_the_written_samples(tmp_path, num_workers):
    shards = build_sets(tmp_path, {"a": [9, 7], "b": [12]}, seq_len=20, seed=3, with_mask=True)
    loader = PackedLoader(LoaderConfig(str(shards.flat), global_batch_size=4, micro_batch_size=2,
                                       num_workers=num_workers))
    seen = 0
    for batch in take(loader):
        for r, sid in enumerate(batch["sample_ids"].tolist()):
            tokens, labels, positions, segments = _reference_row(shards.samples[sid], 20)
            assert batch["input_ids"][r].tolist() == tokens
            assert batch["labels"][r].tolist() == labels
            assert batch["position_ids"][r].tolist() == positions
            assert batch["segment_ids"][r].tolist() == segments
            seen += 1
        assert batch["num_loss_tokens"].item() == int((batch["labels"] != X).sum())
        assert batch["num_tokens"].item() == int((batch["segment_ids"] > 0).sum()) == batch["cu_seqlens"][-1]
    assert seen == 28


def test_padded_loader_buckets_lengths_within_windows(tmp_path):
    shards = build_sets(tmp_path, {"a": [70], "b": [50]}, seq_len=64, seed=8, one_segment=True)
    gb = 4
    loader = PackedLoader(LoaderConfig(str(shards.flat), global_batch_size=gb, micro_batch_size=2, collate="padded"))
    batches = take(loader)
    lengths = [[len(shards.samples[s].tokens) for s in b["sample_ids"].tolist()] for b in batches]
    assert all(b["input_ids"].shape[1] == max(ls) for b, ls in zip(batches, lengths, strict=True))
    steps = [lengths[i] + lengths[i + 1] for i in range(0, len(lengths), 2)]
    window = BUCKET_WINDOW_STEPS
    for w in range(0, len(steps), window):  # each step is a run of neighbours in its window's length order:
        in_window = steps[w: w + window]  # the length ranges of two steps never interleave
        for i, a in enumerate(in_window):
            for b in in_window[i + 1:]:
                assert max(a) <= min(b) or max(b) <= min(a), (a, b)
    orders = [[min(s) for s in steps[w: w + window]] for w in range(0, len(steps), window)]
    assert any(o != sorted(o) for o in orders)  # steps are shuffled within windows: no short-to-long ramp
    assert sorted(s for b in batches for s in b["sample_ids"].tolist()) == sorted(shards.samples)


def test_padded_collate_refuses_packed_samples(tmp_path):
    rows = [FixtureSample((np.array([5, 6]), np.array([7, 8, 9])))]
    flat = write_flat(tmp_path, {("train", "a"): [rows]}, seq_len=8)
    with pytest.raises(ValueError, match="sample 0 has 2 segments; collate='padded' needs one document per sample"):
        PackedLoader(LoaderConfig(str(flat), global_batch_size=1, collate="padded"))
