"""Collation of raw samples into model inputs, vectorised over the whole micro-batch.

"packed": rows of exactly seq_len; "padded": one document per row, every row cut to the longest in the
batch (rounded up to `pad_to_multiple_of` when the loader sets it: padded_width). Both give the same
keys (padded adds `attention_mask`):

- input_ids [B,S] int64: the tokens (pad_id after the last segment);
- labels [B,S] int64: tokens[t+1] when t+1 is in the same segment and its loss_mask is 1 (if the set
  has masks), else IGNORE_INDEX (-100): padding, each segment's last position, prompt targets;
- position_ids [B,S] int64: 0, 1, ... restarting at every segment; 0 on padding;
- segment_ids [B,S] int32: 1..n within each row; 0 on padding;
- cu_seqlens int32 [segments + 1]: segment boundaries in the row-major concatenation of the non-padding
  tokens, i.e. of input_ids[segment_ids > 0] (for varlen attention);
- max_seqlen: python int, the longest segment (0 for an empty batch);
- sample_ids int64 [B]: source index << 40 | index within that source's set;
- num_tokens, num_loss_tokens: 0-d int64: non-padding tokens, labels != -100.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import torch

from training.data.shard_reader import SampleBatch

IGNORE_INDEX = -100  # torch.nn.functional.cross_entropy's default ignore_index
COLLATES = ("packed", "padded")


_arange = np.arange(0, dtype=np.int64)


def _positions(n: int) -> np.ndarray:
    """0..n-1 from one growing buffer (read-only use): saves an arange per batch."""
    global _arange
    if len(_arange) < n:
        _arange = np.arange(max(n, 2 * len(_arange)), dtype=np.int64)
    return _arange[:n]


def _to_rows(concat: np.ndarray, lengths: list[int], n_tokens: int, width: int) -> np.ndarray:
    """[rows, width] from the row-major concatenation of each row's first lengths[r] values; 0 after."""
    rows = len(lengths)
    if n_tokens == rows * width:  # no padding anywhere (the common packed case): a view
        return concat.reshape(rows, width)
    out = np.zeros((rows, width), dtype=concat.dtype)
    a = 0
    for r, n in enumerate(lengths):
        out[r, :n] = concat[a: a + n]
        a += n
    return out


def _segment_arrays(batch: SampleBatch) -> dict[str, Any]:
    tokens = batch.tokens
    rows, width = tokens.shape
    lens, seg_row, row_len = batch.seqlens, batch.segment_rows, batch.lengths
    lengths = row_len.tolist()
    if rows and max(lengths) > width:
        r = lengths.index(max(lengths))
        raise ValueError(f"sample {int(batch.sample_ids[r])}: segments hold {lengths[r]} tokens, "
                         f"more than the row's {width} positions")
    # Segments lie end to end from position 0 of their row, so the rows' tokens concatenated are the
    # segments concatenated. Per-token arrays are built over that concatenation with np.repeat, a fill
    # at memory speed (~5 us for [8, 2048]; a cumsum or maximum.accumulate scan over it takes ~60 us),
    # and laid into rows by slices.
    n_tokens = sum(lengths)
    ends = np.cumsum(lens)
    starts = ends - lens  # of each segment in the concatenation
    first_seg = np.cumsum(batch.segments) - batch.segments  # index of each row's first segment
    seg_no = (_positions(len(lens)) - first_seg[seg_row] + 1).astype(np.int32)  # 1..n within the row
    segment_ids = _to_rows(np.repeat(seg_no, lens), lengths, n_tokens, width)
    offsets = np.repeat(-starts, lens)  # minus the start of each token's segment
    offsets += _positions(n_tokens)  # in place: one fresh [B, S] array instead of two
    position_ids = _to_rows(offsets, lengths, n_tokens, width)
    labels = np.empty((rows, width), dtype=np.int64)
    labels[:, :-1] = tokens[:, 1:]
    labels[:, -1] = IGNORE_INDEX
    # a segment's last token predicts nothing. Its row-major index: its index in the concatenation
    # (ends - 1), shifted by the padding of the rows before it (none in the common packed case)
    last = ends - 1
    if n_tokens < rows * width:
        last += (_positions(rows) * width - (np.cumsum(row_len) - row_len))[seg_row]
    labels.reshape(-1)[last] = IGNORE_INDEX
    if batch.mask is not None:
        np.copyto(labels[:, :-1], IGNORE_INDEX, where=batch.mask[:, 1:] == 0)
    for r, n in enumerate(lengths):
        if n < width:
            labels[r, n:] = IGNORE_INDEX
    # without a mask every token but each segment's last has a label
    n_loss = n_tokens - len(lens) if batch.mask is None else int(np.count_nonzero(labels != IGNORE_INDEX))
    cu_seqlens = np.zeros(len(lens) + 1, dtype=np.int32)
    cu_seqlens[1:] = ends
    return {
        "input_ids": torch.from_numpy(tokens),
        "labels": torch.from_numpy(labels),
        "position_ids": torch.from_numpy(position_ids),
        "segment_ids": torch.from_numpy(segment_ids),
        "cu_seqlens": torch.from_numpy(cu_seqlens),
        "max_seqlen": int(lens.max()) if len(lens) else 0,
        "sample_ids": torch.from_numpy(batch.sample_ids),
        "num_tokens": torch.from_numpy(np.array(n_tokens, dtype=np.int64)),  # 0-d; 3x cheaper than torch.tensor
        "num_loss_tokens": torch.from_numpy(np.array(n_loss, dtype=np.int64)),
    }


def collate_packed(batch: SampleBatch) -> dict[str, Any]:
    return _segment_arrays(batch)


def padded_width(longest: int, pad_to_multiple_of: int | None) -> int:
    """A padded micro-batch's width: its longest sample, rounded up to a multiple of `pad_to_multiple_of`
    when set (e.g. 8 or 64 for tensor-core tiles). The rounded width may pass seq_len: `collate_padded`
    pads beyond what was read."""
    if pad_to_multiple_of is None or pad_to_multiple_of <= 1:
        return longest
    return -(-longest // pad_to_multiple_of) * pad_to_multiple_of


def _widen(batch: SampleBatch, width: int, pad_id: int) -> SampleBatch:
    """`batch` with its rows padded (pad_id, mask 0) to `width` columns; the segment tables are unchanged."""
    extra = width - batch.tokens.shape[1]
    if extra <= 0:
        return batch
    tokens = np.pad(batch.tokens, ((0, 0), (0, extra)), constant_values=pad_id)
    mask = None if batch.mask is None else np.pad(batch.mask, ((0, 0), (0, extra)))
    return replace(batch, tokens=tokens, mask=mask)


def collate_padded(batch: SampleBatch, width: int | None = None, pad_id: int = 0) -> dict[str, Any]:
    """`batch` read with width = its longest sample (or seq_len, when `width`, its padded_width, passes
    seq_len: it is then widened here with pad_id): adds attention_mask [B,L] int64 (1 = token)."""
    if width is not None:
        batch = _widen(batch, width, pad_id)
    out = _segment_arrays(batch)
    width = batch.tokens.shape[1]
    out["attention_mask"] = torch.from_numpy((_positions(width) < batch.lengths[:, None]).astype(np.int64))
    return out
