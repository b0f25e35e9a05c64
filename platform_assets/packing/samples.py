"""Packed samples as every shard format stores them, and the errors of a shard set.

The model the formats share (SHARD_FORMAT.md, "A sample"): a run of consecutive samples is the
token matrix, the segment lengths with their per-sample pointers, and the loss mask when the set
has one. Writers take runs of it, readers give it back, so two formats can be compared sample for
sample.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# A Parquet row group holds at most this many samples: 1024 x 2048 int32 tokens = 8 MiB uncompressed,
# small enough for a loader to read one group at a time, large enough to keep per-group overhead <0.1%.
# Every format's writer gets runs cut at this boundary (a shard is a whole number of runs).
ROWS_PER_ROW_GROUP = 1024


class ShardSetError(ValueError):
    """An index or a shard that does not follow SHARD_FORMAT.md."""


def token_dtype(vocab_size: int) -> np.dtype:
    """uint16 while every id fits (GPT-2's 50257 does: half the bytes of int32), else uint32."""
    if vocab_size <= 0:
        raise ShardSetError(f"vocab_size must be positive, got {vocab_size}")
    if vocab_size > 2**32:
        raise ShardSetError(f"vocab_size {vocab_size} does not fit uint32 token ids")
    return np.dtype("<u2") if vocab_size <= 65536 else np.dtype("<u4")


@dataclass(frozen=True)
class ShardSamples:
    """Consecutive packed samples as every format stores them (a whole shard or a run of it).

    Sample i holds the segments seqlens[seqptr[i]:seqptr[i+1]] laid end to end from position 0, then
    padding up to seq_len; loss_mask (when the set has one) is 1 where a token counts in the loss.
    """

    tokens: np.ndarray  # [samples, seq_len], token dtype
    seqlens: np.ndarray  # int32 [segments]
    seqptr: np.ndarray  # int64 [samples + 1], seqptr[0] == 0
    loss_mask: np.ndarray | None  # uint8 [samples, seq_len], or None for a set without masks

    @property
    def samples(self) -> int:
        return int(self.tokens.shape[0])

    @property
    def seq_len(self) -> int:
        return int(self.tokens.shape[1])

    @property
    def token_count(self) -> int:
        """Non-padding tokens."""
        return int(self.seqlens.sum(dtype=np.int64))

    @property
    def loss_tokens(self) -> int:
        return self.token_count if self.loss_mask is None else int(self.loss_mask.sum(dtype=np.int64))

    def used(self) -> np.ndarray:
        """Non-padding positions of each sample (int64 [samples])."""
        ends = np.concatenate([[0], np.cumsum(self.seqlens, dtype=np.int64)])
        return ends[self.seqptr[1:]] - ends[self.seqptr[:-1]]

    def sample_seqlens(self, i: int) -> np.ndarray:
        return self.seqlens[self.seqptr[i] : self.seqptr[i + 1]]

    def validate(self) -> None:
        """Raise ShardSetError if the arrays do not describe valid samples."""
        if self.tokens.ndim != 2:
            raise ShardSetError(f"tokens must be [samples, seq_len], got shape {self.tokens.shape}")
        n = self.samples
        if self.seqptr.shape != (n + 1,) or self.seqptr[0] != 0 or self.seqptr[-1] != len(self.seqlens):
            raise ShardSetError(f"seqptr must have {n + 1} entries from 0 to {len(self.seqlens)} segments")
        if np.any(np.diff(self.seqptr) < 1):
            raise ShardSetError("every sample needs at least one segment (seqptr must increase)")
        if len(self.seqlens) and self.seqlens.min() < 1:
            raise ShardSetError("segment lengths must be positive")
        used = self.used()
        if n and used.max() > self.seq_len:
            raise ShardSetError(f"a sample's segments hold {used.max()} tokens, more than seq_len {self.seq_len}")
        if self.loss_mask is not None:
            if self.loss_mask.shape != self.tokens.shape:
                raise ShardSetError(f"loss_mask shape {self.loss_mask.shape} != tokens shape {self.tokens.shape}")
            padding = np.arange(self.seq_len)[None, :] >= used[:, None]
            if np.any(self.loss_mask[padding]):
                raise ShardSetError("loss_mask must be 0 on padding")


def concat_samples(parts: list[ShardSamples]) -> ShardSamples:
    """Consecutive runs of samples as one (seqptr re-based onto the joined seqlens)."""
    if len(parts) == 1:
        return parts[0]
    offsets = np.cumsum([0] + [len(p.seqlens) for p in parts[:-1]], dtype=np.int64)
    seqptr = np.concatenate([[0]] + [p.seqptr[1:] + off for p, off in zip(parts, offsets, strict=True)])
    masks = [p.loss_mask for p in parts]
    return ShardSamples(
        tokens=np.concatenate([p.tokens for p in parts]),
        seqlens=np.concatenate([p.seqlens for p in parts]),
        seqptr=seqptr.astype(np.int64),
        loss_mask=None if masks[0] is None else np.concatenate(masks),
    )
