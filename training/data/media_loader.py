"""MediaLoader: the text loader's guarantees for media shard sets (images, PDF pages, audio).

The unit of the mixture is a stream: the samples of one (source, modality) of the split, in the shard
set's input order (media_reader.py). Everything else is the text loader's machinery, reused as is: the
exact mixture schedule (mixture.py), per-stream shuffles seeded by (seed, stream, pass), the global order
(global_order.py), rank blocks per optimizer step (batch_plan.py) and the O(1) position and resume
(loader_position.py). Micro-batch m of epoch e is a pure function of (e, m), so 0, 1 or N workers give
the same sequence, and a resumed run the same samples and, since augmentation is seeded by (seed,
epoch, sample id), the same pixels.

Batching:
- "mixed": one global order over every stream; a batch holds whatever modalities its positions draw
  (a vision-language model takes images and PDF pages alike). With weights whose denominator divides
  the global batch, every global batch has exactly the weights' composition: the schedule repeats
  every denominator positions and each period holds each stream's exact share (mixture.py).
- "per_modality": each optimizer step draws from one modality only (models with one input path per
  modality cannot mix them in one forward). Steps are scheduled over modalities by the same exact
  schedule, with each modality's weight the sum of its streams'; within a modality the samples follow
  that modality's own exact order over its streams. Every prefix of steps then keeps each modality
  within one step of its share, and each modality's positions keep its streams within one sample.

Decoding happens where the batch is built: in the DataLoader workers when num_workers > 0. Each batch
carries `read_s` (shard reads) and `decode_s` (media decoding and processors, from the collator), so the
training loop can report which share of the loader's work decoding is.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from numbers import Real
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from training.data.batch_plan import BatchPlan
from training.data.batch_transfer import inline_small_tensors, restore_inlined
from training.data.global_order import GlobalOrder
from training.data.loader_position import LoaderConfigError, LoaderPosition, check_common_fields
from training.data.media_index import read_media_index
from training.data.media_reader import MediaSample, MediaSplitReader
from training.data.mixture import Mixture, MixtureError, blend
from training.data.shard_reader import ON_CORRUPT, VERIFY_MODES
from training.data.shared_buffers import SLOTS_KEY as BUFFER_SLOTS_KEY
from training.data.shared_buffers import BufferReleaser
from training.data.shared_buffers import install as install_worker_buffers

BATCHING = ("mixed", "per_modality")
MODALITIES = ("image", "pdf", "audio")

Collate = Callable[[list[MediaSample], int], dict[str, Any]]
"""(samples, epoch) -> a batch dict; must pickle (it runs in the DataLoader workers)."""


@dataclass(frozen=True)
class MediaLoaderConfig:
    data_dir: str
    """A media format directory holding index.json (`webdataset` or `parquet`; MEDIA_SHARD_FORMAT.md)."""
    split: str = "train"
    global_batch_size: int = 8
    micro_batch_size: int = 1
    seed: int = 0
    weights: Mapping[str, float] | None = None
    """Mixture weight per stream (`<source>/<modality>`) or per source (spread over its modalities by
    sample counts); every stream needs one (0 leaves it out). None: proportional to sample counts."""
    samples_per_epoch: int | None = None
    num_workers: int = 0
    verify: str = "none"
    on_corrupt: str = "stop"
    modalities: tuple[str, ...] | None = None
    """The modalities the model takes (e.g. ("audio",) for a speech model); None: all in the split."""
    batching: str = "mixed"

    def __post_init__(self) -> None:
        check_common_fields(self, VERIFY_MODES, ON_CORRUPT)
        if self.batching not in BATCHING:
            raise LoaderConfigError(f"batching: expected one of {list(BATCHING)}, got {self.batching!r}")
        if self.modalities is not None:
            unknown = [m for m in self.modalities if m not in MODALITIES]
            if unknown or not self.modalities:
                raise LoaderConfigError(f"modalities: expected a non-empty list of {list(MODALITIES)}, "
                                        f"got {list(self.modalities)!r}")


def stream_weights(names: Sequence[str], sources: Sequence[str], sizes: Sequence[int],
                   weights: Mapping[str, float] | None) -> dict[str, Fraction] | None:
    """Per-stream weights from weights keyed by stream or by source. A source's weight is spread over its
    streams in proportion to their samples, exactly (Fractions). Keys that name nothing are kept, so the
    mixture's own check reports them."""
    if weights is None:
        return None
    per_source = {s: sum(n for src, n in zip(sources, sizes, strict=True) if src == s) for s in set(sources)}
    out: dict[str, Fraction] = {}
    for key, w in weights.items():
        if key in names:
            out[key] = w  # type: ignore[assignment]  # the mixture validates and converts it
        elif key in per_source:
            # checked here as the mixture checks a stream's weight: Fraction() would take "0.5" and True,
            # and raise OverflowError / ValueError on inf / nan, before the mixture sees the value
            if isinstance(w, bool) or not isinstance(w, Real) or not math.isfinite(w) or w < 0:
                raise MixtureError(f"weights[{key!r}]: expected a finite number >= 0, got {w!r}")
            for name, src, n in zip(names, sources, sizes, strict=True):
                if src == key:
                    if name in weights:
                        raise LoaderConfigError(f"weights: give {key!r} (a source) or {name!r} (its stream), "
                                                f"not both")
                    out[name] = Fraction(w).limit_denominator(10**6) * Fraction(n, per_source[key] or 1)
        else:
            out[key] = w  # type: ignore[assignment]
    return out


class PerModalityOrder:
    """Global positions -> (stream, index) when each optimizer step draws from one modality.

    Step t's modality and its ordinal o among that modality's steps come from the exact schedule over
    modalities; the step's positions are then positions [o*GB, (o+1)*GB) of that modality's own order
    (a GlobalOrder over every stream, with the other modalities' weights 0: stream indices and their
    seeded shuffles stay those of the whole split)."""

    def __init__(self, streams: Sequence[str], stream_modality: Sequence[str], sizes: np.ndarray,
                 mixture: Mixture, seed: int, steps: int, global_batch_size: int, split: str) -> None:
        self.gb = global_batch_size
        self.modalities = tuple(sorted({m for m, p in zip(stream_modality, mixture.numerators, strict=True) if p}))
        group_weights = [sum(p for m, p in zip(stream_modality, mixture.numerators, strict=True) if m == g)
                         for g in self.modalities]
        self.step_mixture = Mixture.from_weights(self.modalities, group_weights,
                                                 dict(zip(self.modalities, group_weights, strict=True)), split)
        self.steps = blend(self.step_mixture, steps)
        self.orders = []
        for g, steps_of_g in zip(self.modalities, self.steps.counts.tolist(), strict=True):
            within = {name: (p if m == g else 0)
                      for name, m, p in zip(streams, stream_modality, mixture.numerators, strict=True)}
            sub = Mixture.from_weights(streams, sizes.tolist(), within, split)
            # a modality drawn by no step of the epoch (tiny epochs) still gets a valid, unused order
            self.orders.append(GlobalOrder(sizes, sub, seed, max(steps_of_g, 1) * global_batch_size))

    def samples(self, epoch: int, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        positions = np.asarray(positions, dtype=np.int64)
        step, offset = np.divmod(positions, self.gb)
        if len(positions) and step.min() != step.max():
            raise ValueError("a micro-batch spans two optimizer steps")  # BatchPlan never builds one
        group, ordinal = self.steps.at(step[:1])
        return self.orders[int(group[0])].samples(epoch, int(ordinal[0]) * self.gb + offset)

    def step_modality(self, step: int) -> str:
        group, _ = self.steps.at(np.array([step]))
        return self.modalities[int(group[0])]


class MediaBatchDataset(IterableDataset):
    """This rank's micro-batches from (epoch, start) on, epoch after epoch without end: micro-batch u of
    the run (u = epoch * per_epoch + m) goes to worker u % W, and torch's DataLoader takes from its
    workers round-robin (in_order), restoring the sequence for any worker count. Yields (epoch, m, batch).

    Not stopping at the epoch's end lets the workers run on into the next epoch while the last steps of
    this one train: with short epochs (a few thousand images) restarting them every epoch (~1-2 s on 2
    cores) was most of the data wait."""

    def __init__(self, plan: BatchPlan, order: GlobalOrder | PerModalityOrder, reader: MediaSplitReader,
                 collate: Collate, epoch: int, start: int, buffer_flags: Any = None, buffer_slots: int = 0) -> None:
        super().__init__()
        self.plan, self.order, self.reader, self.collate = plan, order, reader, collate
        self.epoch, self.start = epoch, start
        self.buffer_flags, self.buffer_slots = buffer_flags, buffer_slots  # shared_buffers.BufferReleaser's

    def micro_batch(self, epoch: int, m: int) -> dict[str, Any]:
        streams, idx = self.order.samples(epoch, self.plan.positions(m))
        t0 = time.perf_counter()
        samples = [self.reader.read(int(s), int(i)) for s, i in zip(streams.tolist(), idx.tolist(), strict=True)]
        read_s = time.perf_counter() - t0
        batch = self.collate(samples, epoch)
        batch["read_s"] = read_s
        batch["document_ids"] = [s.id for s in samples]
        batch["streams"] = [self.reader.streams[int(s)].name for s in streams.tolist()]
        return batch

    def __iter__(self) -> Iterator[tuple[int, int, dict[str, Any]]]:
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        per_epoch = self.plan.micro_batches_per_epoch
        u = self.epoch * per_epoch + self.start + worker
        buffers = None
        if info is not None and self.buffer_flags is not None:
            buffers = install_worker_buffers(self.buffer_flags, worker, self.buffer_slots)
        while True:
            epoch, m = divmod(u, per_epoch)
            batch = self.micro_batch(epoch, m)
            if buffers is not None:
                batch[BUFFER_SLOTS_KEY] = buffers.take_used()
            yield epoch, m, batch if info is None else inline_small_tensors(batch)
            u += workers


def _as_is(batch: Any) -> Any:
    return batch


class MediaLoader(LoaderPosition):
    """`iter(loader)`: this rank's collated micro-batches from the current position to the end of the
    epoch. `state_dict()` / `load_state_dict()` as for PackedLoader (loader_position.py)."""

    STATE_FORMAT = "training.data.MediaLoader"
    STATE_VERSION = 1

    def __init__(self, cfg: MediaLoaderConfig, collate: Collate, rank: int = 0, world_size: int = 1) -> None:
        self.cfg = cfg
        self.collate = collate
        self.index = read_media_index(cfg.data_dir)
        self.reader = MediaSplitReader(self.index, cfg.split, cfg.modalities, cfg.verify, cfg.on_corrupt)
        streams = self.reader.streams
        if not streams:
            raise LoaderConfigError(f"split {cfg.split!r} of {cfg.data_dir} has no samples of the modalities "
                                    f"{list(cfg.modalities or MODALITIES)}")
        names = [s.name for s in streams]
        sizes = [int(n) for n in self.reader.sizes]
        weights = stream_weights(names, [s.source for s in streams], sizes, cfg.weights)
        self.mixture = Mixture.from_weights(names, sizes, weights, cfg.split)
        steps = self._plan_epoch(cfg, sizes, self.mixture, rank, world_size)
        self._stream: Iterator[tuple[int, int, dict[str, Any]]] | None = None
        self._stream_at: tuple[int, int] | None = None  # (epoch, micro-batch) the stream yields next
        self._stream_loader: Any = None  # the DataLoader iterator behind it (workers), to shut down
        self._buffers: BufferReleaser | None = None  # the workers' recycled pixel/feature buffers
        sizes_arr = np.asarray(sizes, dtype=np.int64)
        if cfg.batching == "per_modality":
            self.order: GlobalOrder | PerModalityOrder = PerModalityOrder(
                names, [s.modality for s in streams], sizes_arr, self.mixture, cfg.seed, steps,
                cfg.global_batch_size, cfg.split)
        else:
            self.order = GlobalOrder(sizes_arr, self.mixture, cfg.seed, steps * cfg.global_batch_size)
        self._start_position()

    @property
    def streams(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.reader.streams)

    @property
    def skipped_shards(self) -> tuple[Any, ...]:
        return tuple(self.reader.skipped)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        self._generation += 1
        return self._micro_batches(self._generation)

    def _open_stream(self) -> None:
        """Micro-batches from the current position on, continuing across epochs (MediaBatchDataset)."""
        self.close()
        workers = self.cfg.num_workers
        # per worker: its 2 prefetched batches (DataLoader's prefetch_factor), the one the caller holds and
        # the one it held before (released at the next batch): 4 buffers; more are allocated fresh
        self._buffers = BufferReleaser(workers, 4) if workers else None
        dataset = MediaBatchDataset(self.plan, self.order, self.reader, self.collate, self._epoch, self._micro,
                                    self._buffers.flags if self._buffers else None, 4)
        if workers:
            self._stream_loader = iter(DataLoader(dataset, batch_size=None, num_workers=self.cfg.num_workers,
                                                  collate_fn=_as_is, pin_memory=torch.cuda.is_available()))
            self._stream = self._stream_loader
        else:
            self._stream = iter(dataset)
        self._stream_at = (self._epoch, self._micro)

    def close(self) -> None:
        """Stop the workers (they otherwise run on, prefetching, until the loader is garbage-collected)."""
        shutdown = getattr(self._stream_loader, "_shutdown_workers", None)
        if shutdown is not None:
            shutdown()
        self._stream = self._stream_loader = self._stream_at = None

    def _micro_batches(self, generation: int) -> Iterator[dict[str, Any]]:
        # the stream of the previous iter() continues where the caller is (the next epoch, or the rest of
        # an epoch a caller stopped reading); after a seek it starts anew at the new position
        if self._stream is None or self._stream_at != (self._epoch, self._micro):
            self._open_stream()
        assert self._stream is not None
        epoch = self._epoch
        while self._epoch == epoch:
            at, (e, m, batch) = (self._epoch, self._micro), next(self._stream)
            if (e, m) != at:
                raise RuntimeError(f"media stream yielded micro-batch {m} of epoch {e}, expected {at[1]} of {at[0]}")
            if generation != self._generation:
                self.close()  # the batch taken is lost with it: the next iter() restarts at the position
                raise RuntimeError("this iterator was superseded by a later iter(loader): iterate the newest "
                                   "one (it continues from the last micro-batch handed out)")
            self._micro += 1
            if self._micro == self.plan.micro_batches_per_epoch:
                self._epoch, self._micro = self._epoch + 1, 0
            self._stream_at = (self._epoch, self._micro)
            yield self._buffers.handed_out(restore_inlined(batch)) if self._buffers is not None else batch

    def _identity(self) -> dict[str, Any]:
        return {
            "skipped_shards": [s.shard for s in self.reader.skipped],
            "seed": self.cfg.seed,
            "global_batch_size": self.cfg.global_batch_size,
            "samples_per_epoch": self.samples_per_epoch,
            "split": self.cfg.split,
            "modalities": sorted(self.cfg.modalities) if self.cfg.modalities else None,
            "batching": self.cfg.batching,
            "mixture": self.mixture.as_state(),
            "index_sha256": self.index.sha256,
        }
