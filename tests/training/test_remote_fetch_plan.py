"""What the remote cache fetches: small files from the index instead of requests (format 1.2 `inline`), and
with DataLoader workers only the groups they build pinned (training/data/worker_fetch.py)."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import numpy as np
import pytest
from loader_runs import assert_same_batches, take
from shard_fixtures import build_sets

from training.data import PackedLoader
from training.data.loader import CacheConfig, LoaderConfig, LoaderConfigError
from training.data.remote_cache import RemoteChecksumError
from training.data.worker_fetch import BOARD_NAME, NOT_STARTED, WorkerBoard, WorkerFetcher

SEQ_LEN = 16
SHARDS = {"a": [7, 5, 9, 6, 8, 4, 7, 6], "b": [10, 3, 8, 5]}
COMMON = dict(global_batch_size=4, micro_batch_size=2, seed=3, shuffle="block", block_shards=2)
SMALL = ("seqlens", "seqptr")


def inline_small_files(flat: Path, remove: bool) -> int:
    """Put the seqlens/seqptr bytes of every shard into index.json as the platform's flat writer does (1.2);
    with remove, delete those files from the directory, so only the index can supply them. Returns how many."""
    index = json.loads((flat / "index.json").read_text())
    count = 0
    for entry in index["sets"]:
        for shard in entry["shards"]:
            for role in SMALL:
                info = shard["files"][role]
                path = flat / info["path"]
                info["inline"] = base64.b64encode(path.read_bytes()).decode("ascii")
                if remove:
                    path.unlink()
                count += 1
    index["format_minor"] = 2
    (flat / "index.json").write_text(json.dumps(index, indent=1, sort_keys=True))
    return count


def test_inline_segment_tables_are_written_from_the_index_not_fetched(tmp_path):
    fx = build_sets(tmp_path / "flat", SHARDS, SEQ_LEN)
    want = take(PackedLoader(LoaderConfig(str(fx.flat), **COMMON)))
    assert inline_small_files(fx.flat, remove=True) == 2 * (len(SHARDS["a"]) + len(SHARDS["b"]) + 2)
    assert not list(fx.flat.rglob("*.seqlens.bin"))  # only the index has them now
    cache = CacheConfig(dir=str(tmp_path / "cache"), max_bytes=10**7, prefetch_steps=2)
    loader = PackedLoader(LoaderConfig(str(fx.flat), cache=cache, **COMMON))
    assert_same_batches(take(loader), want)
    cached = list((tmp_path / "cache").rglob("*.seqptr.bin"))
    assert len(cached) == len(SHARDS["a"]) + len(SHARDS["b"])  # every train shard's table, from the index


def test_an_inline_copy_that_contradicts_its_checksum_stops_the_run(tmp_path):
    fx = build_sets(tmp_path / "flat", SHARDS, SEQ_LEN)
    inline_small_files(fx.flat, remove=False)
    index = json.loads((fx.flat / "index.json").read_text())
    info = index["sets"][0]["shards"][0]["files"]["seqptr"]
    raw = bytearray(base64.b64decode(info["inline"]))
    raw[-1] ^= 0x01  # same length, other bytes: only the checksum can tell
    info["inline"] = base64.b64encode(bytes(raw)).decode("ascii")
    (fx.flat / "index.json").write_text(json.dumps(index))
    cache = CacheConfig(dir=str(tmp_path / "cache"), max_bytes=10**7, prefetch_steps=0)
    loader = PackedLoader(LoaderConfig(str(fx.flat), cache=cache, **COMMON))
    with pytest.raises(RemoteChecksumError, match="inline copy .* the index is corrupt"):
        take(loader)
    assert not [p for p in (tmp_path / "cache").rglob("*.bin") if p.as_posix().endswith(info["path"])]


@pytest.mark.parametrize(("inline", "problem"), [("not base64!", "not base64"),
                                                  (base64.b64encode(b"\0" * 3).decode(), "3 bytes, the entry says")])
def test_a_malformed_inline_copy_is_refused_when_the_index_is_read(tmp_path, inline, problem):
    fx = build_sets(tmp_path / "flat", SHARDS, SEQ_LEN)
    index = json.loads((fx.flat / "index.json").read_text())
    index["sets"][0]["shards"][1]["files"]["seqlens"]["inline"] = inline
    (fx.flat / "index.json").write_text(json.dumps(index))
    with pytest.raises((LoaderConfigError, ValueError), match=f"seqlens.inline: {problem}"):
        PackedLoader(LoaderConfig(str(fx.flat), **COMMON))


# -- the workers' board --------------------------------------------------------------------------------
def test_board_slots_are_shared_between_processes_through_the_file(tmp_path):
    board = WorkerBoard.create(tmp_path / BOARD_NAME, 3)
    assert board.read() == (NOT_STARTED,) * 3
    other = WorkerBoard(tmp_path / BOARD_NAME, 3)  # what a worker unpickles: it maps the file itself
    other.announce(1, 42)
    assert board.read() == (NOT_STARTED, 42, NOT_STARTED)
    board.remove()
    assert not (tmp_path / BOARD_NAME).exists()


def test_the_fetcher_pins_the_groups_being_built_and_plans_the_unbuilt_ones(tmp_path):
    # shards of 2 samples read one after another (blocks of 1 shard), groups of 2 micro-batches of 2: a
    # group reads ~2 shards of its own, so what the fetcher leaves out is visible
    fx = build_sets(tmp_path / "flat", {"a": [2] * 40, "b": [2] * 40}, SEQ_LEN)
    cache = CacheConfig(dir=str(tmp_path / "cache"), max_bytes=10**7, prefetch_steps=1)
    loader = PackedLoader(LoaderConfig(str(fx.flat), cache=cache, num_workers=2, **{**COMMON, "block_shards": 1}))
    group = 2
    fetcher = WorkerFetcher(loader.order, lambda: (-1, 0), 0, 0, workers=2, group=group)  # epoch -1: idle
    try:
        def shards(first: int, last: int) -> set:
            return set(fetcher._keys(first, last))

        pinned, planned = fetcher.wanted(0, (NOT_STARTED, NOT_STARTED))
        assert pinned == []
        window = 5 * group  # (2 x 2 workers + 1) messages a DataLoader may have asked for
        assert set(planned) == shards(0, window + 2)  # + prefetch_steps x accumulation_steps (2)

        pinned, planned = fetcher.wanted(0, (0, group))  # each worker on its first group
        assert set(pinned) == shards(0, 2 * group)

        # worker 0 finished group 0 (its message waits in the queue) and builds group 2: group 0's own
        # shards are neither pinned nor planned
        pinned, planned = fetcher.wanted(0, (2 * group, group))
        assert set(pinned) == shards(group, 3 * group)
        assert set(planned) == shards(group, window + 2)
        only_group_0 = shards(0, group) - shards(group, window + 2)
        assert only_group_0, "the fixture must give group 0 shards of its own"
        assert not only_group_0 & (set(pinned) | set(planned))

        pinned, planned = fetcher.wanted(3 * group, (loader.plan.micro_batches_per_epoch, 3 * group))
        assert set(pinned) == shards(3 * group, 4 * group)  # worker 0 has no group left
    finally:
        fetcher.stop()
    assert loader.order.board is None and not list((tmp_path / "cache").rglob(f"{BOARD_NAME}*"))


def test_each_iteration_has_its_own_board_and_a_killed_runs_board_is_dropped(tmp_path):
    fx = build_sets(tmp_path / "flat", SHARDS, SEQ_LEN)
    cache = CacheConfig(dir=str(tmp_path / "cache"), max_bytes=10**7)
    loader = PackedLoader(LoaderConfig(str(fx.flat), cache=cache, num_workers=2, **COMMON))
    root = loader.reader.process_cache().root
    stale = root / f"{BOARD_NAME}-999999999-0"  # no process has that pid: a killed run left it
    stale.write_bytes(bytes(16))
    first = WorkerFetcher(loader.order, lambda: (-1, 0), 0, 0, workers=2, group=2)
    assert not stale.exists() and first.board.path.exists()
    second = WorkerFetcher(loader.order, lambda: (-1, 0), 0, 0, workers=2, group=2)  # a later iteration
    assert second.board.path != first.board.path and loader.order.board is second.board
    first.stop()  # the superseded iteration ends late (its generator closed by the garbage collector)
    assert second.board.path.exists() and loader.order.board is second.board
    second.stop()
    assert loader.order.board is None and not list(root.glob(f"{BOARD_NAME}*"))


def test_workers_read_through_a_board_and_give_the_in_process_batches(tmp_path):
    fx = build_sets(tmp_path / "flat", {"a": [20] * 12, "b": [20] * 8}, SEQ_LEN)
    want = take(PackedLoader(LoaderConfig(str(fx.flat), **COMMON)))
    budget = 14 * max(int(np.sum([f.stat().st_size for f in fx.flat.glob(f"train/a/shard-0000{k}.*")]))
                      for k in range(3))
    cache = CacheConfig(dir=str(tmp_path / "cache"), max_bytes=budget)
    loader = PackedLoader(LoaderConfig(str(fx.flat), cache=cache, num_workers=2, **COMMON))
    assert_same_batches(take(loader), want)
    assert not list((tmp_path / "cache").rglob(f"{BOARD_NAME}*"))  # removed when the iteration ended
