"""Where a checkpointable loader is, and how it resumes: the part every loader of this package shares.

A loader hands out its rank's micro-batches of an epoch in order; micro-batch m of epoch e is a pure
function of (e, m) and of what fixes the global order (the loader's `_identity()`). So the position is
two integers, counted as batches are handed to the caller (never as workers prefetch them), and
`load_state_dict` seeks by setting them: O(1), nothing before the position is read. A state taken on an
optimizer-step boundary resumes on any world size and micro batch size (the global order does not
depend on them); one taken mid-step only on the same split of the step.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from typing import Any, ClassVar

from training.data.batch_plan import BatchPlan


class LoaderConfigError(ValueError):
    """A loader config field with a wrong type or value (the message names the field)."""


class LoaderStateError(ValueError):
    """A state_dict that cannot resume this loader exactly (the message names the key that differs)."""


def is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def check_common_fields(cfg: Any, verify_modes: tuple[str, ...], on_corrupt: tuple[str, ...]) -> None:
    """The fields every loader config has (data_dir, split, batch sizes, seed, workers, epoch size,
    weights, verify, on_corrupt), checked the same way: the message names the field."""
    if not isinstance(cfg.data_dir, str | os.PathLike):
        raise LoaderConfigError(f"data_dir: expected a path, got {cfg.data_dir!r}")
    if not isinstance(cfg.split, str) or not cfg.split:
        raise LoaderConfigError(f"split: expected a split name, got {cfg.split!r}")
    for name, low in (("global_batch_size", 1), ("micro_batch_size", 1), ("seed", 0), ("num_workers", 0)):
        v = getattr(cfg, name)
        if not is_int(v) or v < low:
            raise LoaderConfigError(f"{name}: expected an int >= {low}, got {v!r}")
    if cfg.samples_per_epoch is not None and (not is_int(cfg.samples_per_epoch) or cfg.samples_per_epoch < 1):
        raise LoaderConfigError(f"samples_per_epoch: expected None or an int >= 1, got {cfg.samples_per_epoch!r}")
    if cfg.weights is not None and not isinstance(cfg.weights, Mapping):
        raise LoaderConfigError(f"weights: expected None or a mapping name -> weight, got {cfg.weights!r}")
    if cfg.verify not in verify_modes:
        raise LoaderConfigError(f"verify: expected one of {list(verify_modes)}, got {cfg.verify!r}")
    if cfg.on_corrupt not in on_corrupt:
        raise LoaderConfigError(f"on_corrupt: expected one of {list(on_corrupt)}, got {cfg.on_corrupt!r}")


class LoaderPosition:
    """Base of the loaders: the epoch, the micro-batches handed out, state_dict / load_state_dict.

    Subclasses set STATE_FORMAT, STATE_VERSION (and ADDED_KEYS: identity keys added after a version was
    written, with the value a state without them means), `self.plan` and `self.cfg` (with
    global_batch_size and micro_batch_size), and implement `_identity()`."""

    STATE_FORMAT: ClassVar[str]
    STATE_VERSION: ClassVar[int]
    ADDED_KEYS: ClassVar[dict[str, Any]] = {}
    plan: BatchPlan
    rank: int
    world_size: int

    def _start_position(self) -> None:
        self._epoch = 0
        self._micro = 0  # micro-batches of the current epoch handed to the caller by this rank
        self._generation = 0  # bumped by every iter(): an older iterator stops being valid

    def _plan_epoch(self, cfg: Any, sizes: Any, mixture: Any, rank: int, world_size: int) -> int:
        """Sets samples_per_epoch (the config's, else the samples of the sets the mixture draws from),
        `plan` (the rank's micro-batches), rank and world_size; returns the optimizer steps per epoch."""
        drawn = sum(int(n) for n, p in zip(sizes, mixture.numerators, strict=True) if p)
        self.samples_per_epoch = cfg.samples_per_epoch if cfg.samples_per_epoch is not None else drawn
        steps = self.samples_per_epoch // cfg.global_batch_size
        if steps == 0:
            raise LoaderConfigError(f"samples_per_epoch {self.samples_per_epoch} < global_batch_size "
                                    f"{cfg.global_batch_size}: an epoch would not fill one optimizer step")
        self.plan = BatchPlan(cfg.global_batch_size, cfg.micro_batch_size, world_size, rank, steps)
        self.rank, self.world_size = rank, world_size
        return steps

    def _identity(self) -> dict[str, Any]:
        """What fixes the global order: a state saved under other values would resume a different one."""
        raise NotImplementedError

    # -- position -----------------------------------------------------------------------------------
    @property
    def epoch(self) -> int:
        """The current epoch; it advances when its last micro-batch is handed out."""
        return self._epoch

    @property
    def steps_per_epoch(self) -> int:
        """Optimizer steps per epoch: samples_per_epoch // global_batch_size (the remainder is dropped)."""
        return self.plan.steps_per_epoch

    @property
    def accumulation_steps(self) -> int:
        return self.plan.accumulation_steps

    @property
    def consumed_samples(self) -> int:
        """Global samples of the current epoch handed out, assuming all ranks advance in lock step."""
        return self._micro * self.plan.samples_per_micro_batch_globally

    def _hand_out(self, batches: Iterator[Any], generation: int) -> Iterator[Any]:
        """Count each batch as it reaches the caller; the epoch advances with its last micro-batch."""
        total = self.plan.micro_batches_per_epoch
        for batch in batches:
            if generation != self._generation:
                raise RuntimeError("this iterator was superseded by a later iter(loader): iterate the newest "
                                   "one (it continues from the last micro-batch handed out)")
            self._micro += 1
            if self._micro == total:
                self._epoch, self._micro = self._epoch + 1, 0
            yield batch

    # -- checkpointing ------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Plain JSON-able: where the caller is (epoch, consumed_samples: global samples of the epoch
        handed out) and what fixes the order."""
        return {
            "format": self.STATE_FORMAT,
            "version": self.STATE_VERSION,
            "epoch": self._epoch,
            "consumed_samples": self.consumed_samples,
            "micro_batch_size": self.plan.micro_batch_size,
            "world_size": self.world_size,
            **self._identity(),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Seek to `state` in O(1). The world size and micro batch size may differ from the saving run's
        when the state lies on an optimizer-step boundary (every state_dict taken between steps does)."""
        name = self.STATE_FORMAT.rsplit(".", 1)[-1]
        if not isinstance(state, Mapping) or state.get("format") != self.STATE_FORMAT:
            raise LoaderStateError(f"not a {name} state (format {self.STATE_FORMAT!r} expected)")
        if state.get("version") != self.STATE_VERSION:
            raise LoaderStateError(f"state version {state.get('version')!r}; this loader reads {self.STATE_VERSION}")
        for key, mine in self._identity().items():
            if key not in state and key not in self.ADDED_KEYS:
                raise LoaderStateError(f"state lacks {key!r}")
            theirs = state.get(key, self.ADDED_KEYS.get(key))
            if theirs != mine:
                raise LoaderStateError(f"state was saved with {key}={theirs!r}, this loader has {mine!r}: the "
                                       f"sample order would differ, so it cannot resume exactly")
        epoch, consumed = state.get("epoch"), state.get("consumed_samples")
        gb = self.plan.global_batch_size
        used = self.plan.steps_per_epoch * gb
        if not is_int(epoch) or epoch < 0:
            raise LoaderStateError(f"state epoch: expected an int >= 0, got {epoch!r}")
        if not is_int(consumed) or not 0 <= consumed <= used:
            raise LoaderStateError(f"state consumed_samples: expected an int in [0, {used}], got {consumed!r}")
        if consumed % gb:
            # mid-step: the ranks' partial blocks of step t are only the same samples under the same split
            saved = (state.get("world_size"), state.get("micro_batch_size"))
            if saved != (self.world_size, self.plan.micro_batch_size):
                raise LoaderStateError(
                    f"state is {consumed % gb} samples into optimizer step {consumed // gb}: resume it with the "
                    f"world_size and micro_batch_size it was saved with ({saved[0]}, {saved[1]}), not "
                    f"({self.world_size}, {self.plan.micro_batch_size}); states saved between steps resume "
                    f"on any world size")
        if consumed % self.plan.samples_per_micro_batch_globally:
            raise LoaderStateError(f"state consumed_samples {consumed} is not a whole number of micro-batches of "
                                   f"{self.plan.samples_per_micro_batch_globally} samples (micro_batch_size x "
                                   f"world_size)")
        if consumed == used:
            epoch, consumed = epoch + 1, 0
        self._epoch = epoch
        self._micro = consumed // self.plan.samples_per_micro_batch_globally
        self._generation += 1  # an iterator taken before the seek must not continue from the old position
