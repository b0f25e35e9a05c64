"""The main process's downloads for its DataLoader workers, and the board on which workers say what they read.

With DataLoader workers the main process owns the cache (remote_cache.ShardCache) and its whole budget;
workers wait for the files of the shards they read (remote_cache.CacheView). Worker w of W builds groups
w, w+W, ... of `group` consecutive micro-batches (dataset.py), one at a time and in order. Before it
starts a group it writes the group's first micro-batch into its slot of a WorkerBoard (W int64 slots in a
file of the cache directory, memory-mapped by the main process and by every worker), and once it has no
group left, the epoch's micro-batch count. The WorkerFetcher thread of the main process reads the board
and the consumed micro-batch m every POLL_S, and asks the cache for:
- pinned (fetched now, never evicted): the shards of the groups workers are building, at most W groups;
- planned (prefetched first needed first, as far as the budget allows): the groups not yet built in the
  window a DataLoader may have asked for, [m, m + (prefetch_factor x W + 1) x group), then the next
  prefetch_steps optimizer steps.
A finished group is a shared-memory message already, so its shards are neither pinned nor planned and the
budget goes to what comes next. Pinning the whole window instead (every group a DataLoader may have asked
for, finished or not) kept remote_loader_litdata's 2 workers waiting for downloads: with a cache of 10% of
the data the window (35 micro-batches of 8 samples: ~20 of the 22 shards that fit) left no room to
prefetch. The cache's budget check (remote_reader.check_window) still sizes the budget for the whole
window: the groups being built lie anywhere in it. A failure is written to ERROR_MARK, which the waiting
workers raise.
"""

from __future__ import annotations

import itertools
import os
import threading
from collections.abc import Callable, Hashable
from pathlib import Path

import numpy as np

from training.data.remote_cache import ERROR_MARK, ShardCache

BOARD_NAME = "WORKER_BOARD"
"""Boards are `<BOARD_NAME>-<pid>-<n>`: one per iteration with workers, so an earlier iterator's fetcher
that stops late (a superseded generator closed by the garbage collector) removes its own board only."""
NOT_STARTED = -1
_BOARDS = itertools.count()


def pinned_micro_batches(workers: int, group: int, prefetch_factor: int = 2) -> int:
    """Micro-batches workers may be reading within: the one read (no workers), or the (prefetch_factor x
    workers + 1) messages of `group` micro-batches a DataLoader may have asked its workers for."""
    return (prefetch_factor * workers + 1) * group if workers else 1


class WorkerBoard:
    """One int64 slot per DataLoader worker: the first micro-batch of the group it is building
    (NOT_STARTED before its first, the epoch's micro-batch count after its last). A slot is written by its
    worker alone, an aligned 8-byte store into a shared mapping, so a reader sees the old or the new value."""

    def __init__(self, path: Path, workers: int) -> None:
        self.path = path
        self.workers = workers
        self._slots: np.memmap | None = None
        self._pid = -1

    @classmethod
    def create(cls, path: Path, workers: int) -> WorkerBoard:
        tmp = path.with_name(f"{path.name}.new-{os.getpid()}")
        np.full(workers, NOT_STARTED, dtype=np.int64).tofile(tmp)
        os.replace(tmp, path)
        return cls(path, workers)

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_slots": None, "_pid": -1}  # each process maps the file itself

    def _map(self) -> np.memmap:
        if self._slots is None or self._pid != os.getpid():
            self._slots = np.memmap(self.path, dtype=np.int64, mode="r+", shape=(self.workers,))
            self._pid = os.getpid()
        return self._slots

    def announce(self, worker: int, first: int) -> None:
        self._map()[worker] = first

    def read(self) -> tuple[int, ...]:
        return tuple(self._map().tolist())

    def remove(self) -> None:
        self._slots = None
        self.path.unlink(missing_ok=True)


class WorkerFetcher:
    """Downloads for the DataLoader workers of one iteration (epoch `epoch`, from micro-batch `start`); see
    the module doc. The order (a remote_reader.PrefetchingOrder) carries the board to the workers."""

    POLL_S = 0.002  # how often the board and the consumed position are read (a micro-batch takes >= 0.1 ms)

    def __init__(self, order, position: Callable[[], tuple[int, int]], epoch: int, start: int,  # noqa: ANN001
                 workers: int, group: int, prefetch_factor: int = 2) -> None:
        """position: () -> (epoch, micro-batches consumed), read from the loader."""
        self.order = order
        self.position = position
        self.epoch = epoch
        self.start = start
        self.workers = workers
        self.group = group
        self.span = pinned_micro_batches(workers, group, prefetch_factor)
        self.cache = order.reader.process_cache()
        assert isinstance(self.cache, ShardCache)
        (self.cache.root / ERROR_MARK).unlink(missing_ok=True)
        for stale in self.cache.root.glob(f"{BOARD_NAME}-*"):  # left by a killed run: this rank's folder is
            if not stale.name.startswith(f"{BOARD_NAME}-{os.getpid()}-"):  # one main process's at a time
                stale.unlink(missing_ok=True)
        board_path = self.cache.root / f"{BOARD_NAME}-{os.getpid()}-{next(_BOARDS)}"
        self.board = WorkerBoard.create(board_path, workers)
        order.board = self.board  # set before the DataLoader pickles the dataset (and the order) for workers
        self._stop = threading.Event()
        self.error: BaseException | None = None
        self._memo: dict[int, list[Hashable]] = {}  # micro-batch -> its shards
        self._thread = threading.Thread(target=self._run, name="shard-fetcher", daemon=True)
        self._thread.start()

    def _keys(self, first: int, last: int) -> list[Hashable]:
        """The shards of micro-batches [first, last), each micro-batch looked up once (the windows slide a
        micro-batch or a group at a time)."""
        plan = self.order.plan
        keys: list[Hashable] = []
        for m in range(max(0, first), min(last, plan.micro_batches_per_epoch)):
            known = self._memo.get(m)
            if known is None:
                known = self._memo[m] = list(dict.fromkeys(
                    self.order.reader.shard_keys(*self.order.order.samples(self.epoch, plan.positions(m)))))
            keys += known
        return keys

    def wanted(self, consumed: int, building: tuple[int, ...]) -> tuple[list[Hashable], list[Hashable]]:
        """(pinned, planned) shards for the consumed micro-batch count and the board's slots."""
        total = self.order.plan.micro_batches_per_epoch
        pinned: list[Hashable] = []
        for first in building:
            if 0 <= first < total:
                pinned += self._keys(first, first + self.group)
        planned: list[Hashable] = []
        window_end = min(total, consumed + self.span)
        j = max(0, consumed - self.start) // self.group
        first = self.start + j * self.group
        while first < window_end:  # groups a DataLoader may have asked for: worker j % W builds group j
            if building[j % self.workers] <= first:  # not built yet (or being built: pinned too)
                planned += self._keys(max(first, consumed), first + self.group)
            j, first = j + 1, first + self.group
        ahead = self.order.prefetch_steps * self.order.plan.accumulation_steps
        return pinned, planned + self._keys(window_end, window_end + ahead)

    def _run(self) -> None:
        seen = None
        try:
            while not self._stop.is_set():
                epoch, consumed = self.position()
                building = self.board.read()
                if epoch == self.epoch and (consumed, building) != seen:
                    seen = (consumed, building)
                    for done in [m for m in self._memo if m < consumed]:
                        del self._memo[done]
                    pinned, planned = self.wanted(consumed, building)
                    self.cache.plan(pinned + planned)
                    self.cache.acquire(pinned)
                self._stop.wait(self.POLL_S)
        except BaseException as err:  # noqa: BLE001 - handed to the workers, which raise it in the main process
            self.error = err
            (self.cache.root / ERROR_MARK).write_text(f"{type(err).__name__}: {err}")

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        if self.order.board is self.board:  # a later iteration's fetcher may have put its own there
            self.order.board = None
        self.board.remove()
