"""shared_buffers.py in one process: a worker's slot is reused only after every storage of the batch that
used it is gone in the main process (a view counts), a busy set of slots falls back to fresh segments, a
size change replaces the slot's segment. (The two processes, with real workers, are in test_media_loader.)"""

import torch

from training.data.shared_buffers import SLOTS_KEY, BufferReleaser, WorkerBuffers


def _worker_batch(buffers: WorkerBuffers, shape=(2, 3, 4)) -> dict:
    pixels = buffers.empty_float32(shape)
    pixels.fill_(1.0)
    return {"pixel_values": pixels, "ids": [1, 2], SLOTS_KEY: buffers.take_used()}


def _received(batch: dict) -> dict:
    """What the main process gets: its own mapping of each shared tensor (here: a shared copy)."""
    return {k: v.clone().share_memory_() if isinstance(v, torch.Tensor) else v for k, v in batch.items()}


def test_a_slot_is_reused_only_after_its_batch_and_every_view_of_it_are_gone():
    main = BufferReleaser(workers=2, slots=2)
    worker = WorkerBuffers(main.flags, worker=1, slots=2)
    sent = _worker_batch(worker)
    ptr = sent["pixel_values"].data_ptr()
    first = main.handed_out(_received(sent))
    assert SLOTS_KEY not in first and first["ids"] == [1, 2] and list(main.flags) == [0, 0, 1, 0]
    view = first["pixel_values"][0]
    del first
    second = main.handed_out(_received(_worker_batch(worker)))  # the view still holds slot 2
    assert list(main.flags) == [0, 0, 1, 1]
    fresh = worker.empty_float32((2, 3, 4))  # no free slot: a fresh segment, not recycled
    assert fresh.is_shared() and worker.take_used() == [] and fresh.data_ptr() != ptr
    del view
    main.release_expired()
    assert list(main.flags) == [0, 0, 0, 1]  # slot 2 is free again, slot 3 still held by `second`
    again = _worker_batch(worker)
    assert again["pixel_values"].data_ptr() == ptr and again[SLOTS_KEY] == [2]
    del second
    main.release_expired()
    assert list(main.flags) == [0, 0, 1, 0]


def test_a_batch_of_another_size_replaces_the_slot_segment():
    main = BufferReleaser(workers=1, slots=1)
    worker = WorkerBuffers(main.flags, worker=0, slots=1)
    main.handed_out(_received(_worker_batch(worker, (2, 3, 4))))
    main.release_expired()
    assert list(main.flags) == [0]
    smaller = worker.empty_float32((1, 3, 4))
    assert smaller.shape == (1, 3, 4) and smaller.untyped_storage().nbytes() == 12 * 4 and smaller.is_shared()


def test_pinned_batches_free_their_slots_at_once():
    """With pin_memory the caller gets pinned copies (not shared): nothing of the worker's buffer is held."""
    main = BufferReleaser(workers=1, slots=1)
    worker = WorkerBuffers(main.flags, worker=0, slots=1)
    batch = _worker_batch(worker)
    batch["pixel_values"] = batch["pixel_values"].clone()  # what the pin thread hands over instead
    kept = main.handed_out(batch)
    main.release_expired()
    assert list(main.flags) == [0] and kept["pixel_values"].shape == (2, 3, 4)
