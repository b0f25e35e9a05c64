"""The packing stage's Lance set writer when the stage fails mid-set: `abort()` ends the shard's writer
thread without a commit and removes the dataset, committed shards included (the set is incomplete)."""

from __future__ import annotations

import os
import threading

import numpy as np
import pytest

pytest.importorskip("lance")

from platform_assets.packing.formats.base import SetHeader  # noqa: E402
from platform_assets.packing.formats.lance import LanceSetWriter  # noqa: E402
from platform_assets.packing.samples import ShardSamples  # noqa: E402
from platform_assets.storage import Storage  # noqa: E402

SEQ_LEN = 8


def _run(n: int, start: int) -> ShardSamples:
    tokens = (np.arange(n * SEQ_LEN, dtype=np.uint16) + start).reshape(n, SEQ_LEN)
    return ShardSamples(tokens, np.full(n, SEQ_LEN, np.int32), np.arange(n + 1, dtype=np.int64), None)


def test_a_failing_run_generator_leaves_no_thread_and_no_dataset(storage: Storage):
    def runs():
        yield 0, _run(5, 0)
        yield 1, _run(4, 100)  # shard 0 is committed when shard 1 starts; shard 1's write is in flight
        raise RuntimeError("packing failed")

    header = SetHeader(seq_len=SEQ_LEN, token_dtype=np.dtype(np.uint16), has_loss_mask=False)
    with storage.staged_dir("packed") as staged:
        writer = LanceSetWriter(staged, "lance", "train/web", header)
        uri = staged.path("lance/train/web.lance")
        with pytest.raises(RuntimeError, match="packing failed"):
            try:
                for shard, run in runs():
                    writer.add(run, shard)
                    assert [t for t in threading.enumerate() if t.name == f"lance-write-{uri}"]
            except BaseException:
                writer.abort()
                raise
        assert not [t for t in threading.enumerate() if t.name == f"lance-write-{uri}" and t.is_alive()]
        assert not os.path.exists(uri)
    assert not [f for _, _, files in os.walk(storage.path("packed/lance")) for f in files]  # nothing committed
