"""Token sequences as one flat array plus offsets: BOS/EOS, truncation and chunking by arithmetic.

Row i of a batch is `values[offsets[i]:offsets[i+1]]`, the layout of an Arrow list array, so the
output column is built without a Python object per token or per row. Everything here is numpy on
whole arrays:

- `assemble`: one gather puts each row's body (anywhere in a source array) between its optional
  BOS and EOS and cuts it at a length limit; the gather index is `arange + per-row shift`, then
  the BOS/EOS positions are overwritten;
- `chunk`: cutting rows into consecutive max_length pieces moves no token at all, it only adds
  offsets (the pieces of a row are contiguous already).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def exclusive_cumsum(lengths: np.ndarray) -> np.ndarray:
    """[0, l0, l0+l1, ...]: n+1 offsets (int64) for n lengths."""
    out = np.zeros(len(lengths) + 1, np.int64)
    np.cumsum(lengths, out=out[1:])
    return out


@dataclass(frozen=True)
class Assembled:
    values: np.ndarray
    """int32 token ids of every row, concatenated."""
    mask: np.ndarray | None
    """uint8, aligned with values: the source mask, 0 on BOS and EOS (None without a source mask)."""
    offsets: np.ndarray
    """int64, n+1."""
    full_lengths: np.ndarray
    """int64 per row: length with BOS/EOS before any limit (what truncation cut from)."""


def assemble(
    src: np.ndarray,
    src_mask: np.ndarray | None,
    starts: np.ndarray,
    lengths: np.ndarray,
    has_bos: np.ndarray,
    has_eos: np.ndarray,
    bos_id: int | None,
    eos_id: int,
    limit: int | None = None,
) -> Assembled:
    """Row i = [BOS if has_bos[i]] + src[starts[i] : starts[i]+lengths[i]] + [EOS if has_eos[i]],
    cut to its first `limit` tokens (a cut row loses its EOS: the document did not end there)."""
    if has_bos.any() and bos_id is None:
        raise ValueError("BOS requested but the tokenizer has no bos token")
    hb = has_bos.astype(np.int64)
    full = lengths.astype(np.int64) + hb + has_eos
    out_len = np.minimum(full, limit) if limit is not None else full
    offsets = exclusive_cumsum(out_len)
    # src gets one trailing sentinel: the EOS slot of the last row indexes one past the body (and a
    # first-row BOS slot indexes -1, the same sentinel); both slots are overwritten below
    ext = np.empty(len(src) + 1, np.int32)
    ext[:-1] = src
    ext[-1] = 0
    idx = np.arange(offsets[-1], dtype=np.int64)
    idx += np.repeat(starts.astype(np.int64) - hb - offsets[:-1], out_len)
    values = ext[idx]
    mask = None
    if src_mask is not None:
        ext_mask = np.zeros(len(src) + 1, np.uint8)
        ext_mask[:-1] = src_mask
        mask = ext_mask[idx]
    del idx
    bos_pos = offsets[:-1][has_bos & (out_len > 0)]
    eos_pos = offsets[1:][has_eos & (full == out_len)] - 1
    if len(bos_pos):
        values[bos_pos] = bos_id
    values[eos_pos] = eos_id
    if mask is not None:
        mask[bos_pos] = 0
        mask[eos_pos] = 0
    return Assembled(values, mask, offsets, full)


@dataclass(frozen=True)
class Chunks:
    offsets: np.ndarray
    """int64, one more than the number of chunks; indexes the same values array."""
    row: np.ndarray
    """int64 per chunk: the row it comes from."""
    index: np.ndarray
    """int32 per chunk: 0, 1, 2, ... within its row."""


def chunk(offsets: np.ndarray, max_length: int) -> Chunks:
    """Cut every row into consecutive pieces of max_length tokens (the last one shorter). A row
    with no token stays one empty chunk, so that every row is still accounted for."""
    n_tok = np.diff(offsets)
    n_chunks = np.maximum(1, -(-n_tok // max_length))
    row = np.repeat(np.arange(len(n_tok), dtype=np.int64), n_chunks)
    first = exclusive_cumsum(n_chunks)
    index = np.arange(first[-1], dtype=np.int64) - np.repeat(first[:-1], n_chunks)
    starts = offsets[:-1][row] + index * max_length
    return Chunks(np.append(starts, offsets[-1]), row, index.astype(np.int32))


def segment_sums(values: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Sum of each row's 0/1 values, empty rows included (np.add.reduceat mishandles those). The
    running sum is int32 (a batch holds < 2^31 tokens; the caller checks): half of int64's memory
    on a 20 M-token batch."""
    cs = np.zeros(len(values) + 1, np.int32)
    np.cumsum(values, out=cs[1:])
    return (cs[offsets[1:]] - cs[offsets[:-1]]).astype(np.int64)
