"""PackedLoader: a checkpointable, rank- and worker-sharded, mixture-weighted loader of `flat` shard sets.

Sample g of epoch e is a deterministic function of (seed, epoch, g) (global_order.py); optimizer step t
uses global samples [t*GB, (t+1)*GB) and rank r its contiguous block r of them (batch_plan.py). The
loader counts what it has handed to the caller, so `state_dict()` is exact even with workers that
prefetch, and `load_state_dict()` seeks: it sets two integers and the next `iter()` builds its dataset
at that micro-batch, reading nothing before it.

Corruption on read: `verify` chooses when shard files are hashed against the index ("none", "first_open"
in each process, "always" on every open: every epoch) and `on_corrupt` what a mismatch does ("stop": an
error naming the shard, the file and what differed; "skip": the shard is left out). Skipping is decided
once, when the loader is built, by a check every rank makes over every shard (shard_reader.SplitReader.
_skip_corrupt): every rank and worker then has the same shards and the same global order, and the
skipped shards are part of `state_dict()`, so a resume over different damage is refused, not silently
reordered. A shard that goes bad after the build is found lazily and stops the run in both modes.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.data import DataLoader

from training.data.batch_transfer import group_size, unpack
from training.data.collate import COLLATES
from training.data.dataset import MicroBatchDataset
from training.data.global_order import GlobalOrder
from training.data.length_buckets import BUCKET_WINDOW_STEPS, LengthBuckets
from training.data.loader_position import LoaderConfigError, LoaderPosition, LoaderStateError, check_common_fields
from training.data.mixture import Mixture
from training.data.remote_cache import is_remote
from training.data.remote_reader import (
    CacheConfig,
    CachedSplitReader,
    PrefetchingOrder,
    block_shuffle_of,
    check_shuffle,
    check_window,
    open_remote_split,
)
from training.data.shard_index import read_shard_index
from training.data.shard_reader import ON_CORRUPT, VERIFY_MODES, SkippedShard, SplitReader
from training.data.worker_fetch import WorkerFetcher

# re-exported: callers and tests import them from here
__all__ = ["CacheConfig", "LoaderConfig", "LoaderConfigError", "LoaderStateError", "PackedLoader"]


@dataclass(frozen=True)
class LoaderConfig:
    data_dir: str
    """A `flat` (memmap, the fastest) or `lance` format directory holding index.json
    (platform_assets/packing/SHARD_FORMAT.md); the same shard set gives the same batches in either."""
    split: str = "train"
    global_batch_size: int = 8
    """Samples per optimizer step over all ranks = micro_batch_size * accumulation_steps * world_size."""
    micro_batch_size: int = 1
    """Samples per forward pass per rank."""
    seed: int = 0
    weights: dict[str, float] | None = None
    """Mixture weight per source (every source of the split; 0 leaves one out); None: proportional to
    sample counts."""
    samples_per_epoch: int | None = None
    """None: the split's total samples (of the sources with a weight > 0)."""
    num_workers: int = 0
    verify: str = "none"
    """When shard files are hashed (sha256) against the index: "none" (sizes only, a stat per file when the
    loader is built and before each shard is opened), "first_open" (the first time each process opens a
    shard; DataLoader workers are new processes every epoch, so with workers that is once per epoch per
    worker that reads it), "always" (every open: every epoch, so a file changed during training is caught)."""
    on_corrupt: str = "stop"
    """"stop": a shard that differs from the index raises an error naming it; "skip": shards that differ when
    the loader is built are left out on every rank (hashed then unless verify is "none"), logged, counted
    in `skipped_shards` and `state_dict()`."""
    collate: str = "packed"
    """"packed" (fixed seq_len, segments) or "padded" (one document per sample, padded to the longest in
    the batch, length-bucketed)."""
    shuffle: str = "full"
    """"full": every pass of a source is a full permutation; "block": a block shuffle of `block_shards`
    shards at a time (permutation.py), so a cache of one block per source suffices (remote_reader.py)."""
    block_shards: int = 4
    cache: CacheConfig | None = None
    """Read data_dir (s3://bucket/prefix or a directory) through a local cache bounded in bytes; required
    for s3://."""
    pad_to_multiple_of: int | None = None
    """collate="padded": round each micro-batch's width up to a multiple of this (e.g. 8 or 64, tensor-core
    tiles); None: exactly the longest sample. The order and resume do not depend on it."""

    def __post_init__(self) -> None:
        check_common_fields(self, VERIFY_MODES, ON_CORRUPT)
        m = self.pad_to_multiple_of
        if m is not None and (isinstance(m, bool) or not isinstance(m, int) or m < 1):
            raise LoaderConfigError(f"pad_to_multiple_of: expected None or an int >= 1, got {m!r}")
        if self.collate not in COLLATES:
            raise LoaderConfigError(f"collate: expected one of {list(COLLATES)}, got {self.collate!r}")
        check_shuffle(self.shuffle, self.block_shards)
        if is_remote(str(self.data_dir)) and self.cache is None:
            raise LoaderConfigError(f"data_dir {self.data_dir}: a remote shard set needs `cache` (dir, max_bytes)")
        if self.cache is not None and self.collate == "padded":
            raise LoaderConfigError("cache: collate='padded' reads every sample's length when the loader is "
                                    "built (all shards); cached reading supports collate='packed'")


def _as_is(batch: Any) -> Any:
    return batch  # the dataset yields collated batches; DataLoader's default_convert would walk them again


class PackedLoader(LoaderPosition):
    STATE_FORMAT = "training.data.PackedLoader"
    STATE_VERSION = 1
    # identity keys added after version 1 was written, with the value a state that lacks them means
    # states saved before on_corrupt existed skipped nothing; before `shuffle`, every pass was a full permutation
    ADDED_KEYS = {"skipped_shards": [], "shuffle": "full"}

    def __init__(self, cfg: LoaderConfig, rank: int = 0, world_size: int = 1) -> None:
        self.cfg = cfg
        if cfg.cache is not None:  # remote (or cached local) files: fetched into the cache as needed
            self.index, self.reader = open_remote_split(str(cfg.data_dir), cfg.split, cfg.verify, cfg.on_corrupt,
                                                        cfg.cache, rank, world_size)
        else:
            self.index = read_shard_index(cfg.data_dir)
            reader = SplitReader
            if self.index.format == "lance":  # the order is the same for every format: only the reader differs
                from training.data.lance_reader import LanceSplitReader as reader
            elif self.index.format == "flat_varlen":
                from training.data.flat_varlen_reader import VarlenSplitReader as reader
            self.reader = reader(self.index, cfg.split, cfg.verify, cfg.on_corrupt)
        self.mixture = Mixture.from_weights(self.reader.sources, self.reader.sizes.tolist(), cfg.weights, cfg.split)
        steps = self._plan_epoch(cfg, self.reader.sizes, self.mixture, rank, world_size)
        order = GlobalOrder(self.reader.sizes, self.mixture, cfg.seed, steps * cfg.global_batch_size,
                            block_shuffle_of(self.reader, cfg.shuffle, cfg.block_shards))
        if isinstance(self.reader, CachedSplitReader):
            check_window(self.reader, self.mixture, cfg.shuffle, cfg.block_shards, self.plan,
                         cfg.num_workers, group_size(cfg.micro_batch_size, self.index.seq_len))
            self.order = PrefetchingOrder(order, self.reader, self.plan, cfg.cache.prefetch_steps)
        elif cfg.collate == "padded":
            self.reader.check_one_segment_per_sample()
            self.order: GlobalOrder | LengthBuckets = LengthBuckets(order, self.reader.lengths, cfg.global_batch_size)
        else:
            self.order = order
        self._start_position()

    @property
    def skipped_shards(self) -> tuple[SkippedShard, ...]:
        """Shards left out because their files differ from the index (on_corrupt="skip"), with why."""
        return self.reader.skipped

    @property
    def skipped_samples(self) -> int:
        return sum(s.samples for s in self.reader.skipped)

    # -- iteration ----------------------------------------------------------------------------------
    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        """This rank's micro-batches from the current position to the end of the current epoch; then the
        epoch advances (the next `iter()` starts the next epoch)."""
        self._generation += 1
        if self.cfg.verify == "always":
            self.reader.drop_maps()  # reopen, so rehash, every shard this epoch reads (workers start unmapped)
        return self._micro_batches(self._generation)

    def _micro_batches(self, generation: int) -> Iterator[dict[str, Any]]:
        workers = self.cfg.num_workers
        pin = torch.cuda.is_available()
        group = group_size(self.cfg.micro_batch_size, self.index.seq_len) if workers else None
        dataset = MicroBatchDataset(self.plan, self.order, self.reader, self.cfg.collate, self._epoch, self._micro,
                                    group, self.cfg.pad_to_multiple_of)
        messages = fetcher = None
        if workers and isinstance(self.order, PrefetchingOrder):  # the main process downloads for its workers
            fetcher = WorkerFetcher(self.order, lambda: (self._epoch, self._micro), self._epoch, self._micro,
                                    workers, group)
        if workers:
            # Lance's runtime threads are not fork-safe (pylance warns, and a worker forked while one holds a
            # lock can hang): lance workers start from a forkserver, flat ones fork as before; so do cached
            # (remote) ones: the AWS SDK's state and a prefetch thread's locks must not be copied into a worker
            ctx = "forkserver" if self.index.format == "lance" or isinstance(self.reader, CachedSplitReader) else None
            messages = iter(DataLoader(dataset, batch_size=None, num_workers=workers, collate_fn=_as_is,
                                       pin_memory=pin, multiprocessing_context=ctx))
            it = (batch for message in messages for batch in unpack(message))
        else:
            # in process the DataLoader would only add its bookkeeping (~30 us a batch, a fifth of the
            # batch's cost): iterate the dataset itself and pin here, as its single-process path does
            it = iter(dataset)
        try:
            for item in self._hand_out(it, generation):
                if pin and not workers:
                    item = {k: v.pin_memory() if isinstance(v, torch.Tensor) else v for k, v in item.items()}
                yield item
        finally:
            if fetcher is not None:
                fetcher.stop()
            if isinstance(self.order, PrefetchingOrder):
                self.order.close()
            shutdown = getattr(messages, "_shutdown_workers", None)
            if shutdown is not None:  # stop workers now, not when the iterator is garbage-collected
                shutdown()

    # -- checkpointing ------------------------------------------------------------------------------
    def _identity(self) -> dict[str, Any]:
        """What fixes the global order: a state saved under other values would resume a different one."""
        return {
            # first: skipping also changes samples_per_epoch and the mixture, but this is the cause to name
            "skipped_shards": [s.shard for s in self.reader.skipped],
            "seed": self.cfg.seed,
            "global_batch_size": self.cfg.global_batch_size,
            "samples_per_epoch": self.samples_per_epoch,
            "split": self.cfg.split,
            "collate": self.cfg.collate,
            "bucket_window_steps": BUCKET_WINDOW_STEPS if self.cfg.collate == "padded" else None,
            "mixture": self.mixture.as_state(),
            "index_sha256": self.index.sha256,
            "shuffle": "full" if self.cfg.shuffle == "full" else f"block:{self.cfg.block_shards}",
        }
