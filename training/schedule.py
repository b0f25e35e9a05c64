"""Learning-rate schedule: linear warm-up, then cosine decay to a floor."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class WarmupCosine:
    """Multiplier of the peak lr at optimizer step `step` (0-based: the step about to be taken).

    A callable object rather than a closure so `LambdaLR.state_dict()` saves its fields and a resumed
    run can check it continues the same schedule.
    """

    warmup_steps: int
    decay_steps: int
    min_ratio: float

    def __post_init__(self) -> None:
        if self.decay_steps <= self.warmup_steps:
            raise ValueError(
                f"schedule: decay_steps ({self.decay_steps}) must be greater than warmup_steps ({self.warmup_steps})"
            )

    def __call__(self, step: int) -> float:
        if step < self.warmup_steps:
            # (step + 1): the first step already trains with lr/warmup instead of wasting a step at lr 0.
            return (step + 1) / self.warmup_steps
        progress = min(1.0, (step - self.warmup_steps) / (self.decay_steps - self.warmup_steps))
        return self.min_ratio + (1.0 - self.min_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))


def build_scheduler(optimizer: torch.optim.Optimizer, schedule: WarmupCosine) -> torch.optim.lr_scheduler.LambdaLR:
    return torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
