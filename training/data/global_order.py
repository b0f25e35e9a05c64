"""The global sample order: position g of epoch e -> (source index, index within that source's set).

A deterministic function of (seed, epoch, g) and the data (set sizes, mixture weights), and of nothing
about ranks, workers or batch sizes below the global batch, so every world size sees the same sequence:

1. the mixture schedule (mixture.blend) gives position g its source s and its ordinal o: the number of
   earlier positions of the epoch that drew from s;
2. source s draws counts[s] samples per epoch, so this is its draw u = e*counts[s] + o overall: pass
   u // n_s over its n_s samples, item u % n_s of that pass's permutation (permutation.py). A source
   with fewer samples than its share wraps into its next pass (a new permutation); one with more
   continues the next epoch where this one stopped, so no sample is skipped. With a block shuffle the
   pass's permutation is a block shuffle of the source's shards (permutation.py); nothing else changes.

Only positions [0, steps_per_epoch * global_batch_size) are ever read (the remainder that would not
fill an optimizer step is dropped), so the schedule covers exactly those.
"""

from __future__ import annotations

import numpy as np

from training.data.mixture import Blend, Mixture, blend
from training.data.permutation import BlockShuffle, PermutationCache

_ELEMENTWISE = 64
"""Up to this many positions (a micro-batch) a python loop over them beats grouping by (source, pass) with
boolean masks (~10 us vs ~60 us for 8); above it (length-bucketing windows) the grouped indexing wins."""


class GlobalOrder:
    def __init__(self, sizes: np.ndarray, mixture: Mixture, seed: int, length: int,
                 block: BlockShuffle | None = None) -> None:
        """block: each source's passes in a block shuffle (permutation.py) instead of full permutations."""
        self.sizes = np.asarray(sizes, dtype=np.int64)
        self.mixture = mixture
        self.seed = seed
        self.length = length
        self.blend: Blend = blend(mixture, length)
        self.permutations = PermutationCache(seed, self.sizes, block)
        # python ints for the per-position loop
        self._counts, self._sizes = self.blend.counts.tolist(), self.sizes.tolist()
        self._per_period = self.blend.per_period.tolist()

    def __len__(self) -> int:
        return self.length

    def samples(self, epoch: int, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(source index, index within that source's set) of each position of `epoch`."""
        positions = np.asarray(positions, dtype=np.int64)
        if len(positions) <= _ELEMENTWISE:
            b, get = self.blend, self.permutations.get
            src, idx = [], []
            pos = positions.tolist()
            if pos and (min(pos) < 0 or max(pos) >= self.length):
                raise IndexError(f"positions must lie in [0, {self.length}) of the epoch")
            for g in pos:  # Blend.at and the lines below, one position at a time
                rep, r = divmod(g, len(b.source))
                s = int(b.source[r])
                draw = epoch * self._counts[s] + int(b.ordinal[r]) + rep * self._per_period[s]
                p, w = divmod(draw, self._sizes[s])
                src.append(s)
                idx.append(int(get(s, p)[w]))
            return np.array(src, dtype=np.int64), np.array(idx, dtype=np.int64)
        if len(positions) and (int(positions.min()) < 0 or int(positions.max()) >= self.length):
            raise IndexError(f"positions must lie in [0, {self.length}) of the epoch")
        src, draw = self.blend.at(positions)
        passes, within = np.divmod(epoch * self.blend.counts[src] + draw, self.sizes[src])
        idx = np.empty(len(positions), dtype=np.int64)
        # many positions (a length-bucketing window) touch a handful of (source, pass) pairs: one
        # fancy-index per pair
        for s, p in sorted(set(zip(src.tolist(), passes.tolist(), strict=True))):
            sel = (src == s) & (passes == p)
            idx[sel] = self.permutations.get(s, p)[within[sel]]
        return src, idx
