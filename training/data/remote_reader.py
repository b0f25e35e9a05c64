"""Reading a `flat` shard set from S3 (or any directory) through a byte-bounded local cache.

`open_remote_split` fetches index.json, and returns a CachedSplitReader: the memmap SplitReader of
shard_reader.py over the cache directory, which never stats files it does not hold and asks the
process's ShardCache (remote_cache.py) for a shard before mapping it. `PrefetchingOrder` wraps the global
order: for each micro-batch it pins the shards it reads and plans the shards of this rank's next
`prefetch_steps` optimizer steps, so downloads overlap training. The order itself is untouched (same
batches as from local files); with `shuffle="block"` (permutation.py) a window of `block_shards` shards
per source is all a process needs at a time, and `check_window` refuses a budget below that window.

Layout: <cache.dir>/<index sha256[:16]>/rank-<r>-of-<w>/index.json, and the shards of split S under
<...>/<S>/main, owned by the rank's main process (remote_cache.py): ranks on one node (torchrun) share
cache.dir, so each has its own folder and its own max_bytes (their evictions would otherwise delete each
other's shards, and each would count the others' files against its budget). With DataLoader workers, a
`WorkerFetcher` thread of the main process (worker_fetch.py) pins and fetches the shards of the groups
workers are building and prefetches those of the groups they will build, and workers wait for their files
(CacheView). Loaders are built on the main process, which prunes what the layout does not
use: build folders of other shard sets and rank folders of another world size, and only folders that
carry CACHE_MARK (written when the cache creates them): cache.dir may hold anything else.
"""

from __future__ import annotations

import os
import re
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
from training.data.remote_cache import CacheBudgetError, CacheView, ObjectStore, ShardCache
from training.data.shard_index import INDEX_NAME, FlatIndex, read_flat_index
from training.data.shard_reader import SplitReader
from training.data.worker_fetch import WorkerBoard, pinned_micro_batches


@dataclass(frozen=True)
class CacheConfig:
    dir: str
    """Local directory of the cache (created; its contents are managed by the loader)."""
    max_bytes: int
    """Bound on the shard files held at once, over all processes (main and DataLoader workers) of one rank's
    loader of one split, index.json aside. Per rank: ranks sharing cache.dir on a node each hold up to
    max_bytes in their own folder, so the node's disk needs ranks-per-node x max_bytes."""
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

    def __init__(self, index: FlatIndex, split: str, verify: str, store: ObjectStore, cache: CacheConfig) -> None:
        self.store = store
        self.cache_cfg = cache
        self.share = cache.max_bytes
        self.split_dir = index.root / split
        self._cache: ShardCache | None = None
        self._cache_pid = -1
        super().__init__(index, split, verify, "stop")

    def _open_files(self) -> None:
        """Nothing is local yet: sizes and checksums are checked when each file is downloaded."""

    def __getstate__(self) -> dict:
        return {**super().__getstate__(), "_cache": None}

    @property
    def root(self) -> Path:
        return self.split_dir / "main"

    def process_cache(self) -> ShardCache | CacheView:
        """The main process's cache, or in a DataLoader worker a view that waits for the main's downloads."""
        if self._cache is None or self._cache_pid != os.getpid():  # a forked child holds a copy: not its own
            self._cache_pid = os.getpid()
            self.index = replace(self.index, root=self.root)  # _MappedShard opens files under index.root
            shards = {(s, k): sh.files() for s, k, sh in self._used_shards()}
            if get_worker_info() is not None:
                self._cache = CacheView(self.root, shards)
            else:
                self._cache = ShardCache(self.store, self.root, shards, self.share, self.cache_cfg.max_attempts,
                                         on_evict=lambda key: self._mapped.pop(key, None))
        return self._cache

    def keep_maps(self, keys: list[tuple[int, int]]) -> None:
        """Close the maps of shards other than `keys`: in a worker, the main process may evict any shard
        its micro-batches no longer need, and an unlinked file stays on disk while it is mapped."""
        for key in [k for k in self._mapped if k not in set(keys)]:
            del self._mapped[key]

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
        self.board: WorkerBoard | None = None
        """Set by worker_fetch.WorkerFetcher while DataLoader workers read for the main process."""

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

    def announce(self, worker: int, first: int) -> None:
        """In DataLoader worker `worker`: it starts the group of micro-batches from `first` (the epoch's
        micro-batch count: it has no group left), so the main process may evict its previous group's shards,
        whose maps are closed first (an unlinked file's blocks stay in use while it is mapped)."""
        if self.board is not None:
            self.reader.keep_maps([])
            self.board.announce(worker, first)

    def close(self) -> None:
        """The iteration ended: this process's queued prefetches are not needed (a resume plans anew)."""
        cache = self.reader._cache
        if isinstance(cache, ShardCache) and self.reader._cache_pid == os.getpid():
            cache.cancel()
        self._planned = None

    def samples(self, epoch: int, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        src, idx = self.order.samples(epoch, positions)
        cache = self.reader.process_cache()
        keys = self.reader.shard_keys(src, idx)
        cache.acquire(keys)
        if isinstance(cache, CacheView):
            self.reader.keep_maps(keys)
            return src, idx  # the main process's WorkerFetcher plans
        if self.prefetch_steps and len(positions):
            last = int(np.max(positions))
            step = (epoch, last // self.plan.global_batch_size)
            if step != self._planned:  # once per step: the plan covers the step's remaining micro-batches
                self._planned = step
                ahead = self._ahead(last)
                if len(ahead):
                    cache.plan(self.reader.shard_keys(*self.order.samples(epoch, ahead)))
        return src, idx


def check_window(reader: CachedSplitReader, mixture: Mixture, shuffle: str, block_shards: int, plan: BatchPlan,
                 workers: int = 0, group: int = 1) -> None:
    """Refuse a budget that cannot hold what one process reads at a time: per source drawn from, the
    largest shards of the blocks its samples read at once may touch (block shuffle), or every shard (a
    full permutation reads any shard at any time). Read at once: a micro-batch, or with DataLoader workers
    the (2 x workers + 1) x group micro-batches a DataLoader may have asked them for (pinned_micro_batches),
    among which they build any W groups at once; they cover R global positions, of which source s holds
    <= ceil(w_s R) + 1 (the mixture's quota), consecutive in its pass: they reach the blocks _blocks_reached
    counts, and a sample past the first block's shards adds at most one shard."""
    pinned = pinned_micro_batches(workers, group)
    per_rank = plan.global_batch_size // plan.world_size
    span = pinned * plan.micro_batch_size if plan.world_size == 1 else \
        -(-(pinned - 1) // plan.accumulation_steps) * plan.global_batch_size + per_rank  # other ranks' in between
    total = sum(mixture.numerators)
    need = 0
    for src, ks in enumerate(reader._used):  # noqa: SLF001
        if not mixture.numerators[src]:
            continue
        sizes = sorted((sum(f.bytes for f in reader.sets[src].shards[k].files()) for k in ks), reverse=True)
        if shuffle == "full":
            window = len(sizes)
        else:
            samples = min(span, -(-span * mixture.numerators[src] // total) + 1)
            blocks = _blocks_reached(sorted(reader.sets[src].shards[k].samples for k in ks), block_shards, samples)
            window = min(blocks * block_shards, block_shards + samples - 1, len(sizes))
        need += sum(sizes[:window])
    if reader.share < need:
        hint = ("shuffle='full' may read any shard at any step, so the cache must hold every shard: use "
                "shuffle='block'" if shuffle == "full" else f"raise max_bytes or lower block_shards ({block_shards})"
                + (" or num_workers" if workers else ""))
        held = (f"the micro-batches {workers} DataLoader workers may be building: {pinned} micro-batches, "
                f"{pinned * plan.micro_batch_size} samples" if workers else
                f"a micro-batch: {plan.micro_batch_size} samples")
        raise LoaderConfigError(f"cache.max_bytes {reader.cache_cfg.max_bytes} < {need} bytes, the shards needed "
                                f"at a time (the blocks of each source read by {held}): {hint}")


def _blocks_reached(counts: list[int], block_shards: int, samples: int) -> int:
    """The most blocks `samples` consecutive samples of one source's pass can touch: the first one (entered
    anywhere) and then k more, where k is the fewest blocks whose samples can add up to samples - 1. k blocks
    hold k x block_shards distinct shards (one of them may be the pass's shorter last block), so at least
    the samples of that many smallest shards. Sizing every block by the smallest shard instead (a set's
    short last shard: 3 samples beside 16-sample ones) asked remote_loader_litdata's 2-worker, 10% cache
    for 5.26 MB of a 1.53 MB budget that its reads had always stayed within. `counts` sorted ascending."""
    short = len(counts) % block_shards
    covered, k = 0, 0
    while covered < samples - 1:
        k += 1
        shards = min(len(counts), k * block_shards - (block_shards - short if short else 0))
        if shards >= len(counts) and sum(counts) < samples - 1:
            return -(-len(counts) // block_shards) + 1  # more than a pass: every block (and the next pass's first)
        covered = sum(counts[:shards])
    return 1 + k


CACHE_MARK = ".training-shard-cache"
"""Written into each folder the cache creates under cache.dir: pruning removes only folders that carry it."""
_BUILD_NAME = re.compile(r"[0-9a-f]{16}")
_RANK_NAME = re.compile(r"rank-(\d+)-of-(\d+)")


def _owned(folder: Path, pattern: re.Pattern) -> bool:
    return folder.is_dir() and not folder.is_symlink() and pattern.fullmatch(folder.name) is not None \
        and (folder / CACHE_MARK).is_file()


def _make_owned(folder: Path, what: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / CACHE_MARK).write_text(f"training.data remote shard cache: {what}; removed when stale\n")


def open_remote_split(data_dir: str, split: str, verify: str, on_corrupt: str, cache: CacheConfig,
                      rank: int = 0, world_size: int = 1) -> tuple[FlatIndex, CachedSplitReader]:
    """Fetch the index of the shard set at `data_dir` (s3://bucket/prefix or a directory) into this rank's
    folder of the cache and build the split's reader; prune cache folders this layout does not use."""
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
    build_dir = base / build
    _make_owned(build_dir, f"shard set {data_dir}")
    for other in base.iterdir():  # another build's shards: stale, and outside the budget
        if other.name != build and _owned(other, _BUILD_NAME):
            shutil.rmtree(other, ignore_errors=True)
    root = build_dir / f"rank-{rank}-of-{world_size}"
    _make_owned(root, f"rank {rank} of {world_size}")
    for other in build_dir.iterdir():  # a run of another world size left these: ranks of this one keep theirs
        match = _RANK_NAME.fullmatch(other.name)
        if match and int(match[2]) != world_size and _owned(other, _RANK_NAME):
            shutil.rmtree(other, ignore_errors=True)
    tmp = root / f"{INDEX_NAME}.tmp"
    tmp.write_bytes(raw)
    tmp.replace(root / INDEX_NAME)
    index = read_flat_index(root)  # a lance set is refused here: only flat files are cached
    split_dir = root / split
    keep = {"main"}  # directories of an earlier layout (per-worker caches) are dropped
    if split_dir.is_dir():
        for proc in split_dir.iterdir():
            if proc.name not in keep and proc.is_dir():
                shutil.rmtree(proc, ignore_errors=True)
    try:
        reader = CachedSplitReader(index, split, verify, store, cache)
    except CacheBudgetError as err:
        raise LoaderConfigError(f"cache.max_bytes: {err}") from None
    return index, reader
