"""Per-source shuffles: source s in its e-th pass reads its samples in a permutation seeded by (seed, s, e).

np.random.Generator(PCG64) seeded through SeedSequence(seed, spawn_key=(PERMUTATION_DOMAIN, s, e)):
stable across numpy versions for a given bit generator (numpy's stream-compatibility policy covers
Generator.shuffle), independent of the process and the worker that draws it. uint32 when the set has
< 2^32 samples (4 bytes a sample: 40 MB for 10^7 samples; same values as Generator.permutation(n)).
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np

PERMUTATION_DOMAIN = 0
"""spawn_key[0]: keeps these streams apart from the other seeded draws (length_buckets uses 1)."""
_CACHED = 4  # permutations kept per process: one micro-batch touches at most ~2 passes of a few sources


def source_permutation(seed: int, source: int, source_epoch: int, n: int) -> np.ndarray:
    rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence(seed, spawn_key=(PERMUTATION_DOMAIN, source,
                                                                                      source_epoch))))
    perm = np.arange(n, dtype=np.uint32 if n < 2**32 else np.int64)
    rng.shuffle(perm)
    return perm


class PermutationCache:
    """The few most recently used permutations of one process, computed on first use."""

    def __init__(self, seed: int, sizes: np.ndarray) -> None:
        self.seed = seed
        self.sizes = sizes
        self._cache: OrderedDict[tuple[int, int], np.ndarray] = OrderedDict()
        self.computed = 0
        """Permutations this process has drawn (O(set size) each): what a resume costs besides a batch."""

    def get(self, source: int, source_epoch: int) -> np.ndarray:
        key = (source, source_epoch)
        perm = self._cache.get(key)
        if perm is None:
            perm = source_permutation(self.seed, source, source_epoch, int(self.sizes[source]))
            self.computed += 1
            self._cache[key] = perm
            if len(self._cache) > _CACHED:
                self._cache.popitem(last=False)
        else:
            self._cache.move_to_end(key)
        return perm
