"""Reading a `flat` shard set from S3 (or any directory) through a byte-bounded local cache.

`open_remote_split` fetches index.json, and returns a CachedSplitReader: the memmap SplitReader of
shard_reader.py over the cache directory, which never stats files it does not hold and asks the
process's ShardCache (remote_cache.py) for a shard before mapping it. `PrefetchingOrder` wraps the global
order: for each micro-batch it pins the shards it reads and plans the shards of this rank's next
`prefetch_steps` optimizer steps, so downloads overlap training. The order itself is untouched (same
batches as from local files); with `shuffle="block"` (permutation.py) a window of `block_shards` shards
per source is all a process needs at a time, and `check_window` refuses a budget below that window.

Layout: <cache.dir>/<index sha256[:16]>/index.json, and the shards of split S read by process P under
<...>/<S>/<P>, P = "main" (no DataLoader workers) or "worker-<id>", each with max_bytes / processes.
Loaders are built on the main process, which prunes what the current layout does not use (other builds'
directories, other worker counts'), so the total stays within max_bytes per split's loader: a cache
directory belongs to one run.
"""

from __future__ import annotations

import os
import shutil
from bisect import bisect_right
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
from torch.utils.data import get_worker_info

from training.data.batch_plan import BatchPlan
from training.data.global_order import GlobalOrder
from training.data.loader_position import LoaderConfigError
from training.data.mixture import Mixture
from training.data.permutation import SHUFFLES, BlockShuffle
from training.data.remote_cache import CacheBudgetError, ObjectStore, ShardCache
from training.data.shard_index import INDEX_NAME, FlatIndex, read_flat_index
from training.data.shard_reader import SplitReader


@dataclass(frozen=True)
class CacheConfig:
    dir: str
    """Local directory of the cache (created; its contents are managed by the loader)."""
    max_bytes: int
    """Bound on the shard files held at once, over all processes of one split's loader (index.json aside)."""
    prefetch_steps: int = 4
    """Optimizer steps ahead whose shards are downloaded in the background (0: on demand only)."""
    max_attempts: int = 5
    """Attempts per file download (a transient error or a checksum mismatch), backoff 0.2 s doubling."""
    endpoint_url: str | None = None
    """S3 endpoint (MinIO, moto); None: AWS_ENDPOINT_URL or AWS itself."""
    region: str = "us-east-1"
    request_attempts: int = 5
    """Attempts per S3 request inside pyarrow (AWS's standard retry mode), as the platform's storage."""

    def check(self) -> None:
        for name, low in (("max_bytes", 1), ("prefetch_steps", 0), ("max_attempts", 1), ("request_attempts", 1)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < low:
                raise LoaderConfigError(f"cache.{name}: expected an int >= {low}, got {v!r}")


def check_shuffle(shuffle: str, block_shards: int) -> None:
    if shuffle not in SHUFFLES:
        raise LoaderConfigError(f"shuffle: expected one of {list(SHUFFLES)}, got {shuffle!r}")
    if isinstance(block_shards, bool) or not isinstance(block_shards, int) or block_shards < 1:
        raise LoaderConfigError(f"block_shards: expected an int >= 1, got {block_shards!r}")


def block_shuffle_of(reader: SplitReader, shuffle: str, block_shards: int) -> BlockShuffle | None:
    """The block shuffle over the shards the reader uses (None for the full permutation)."""
    if shuffle == "full":
        return None
    used = reader._used  # noqa: SLF001 - the shards in use after on_corrupt="skip"; shard_reader is not ours
    return BlockShuffle([[reader.sets[s].shards[k].samples for k in ks] for s, ks in enumerate(used)], block_shards)


class CachedSplitReader(SplitReader):
    """SplitReader over the process's cache directory; shards are fetched before they are mapped."""

    def __init__(self, index: FlatIndex, split: str, verify: str, store: ObjectStore, cache: CacheConfig,
                 processes: int) -> None:
        self.store = store
        self.cache_cfg = cache
        self.share = cache.max_bytes // processes
        self.split_dir = index.root / split
        self._cache: ShardCache | None = None
        self._cache_pid = -1
        super().__init__(index, split, verify, "stop")

    def _open_files(self) -> None:
        """Nothing is local yet: sizes and checksums are checked when each file is downloaded."""

    def __getstate__(self) -> dict:
        return {**super().__getstate__(), "_cache": None}

    def process_cache(self) -> ShardCache:
        # a forked worker inherits the parent's object (not pickled): its own cache, directory and locks
        if self._cache is None or self._cache_pid != os.getpid():
            self._cache_pid = os.getpid()
            info = get_worker_info()
            root = self.split_dir / ("main" if info is None else f"worker-{info.id}")
            self.index = replace(self.index, root=root)  # _MappedShard opens files under index.root
            shards = {(s, k): sh.files() for s, k, sh in self._used_shards()}
            self._cache = ShardCache(self.store, root, shards, self.share, self.cache_cfg.max_attempts,
                                     on_evict=lambda key: self._mapped.pop(key, None))
        return self._cache

    def shard_keys(self, src: np.ndarray, idx: np.ndarray) -> list[tuple[int, int]]:
        """The (source, shard) of each sample, in order."""
        return [(s, self._used[s][bisect_right(self._starts[s], i) - 1])
                for s, i in zip(src.tolist(), idx.tolist(), strict=True)]

    def _shard(self, src: int, k: int):  # noqa: ANN202 - shard_reader's private _MappedShard
        if (src, k) not in self._mapped:
            self.process_cache().acquire([(src, k)], add=True)
        return super()._shard(src, k)


class PrefetchingOrder:
    """The global order, unchanged; asking it for a micro-batch also pins its shards and plans the next."""

    def __init__(self, order: GlobalOrder, reader: CachedSplitReader, plan: BatchPlan, prefetch_steps: int) -> None:
        self.order = order
        self.reader = reader
        self.plan = plan
        self.prefetch_steps = prefetch_steps
        self.length = order.length
        self._planned: tuple[int, int] | None = None

    def __len__(self) -> int:
        return self.length

    def _ahead(self, last: int) -> np.ndarray:
        """This rank's positions after `last`: the rest of its block of the step, then its block of each of
        the next prefetch_steps steps (within the epoch)."""
        gb, per = self.plan.global_batch_size, self.plan.global_batch_size // self.plan.world_size
        step = last // gb
        parts = [np.arange(last + 1, step * gb + (self.plan.rank + 1) * per, dtype=np.int64)]
        for t in range(step + 1, step + 1 + self.prefetch_steps):
            first = t * gb + self.plan.rank * per
            parts.append(np.arange(first, first + per, dtype=np.int64))
        ahead = np.concatenate(parts)
        return ahead[ahead < self.length]

    def samples(self, epoch: int, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        src, idx = self.order.samples(epoch, positions)
        cache = self.reader.process_cache()
        cache.acquire(self.reader.shard_keys(src, idx))
        if self.prefetch_steps and len(positions):
            last = int(np.max(positions))
            step = (epoch, last // self.plan.global_batch_size)
            if step != self._planned:  # once per step: the plan covers the step's remaining micro-batches
                self._planned = step
                ahead = self._ahead(last)
                if len(ahead):
                    cache.plan(self.reader.shard_keys(*self.order.samples(epoch, ahead)))
        return src, idx


def check_window(reader: CachedSplitReader, mixture: Mixture, shuffle: str, block_shards: int,
                 micro_batch_size: int, processes: int) -> None:
    """Refuse a budget that cannot hold what one process reads at a time: per source drawn from, its
    largest `block_shards` shards plus those a micro-batch crossing into the next block touches (block
    shuffle), or every shard (a full permutation reads any shard at any time)."""
    need = 0
    for src, ks in enumerate(reader._used):  # noqa: SLF001
        if not mixture.numerators[src]:
            continue
        sizes = sorted((sum(f.bytes for f in reader.sets[src].shards[k].files()) for k in ks), reverse=True)
        window = len(sizes) if shuffle == "full" else block_shards + min(block_shards, micro_batch_size - 1)
        need += sum(sizes[:window])
    if reader.share < need:
        cfg = reader.cache_cfg
        per = f" ({reader.share} per process over {processes} DataLoader workers)" if processes > 1 else ""
        hint = ("shuffle='full' may read any shard at any step, so the cache must hold every shard: use "
                "shuffle='block'" if shuffle == "full" else
                f"raise max_bytes, or lower block_shards ({block_shards}) or num_workers")
        raise LoaderConfigError(f"cache.max_bytes {cfg.max_bytes}{per} < {need} bytes, the shards one process "
                                f"needs at a time (one block of each source): {hint}")


def open_remote_split(data_dir: str, split: str, verify: str, on_corrupt: str, cache: CacheConfig,
                      num_workers: int) -> tuple[FlatIndex, CachedSplitReader]:
    """Fetch the index of the shard set at `data_dir` (s3://bucket/prefix or a directory) into the cache
    and build the split's reader; prune cache directories this layout does not use."""
    cache.check()
    if on_corrupt != "stop":
        raise LoaderConfigError("on_corrupt='skip' needs every shard hashed when the loader is built, which "
                                "for a remote set means downloading it all: use 'stop' (downloads are verified)")
    store = ObjectStore(data_dir, cache.endpoint_url, cache.region, cache.request_attempts)
    try:
        raw = store.read_bytes(INDEX_NAME)
    except OSError as err:
        raise LoaderConfigError(f"{store.url(INDEX_NAME)}: cannot read the shard index ({err})") from None
    import hashlib

    base = Path(cache.dir)
    build = hashlib.sha256(raw).hexdigest()[:16]
    root = base / build
    root.mkdir(parents=True, exist_ok=True)
    for other in base.iterdir():
        if other.is_dir() and other.name != build:
            shutil.rmtree(other, ignore_errors=True)  # another build's shards: stale, and outside the budget
    tmp = root / f"{INDEX_NAME}.tmp"
    tmp.write_bytes(raw)
    tmp.replace(root / INDEX_NAME)
    index = read_flat_index(root)  # a lance set is refused here: only flat files are cached
    split_dir = root / split
    keep = {"main"} if num_workers == 0 else {f"worker-{w}" for w in range(num_workers)}
    if split_dir.is_dir():
        for proc in split_dir.iterdir():
            if proc.name not in keep:
                shutil.rmtree(proc, ignore_errors=True)
    try:
        reader = CachedSplitReader(index, split, verify, store, cache, max(1, num_workers))
    except CacheBudgetError as err:
        raise LoaderConfigError(f"cache.max_bytes: {err}") from None
    return index, reader
