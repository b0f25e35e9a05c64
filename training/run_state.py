"""What a training process keeps beside the model: its result, its stop request (SIGTERM/SIGINT) and
its random-number states (saved in every checkpoint, per rank)."""

from __future__ import annotations

import logging
import os
import random
import signal
import threading
from dataclasses import dataclass
from types import FrameType
from typing import Any

import numpy as np
import torch

log = logging.getLogger("training")


@dataclass(frozen=True)
class TrainResult:
    step: int
    """The last completed optimizer step."""
    max_steps: int
    stopped_by_signal: bool
    """SIGTERM/SIGINT ended the run early (after saving); resuming continues it."""
    loss: float | None
    """The last step's training loss (None when this process trained no step)."""
    eval_loss: float | None
    tokens_seen: int
    """Non-padding tokens trained on over the whole run, resumed segments included."""
    tokens_per_s: float
    """Non-padding tokens per second over the steps this process ran (all ranks together)."""
    data_wait_fraction: float
    """Share of this process's step time spent blocked on the loader (rank 0's), its first step left out
    when it ran more than one (first_step_wait_s: that one-time wait)."""
    resumed_from: int | None
    checkpoint: str | None
    """The newest checkpoint after the run."""
    metrics_path: str
    first_step_wait_s: float = 0.0
    """This process's wait for its first step's data: DataLoader workers starting, first shard opens."""
    samples_per_s: float = 0.0
    """Samples (documents, images, clips) per second over the steps this process ran (all ranks)."""
    decode_fraction: float | None = None
    """Media runs: the share of rank 0's loader work (shard reads + decoding + processors) spent decoding
    and processing media, over this process's steps; None for token shards (nothing to decode)."""
    modalities_seen: dict[str, int] | None = None
    """Media runs: samples trained on per modality over the whole run, resumed segments included."""


def steady_wait(wait: float, time_: float, first_wait: float | None, first_time: float) -> float:
    """Wait / step time without the first step, a one-time cost (starting 2 DataLoader workers took
    ~1.5 s on 2 cores, half the time of a 30-step sample run) that says nothing about whether the
    loader keeps up; with a single step there is nothing else to measure."""
    if first_wait is None or time_ <= 0:
        return 0.0
    if time_ - first_time <= 0:
        return wait / time_
    return (wait - first_wait) / (time_ - first_time)


class StopRequest:
    """SIGTERM/SIGINT set a flag that the loop reads after each step; a second SIGINT interrupts."""

    def __init__(self) -> None:
        self.requested: str | None = None
        self._previous: dict[int, Any] = {}
        self._pid = os.getpid()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if os.getpid() != self._pid:
            # A forked DataLoader worker inherited this handler: Ctrl-C reaches the whole process group,
            # and the worker must keep serving batches until the main process has finished its step.
            return
        if self.requested and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.requested = signal.Signals(signum).name
        log.warning("%s received: finishing the current step, then saving a checkpoint", self.requested)

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            log.warning("not on the main thread: SIGTERM/SIGINT will not trigger a checkpoint")
            return
        for sig in (signal.SIGTERM, signal.SIGINT):
            self._previous[sig] = signal.signal(sig, self._handle)

    def restore(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()


def rng_state() -> dict[str, Any]:
    name, keys, pos, has_gauss, cached = np.random.get_state()
    return {
        "python": random.getstate(),
        # as plain ints: torch.load(weights_only=True) refuses numpy arrays
        "numpy": (name, keys.tolist(), pos, has_gauss, cached),
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state() if torch.cuda.is_available() else None,
    }


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    name, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((name, np.array(keys, dtype=np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(state["torch"])
    if state["cuda"] is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
