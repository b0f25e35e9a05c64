"""Which global positions a rank's micro-batch m of an epoch holds.

Optimizer step t uses global positions [t*GB, (t+1)*GB); rank r takes the contiguous block r of size
GB/world of it, as `accumulation_steps` micro-batches of micro_batch_size each. Micro-batch m of rank r
is step m // accumulation_steps, slice m % accumulation_steps of the rank's block.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


class BatchPlanError(ValueError):
    """Batch sizes, world size and rank that do not divide up a global batch exactly."""


@dataclass(frozen=True)
class BatchPlan:
    global_batch_size: int
    micro_batch_size: int
    world_size: int
    rank: int
    steps_per_epoch: int

    def __post_init__(self) -> None:
        if self.world_size < 1:
            raise BatchPlanError(f"world_size must be >= 1, got {self.world_size}")
        if not 0 <= self.rank < self.world_size:
            raise BatchPlanError(f"rank must lie in [0, world_size={self.world_size}), got {self.rank}")
        per_pass = self.micro_batch_size * self.world_size
        if self.global_batch_size % per_pass:
            raise BatchPlanError(
                f"global_batch_size {self.global_batch_size} is not a multiple of micro_batch_size "
                f"{self.micro_batch_size} x world_size {self.world_size} = {per_pass}: accumulation_steps "
                f"must be a whole number so that every rank gets the same samples per step")

    @property
    def accumulation_steps(self) -> int:
        return self.global_batch_size // (self.micro_batch_size * self.world_size)

    @property
    def micro_batches_per_epoch(self) -> int:
        """Per rank: steps_per_epoch * accumulation_steps, the same on every rank."""
        return self.steps_per_epoch * self.accumulation_steps

    @property
    def samples_per_micro_batch_globally(self) -> int:
        """Global samples consumed when every rank takes one more micro-batch."""
        return self.micro_batch_size * self.world_size

    def positions(self, m: int) -> np.ndarray:
        step, a = divmod(m, self.accumulation_steps)
        first = (step * self.global_batch_size + self.rank * (self.global_batch_size // self.world_size)
                 + a * self.micro_batch_size)
        return np.arange(first, first + self.micro_batch_size, dtype=np.int64)
