"""Per-source shuffles: source s in its e-th pass reads its samples in a permutation seeded by (seed, s, e).

np.random.Generator(PCG64) seeded through SeedSequence(seed, spawn_key=(PERMUTATION_DOMAIN, s, e)):
stable across numpy versions for a given bit generator (numpy's stream-compatibility policy covers
Generator.shuffle), independent of the process and the worker that draws it. uint32 when the set has
< 2^32 samples (4 bytes a sample: 40 MB for 10^7 samples; same values as Generator.permutation(n)).

`shuffle="block"` (BlockShuffle) replaces the full permutation of a pass by a block shuffle, in the manner
of MosaicML streaming's py1b: the pass permutes the source's shards, cuts that shard order into blocks of
`block_shards` consecutive shards, and permutes the samples of each block among themselves; blocks follow
one another. Reading a pass in order then needs only the shards of one block at a time (two across a
block boundary), which is what lets a loader stream a shard set through a cache smaller than the set
(remote_cache.py). Still a pure function of (seed, source, pass) and the shard sizes, so positions,
resume and elasticity are untouched. Its quality against the full permutation: training/README.md.
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np

PERMUTATION_DOMAIN = 0
"""spawn_key[0]: keeps these streams apart from the other seeded draws (length_buckets uses 1)."""
BLOCK_DOMAIN = 2
"""spawn_key[0] of the block shuffle: its streams differ from the full permutations'."""
SHUFFLES = ("full", "block")
_CACHED = 4  # permutations kept per process: one micro-batch touches at most ~2 passes of a few sources


def source_permutation(seed: int, source: int, source_epoch: int, n: int) -> np.ndarray:
    rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence(seed, spawn_key=(PERMUTATION_DOMAIN, source,
                                                                                      source_epoch))))
    perm = np.arange(n, dtype=_index_dtype(n))
    rng.shuffle(perm)
    return perm


def _index_dtype(n: int) -> type:
    return np.uint32 if n < 2**32 else np.int64


def block_permutation(seed: int, source: int, source_epoch: int, shard_sizes: list[int], block_shards: int
                      ) -> np.ndarray:
    """The pass's order under the block shuffle: shards permuted, then blocks of `block_shards` shards
    each permuted within; entries are indices into the source's samples (its shards concatenated)."""
    if block_shards < 1:
        raise ValueError(f"block_shards: expected an int >= 1, got {block_shards}")
    rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence(seed, spawn_key=(BLOCK_DOMAIN, source,
                                                                                      source_epoch))))
    sizes = np.asarray(shard_sizes, dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    n = int(sizes.sum())
    dtype = _index_dtype(n)
    shard_order = rng.permutation(len(sizes))
    out = np.empty(n, dtype=dtype)
    at = 0
    for first in range(0, len(shard_order), block_shards):
        members = shard_order[first: first + block_shards]
        block = np.concatenate([np.arange(starts[k], starts[k] + sizes[k], dtype=dtype) for k in members])
        rng.shuffle(block)
        out[at: at + len(block)] = block
        at += len(block)
    return out


class BlockShuffle:
    """What the block shuffle needs: per source, the sample counts of its shards in use (index order)."""

    def __init__(self, shard_sizes: list[list[int]], block_shards: int) -> None:
        if block_shards < 1:
            raise ValueError(f"block_shards: expected an int >= 1, got {block_shards}")
        self.shard_sizes = [list(map(int, s)) for s in shard_sizes]
        self.block_shards = block_shards

    def as_state(self) -> str:
        """What a loader state records: a resume under another block size would read another order."""
        return f"block:{self.block_shards}"


class PermutationCache:
    """The few most recently used permutations of one process, computed on first use."""

    def __init__(self, seed: int, sizes: np.ndarray, block: BlockShuffle | None = None) -> None:
        """block: None for the full permutation of every pass, else the block shuffle."""
        self.seed = seed
        self.sizes = sizes
        self.block = block
        if block is not None and [sum(s) for s in block.shard_sizes] != [int(n) for n in sizes]:
            raise ValueError("block shuffle: the shard sizes do not add up to the sources' sizes")
        self._cache: OrderedDict[tuple[int, int], np.ndarray] = OrderedDict()
        self.computed = 0
        """Permutations this process has drawn (O(set size) each): what a resume costs besides a batch."""

    def get(self, source: int, source_epoch: int) -> np.ndarray:
        key = (source, source_epoch)
        perm = self._cache.get(key)
        if perm is None:
            if self.block is None:
                perm = source_permutation(self.seed, source, source_epoch, int(self.sizes[source]))
            else:
                perm = block_permutation(self.seed, source, source_epoch, self.block.shard_sizes[source],
                                         self.block.block_shards)
            self.computed += 1
            self._cache[key] = perm
            if len(self._cache) > _CACHED:
                self._cache.popitem(last=False)
        else:
            self._cache.move_to_end(key)
        return perm
