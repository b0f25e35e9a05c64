"""The torch IterableDataset behind PackedLoader: whole, collated micro-batches of one rank and epoch.

With workers, the rank's micro-batches from `start` on are cut into groups of `group` consecutive ones
(batch_transfer.group_size) and worker w of W produces groups w, w+W, ..., each as one message (one shared
buffer, batch_transfer.py). torch's DataLoader takes from its workers in round-robin order (in_order=True,
the default), which restores groups 0, 1, 2, ... and skips a worker once it is exhausted, and the main
process splits each group in order: the micro-batch sequence is the same for any number of workers.
Reading and collation happen inside the worker. In process (no workers) micro-batches come one by one.
"""

from __future__ import annotations

from typing import Any

from torch.utils.data import IterableDataset, get_worker_info

from training.data.batch_plan import BatchPlan
from training.data.batch_transfer import pack
from training.data.collate import collate_packed, collate_padded, padded_width
from training.data.global_order import GlobalOrder
from training.data.length_buckets import LengthBuckets
from training.data.shard_reader import SplitReader


class MicroBatchDataset(IterableDataset):
    def __init__(self, plan: BatchPlan, order: GlobalOrder | LengthBuckets, reader: SplitReader, collate: str,
                 epoch: int, start: int, group: int | None, pad_to_multiple_of: int | None = None) -> None:
        """group: micro-batches per message when iterated by DataLoader workers; None in process.
        pad_to_multiple_of: collate="padded" rounds each micro-batch's width up to a multiple of it."""
        super().__init__()
        if not 0 <= start <= plan.micro_batches_per_epoch:
            raise ValueError(f"start micro-batch {start} outside [0, {plan.micro_batches_per_epoch}]")
        self.plan = plan
        self.order = order
        self.reader = reader
        self.padded = collate == "padded"
        self.epoch = epoch
        self.start = start
        self.group = group
        self.pad_to_multiple_of = pad_to_multiple_of

    def micro_batch(self, m: int) -> dict[str, Any]:
        src, idx = self.order.samples(self.epoch, self.plan.positions(m))
        if self.padded:
            width = padded_width(int(self.reader.lengths(src, idx).max()), self.pad_to_multiple_of)
            index = self.reader.index  # rows hold at most seq_len positions; collate_padded pads beyond
            return collate_padded(self.reader.read(src, idx, min(width, index.seq_len)), width, index.pad_id)
        return collate_packed(self.reader.read(src, idx))

    def __iter__(self):
        total = self.plan.micro_batches_per_epoch
        if self.group is None:
            for m in range(self.start, total):
                yield self.micro_batch(m)
            return
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        announce = getattr(self.order, "announce", None)  # remote_reader.PrefetchingOrder: the fetcher's board
        for first in range(self.start + worker * self.group, total, workers * self.group):
            if announce is not None:
                announce(worker, first)
            yield pack([self.micro_batch(m) for m in range(first, min(first + self.group, total))])
        if announce is not None:
            announce(worker, total)
