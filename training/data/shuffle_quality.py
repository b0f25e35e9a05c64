"""How close a block shuffle's order is to a full permutation: figures for training/README.md.

A pass's order is judged against the shard layout it reads (samples of shard k stored together):

- `same_shard_adjacent`: the share of neighbouring positions whose samples share a shard. A full
  permutation of S equal shards gives ~1/S; a block shuffle of B shards ~1/B (within a block), the
  correlation a model sees between consecutive samples.
- `batch_shards`: distinct shards among each batch of `batch` consecutive positions, averaged; the full
  permutation's expectation is S * (1 - (1 - 1/S)^batch), a block shuffle is capped at B (+1 at a boundary).
- `rank_correlation`: Spearman's rho between position and storage index: ~0 for a full permutation;
  a block shuffle keeps none of the storage order either (shards are permuted first), so it stays ~0.
- `displacement`: mean |position - storage index| / n: ~1/3 for a full permutation.

`python -m training.data.shuffle_quality` prints the table for 256 shards of 512 samples, batch 64.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from training.data.permutation import block_permutation, source_permutation


@dataclass(frozen=True)
class ShuffleQuality:
    same_shard_adjacent: float
    batch_shards: float
    rank_correlation: float
    displacement: float


def shuffle_quality(order: np.ndarray, shard_sizes: list[int], batch: int) -> ShuffleQuality:
    """Figures of `order` (a permutation of the samples of shards of `shard_sizes`, stored in index order)."""
    order = np.asarray(order, dtype=np.int64)
    n = len(order)
    if sorted(order.tolist()) != list(range(n)) or n != sum(shard_sizes):
        raise ValueError("order must be a permutation of all samples of the shards")
    shard = np.repeat(np.arange(len(shard_sizes)), shard_sizes)[order]
    batches = shard[: n - n % batch].reshape(-1, batch)
    distinct = np.mean([len(np.unique(b)) for b in batches]) if len(batches) else float("nan")
    position = np.arange(n, dtype=np.float64)
    rho = float(np.corrcoef(position, order.astype(np.float64))[0, 1]) if n > 1 else float("nan")
    return ShuffleQuality(same_shard_adjacent=float(np.mean(shard[1:] == shard[:-1])) if n > 1 else float("nan"),
                          batch_shards=float(distinct), rank_correlation=rho,
                          displacement=float(np.mean(np.abs(order - position))) / n)


def table(shards: int = 256, samples: int = 512, batch: int = 64, blocks: tuple[int, ...] = (1, 4, 16),
          seed: int = 0) -> list[tuple[str, ShuffleQuality]]:
    sizes = [samples] * shards
    rows = [("full", shuffle_quality(source_permutation(seed, 0, 0, shards * samples), sizes, batch))]
    rows += [(f"block {b}", shuffle_quality(block_permutation(seed, 0, 0, sizes, b), sizes, batch)) for b in blocks]
    return rows


if __name__ == "__main__":
    print("| order | same-shard neighbours | shards per batch of 64 | Spearman rho | displacement |")
    print("|---|---|---|---|---|")
    for name, q in table():
        print(f"| {name} | {q.same_shard_adjacent:.4f} | {q.batch_shards:.2f} | {q.rank_correlation:+.4f} | "
              f"{q.displacement:.4f} |")
