"""Micro-batches from a DataLoader worker to the main process: several per message, in one shared buffer.

What a worker hands over crosses processes as pickled tensors, and each tensor's storage costs a
shared-memory segment and a file descriptor handed over a socket: on the shared 2-core machine a message
took 1.3-3.8 ms with 1 KB in it and 1.9-4.5 ms with 460 KB, so the count of messages, not their size,
sets the pace (one message per collated [8, 2048] micro-batch held 2 workers to ~5 M tokens/s). The
worker therefore writes all arrays of `group` consecutive micro-batches into one uint8 tensor, allocated
in shared memory up front (the send does not copy it again), with a small layout of (name, dtype, shape,
offset); the main process turns it back into views of that buffer, no copy. Views of a pinned buffer
are pinned, so pin_memory pins a whole message at once.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch

_ALIGN = 64  # every array starts on a cache line (and on its dtype's alignment, which .view(dtype) needs)
MESSAGE_BYTES = 4 << 20
"""Micro-batches per message: as many as fit in ~4 MiB (7 of [8, 2048]; 1 for big ones). In flight per
rank: prefetch_factor 2 x workers messages, ~16 MiB with 2 workers."""
MAX_GROUP = 16


def group_size(micro_batch_size: int, seq_len: int) -> int:
    # input_ids, labels, position_ids (int64), segment_ids (int32) [+ attention_mask int64 when padded]:
    # <= 36 bytes a position; the small tensors do not change the count
    per_batch = micro_batch_size * seq_len * 36
    return max(1, min(MAX_GROUP, MESSAGE_BYTES // per_batch))


class PackedBatches(NamedTuple):
    buffer: torch.Tensor
    """uint8, holding every tensor of the micro-batches."""
    layout: tuple[tuple[tuple[str, str, tuple[int, ...], int], ...], ...]
    """Per micro-batch: (key, dtype name, shape, byte offset) of each tensor."""
    scalars: tuple[tuple[tuple[str, Any], ...], ...]
    """Per micro-batch: keys whose values are plain python values (max_seqlen)."""
    keys: tuple[tuple[str, ...], ...]
    """Per micro-batch: its keys in their original order (a worker's batch reads like an in-process one)."""


def pack(batches: list[dict[str, Any]]) -> PackedBatches:
    layouts, offset = [], 0
    for batch in batches:
        layout = []
        for k, v in batch.items():
            if isinstance(v, torch.Tensor):
                layout.append((k, str(v.dtype).removeprefix("torch."), tuple(v.shape), offset))
                offset += -(-v.numel() * v.element_size() // _ALIGN) * _ALIGN
        layouts.append(tuple(layout))
    buffer = torch.empty(offset, dtype=torch.uint8).share_memory_()
    for batch, layout in zip(batches, layouts, strict=True):
        for k, _, _, off in layout:
            t = batch[k]
            buffer[off: off + t.numel() * t.element_size()].view(t.dtype).copy_(t.reshape(-1))
    scalars = tuple(tuple((k, v) for k, v in b.items() if not isinstance(v, torch.Tensor)) for b in batches)
    return PackedBatches(buffer, tuple(layouts), scalars, tuple(tuple(b) for b in batches))


def unpack(packed: PackedBatches) -> list[dict[str, Any]]:
    out = []
    for layout, scalars, keys in zip(packed.layout, packed.scalars, packed.keys, strict=True):
        batch: dict[str, Any] = dict(scalars)
        for k, dtype_name, shape, off in layout:
            dtype = getattr(torch, dtype_name)
            n = dtype.itemsize
            for d in shape:
                n *= d
            batch[k] = packed.buffer[off: off + n].view(dtype).view(shape)
        out.append({k: batch[k] for k in keys})
    return out


# -- the media loader's batches: small tensors inline ----------------------------------------------------
INLINE_MAX_BYTES = 1 << 20
"""Tensors up to this size cross from a worker pickled by value (a copy through the pipe: ~0.1 ms for the
~220 KB of a VLM batch's input_ids/attention_mask/labels) instead of one shared-memory segment and file
descriptor each (a socket round trip to the worker per tensor: 7 a batch cost the main process ~4.5 ms of
its ~15 ms per [32, 3, 224, 224] batch with 2 workers on 2 cores, measured with cProfile). The big
pixel_values / input_features are built in shared memory by the collators and still go by descriptor."""


class _Inline(NamedTuple):
    array: Any  # numpy.ndarray: pickles by value


def inline_small_tensors(batch: dict[str, Any]) -> dict[str, Any]:
    """Worker side: the batch with every tensor that is not already in shared memory and holds at most
    INLINE_MAX_BYTES replaced by its numpy view (undone by `restore_inlined`)."""
    return {k: _Inline(v.numpy()) if isinstance(v, torch.Tensor) and not v.is_shared()
            and v.numel() * v.element_size() <= INLINE_MAX_BYTES else v for k, v in batch.items()}


def restore_inlined(batch: dict[str, Any]) -> dict[str, Any]:
    """Main-process side: the tensors back (torch.from_numpy: no copy), keys in the worker's order."""
    return {k: torch.from_numpy(v.array) if isinstance(v, _Inline) else v for k, v in batch.items()}
