"""Length bucketing for collate="padded": batches of similar lengths, still a global, resumable order.

The used positions of an epoch are cut into windows of BUCKET_WINDOW_STEPS optimizer steps
(BUCKET_WINDOW_STEPS * global_batch_size positions; the last window may be shorter, always whole
steps). Within a window the samples are sorted by length (ties: earlier position first), cut into
steps of global_batch_size, and the steps are shuffled (SeedSequence(seed, spawn_key=(1, epoch,
window))): every micro-batch, on every rank, is a run of neighbours in length order, and training does
not see a short-to-long ramp inside each window. Only the global batch size enters, never the world size
or micro batch size, so the order survives an elastic resume like the packed one; finding a position's
sample reads the lengths (segment tables, no tokens) of its window only.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from training.data.global_order import GlobalOrder

BUCKET_WINDOW_STEPS = 8
"""8 steps: with the default global batch 8 and micro batch 1 a window is 64 micro-batches; padding then
costs (longest - mean) within a 1/64 slice of the length distribution instead of a random batch's."""
BUCKET_DOMAIN = 1  # spawn_key[0] of the step shuffle (permutation.py uses 0)


class LengthBuckets:
    def __init__(self, order: GlobalOrder, lengths: Callable[[np.ndarray, np.ndarray], np.ndarray],
                 global_batch_size: int, window_steps: int = BUCKET_WINDOW_STEPS) -> None:
        if order.length % global_batch_size:
            raise ValueError(f"the epoch's used positions ({order.length}) must be whole steps of "
                             f"{global_batch_size}")
        self.order = order
        self.lengths = lengths
        self.step = global_batch_size
        self.window = window_steps * global_batch_size
        self._cached: tuple[tuple[int, int], np.ndarray] | None = None
        self.length = order.length

    def window_positions(self, epoch: int, w: int) -> np.ndarray:
        """Window w of `epoch` in bucketed order: the underlying (mixture-order) positions."""
        if self._cached is not None and self._cached[0] == (epoch, w):
            return self._cached[1]
        lo, hi = w * self.window, min((w + 1) * self.window, self.length)
        pos = np.arange(lo, hi, dtype=np.int64)
        by_length = pos[np.argsort(self.lengths(*self.order.samples(epoch, pos)), kind="stable")]
        steps = by_length.reshape(-1, self.step)
        rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence(self.order.seed,
                                                                         spawn_key=(BUCKET_DOMAIN, epoch, w))))
        out = steps[rng.permutation(len(steps))].reshape(-1)
        self._cached = ((epoch, w), out)
        return out

    def samples(self, epoch: int, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        positions = np.asarray(positions, dtype=np.int64)
        mapped = np.empty_like(positions)
        windows = positions // self.window
        for w in np.unique(windows).tolist():
            sel = windows == w
            mapped[sel] = self.window_positions(epoch, w)[positions[sel] - w * self.window]
        return self.order.samples(epoch, mapped)
