"""Training from remote shards: the block shuffle, the bounded cache, and S3 (moto's server on 127.0.0.1)."""

from __future__ import annotations

import json
import signal
import stat
from pathlib import Path

import numpy as np
import pytest
from loader_runs import assert_same_batches, sample_ids, take
from shard_fixtures import build_sets
from train_runs import (
    KILL_AT_STEP,
    latest_step,
    launch,
    run_config,
    train_in_process,
    train_losses,
    write_config,
    write_shards,
)
from train_runs import sample_ids as run_ids

from training.data import PackedLoader
from training.data.global_order import GlobalOrder
from training.data.loader import CacheConfig, LoaderConfig, LoaderConfigError, LoaderStateError
from training.data.mixture import Mixture
from training.data.permutation import BlockShuffle, block_permutation, source_permutation
from training.data.remote_cache import RemoteChecksumError

SEQ_LEN = 16
SHARDS = {"a": [7, 5, 9, 6, 8, 4, 7, 6], "b": [10, 3, 8, 5]}  # 2 sources, 12 shards, 88 samples


def dir_bytes(root: Path) -> int:
    """Bytes on disk under root now; the prefetch thread renames and evicts files while this walks, so a
    file gone between listing and stat counts as 0 (it is no longer on disk)."""
    total = 0
    for path in root.rglob("*"):
        if path.name in ("index.json", ".training-shard-cache"):  # the cache's bookkeeping, outside the budget
            continue
        try:
            st = path.stat()
        except FileNotFoundError:
            continue
        if stat.S_ISREG(st.st_mode):
            total += st.st_size
    return total


def shard_bytes(flat: Path) -> list[int]:
    index = json.loads((flat / "index.json").read_text())
    return [sum(f["bytes"] for f in sh["files"].values()) for s in index["sets"] if s["split"] == "train"
            for sh in s["shards"]]


# -- block shuffle -------------------------------------------------------------------------------------
def test_block_permutation_is_a_permutation_with_the_window_property():
    sizes = [7, 5, 9, 6, 8, 4, 7, 6, 3]
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    shard_of = np.repeat(np.arange(len(sizes)), sizes)
    for block in (1, 2, 4, 16):
        perm = block_permutation(11, 0, 3, sizes, block)
        assert sorted(perm.tolist()) == list(range(sum(sizes)))
        assert np.array_equal(perm, block_permutation(11, 0, 3, sizes, block))  # a pure function
        # walk the blocks: each run of consecutive positions of one block reads at most `block` shards,
        # and every shard's samples lie in exactly one run
        shards = shard_of[perm]
        seen: set[int] = set()
        at = 0
        while at < len(perm):
            members = set()
            end = at
            while end < len(perm) and (len(members | {shards[end]}) <= block):
                members.add(int(shards[end]))
                end += 1
            assert not members & seen, (block, members, seen)
            seen |= members
            assert all(np.sum(shard_of[perm[at:end]] == k) == sizes[k] for k in members)
            at = end
        assert seen == set(range(len(sizes)))
    assert not np.array_equal(block_permutation(11, 0, 3, sizes, 2), block_permutation(11, 0, 4, sizes, 2))
    assert not np.array_equal(block_permutation(11, 0, 3, sizes, 16), source_permutation(11, 0, 3, sum(sizes)))
    assert starts[-1] + sizes[-1] == sum(sizes)


def test_global_order_under_block_shuffle_covers_each_epoch():
    sizes = np.array([sum(SHARDS["a"]), sum(SHARDS["b"])])
    mixture = Mixture.from_weights(("a", "b"), sizes.tolist(), None, "train")
    order = GlobalOrder(sizes, mixture, 5, int(sizes.sum()), BlockShuffle([SHARDS["a"], SHARDS["b"]], 2))
    for epoch in (0, 1, 7):
        src, idx = order.samples(epoch, np.arange(int(sizes.sum())))
        for s in (0, 1):
            assert sorted(idx[src == s].tolist()) == list(range(sizes[s])), (epoch, s)
        # one position at a time (the per-micro-batch path) agrees with the grouped path
        one = [order.samples(epoch, np.array([g])) for g in range(0, int(sizes.sum()), 7)]
        assert [(int(a[0]), int(b[0])) for a, b in one] == list(zip(src[::7].tolist(), idx[::7].tolist(), strict=True))


def test_block_shuffle_resumes_exactly_and_refuses_another_block_size(tmp_path):
    fx = build_sets(tmp_path / "flat", SHARDS, SEQ_LEN)
    cfg = LoaderConfig(str(fx.flat), global_batch_size=4, micro_batch_size=2, seed=1, shuffle="block", block_shards=2)
    full = PackedLoader(cfg)
    want = take(full) + take(full)  # two epochs
    assert sample_ids(want) != sample_ids(take(PackedLoader(LoaderConfig(str(fx.flat), global_batch_size=4,
                                                                         micro_batch_size=2, seed=1))))
    for stop in (0, 3, 17, 44, 50):
        first = PackedLoader(cfg)
        got = take(first, stop) if stop < 44 else take(first) + take(first, stop - 44)
        resumed = PackedLoader(cfg)
        resumed.load_state_dict(first.state_dict())
        got += take(resumed) + (take(resumed) if stop < 44 else [])
        assert_same_batches(got, want)
    with pytest.raises(LoaderStateError, match="shuffle"):
        PackedLoader(LoaderConfig(str(fx.flat), global_batch_size=4, micro_batch_size=2, seed=1, shuffle="block",
                                  block_shards=3)).load_state_dict(full.state_dict())


# -- the cache over a local directory (no S3 needed) ---------------------------------------------------
def test_cached_reading_matches_local_within_its_budget(tmp_path):
    fx = build_sets(tmp_path / "flat", SHARDS, SEQ_LEN)
    largest = max(shard_bytes(fx.flat))
    budget = 6 * largest  # block of 2 + 1 crossing shard per source = 6 shards; the set has 12
    assert budget < sum(shard_bytes(fx.flat))
    common = dict(global_batch_size=4, micro_batch_size=2, seed=2, shuffle="block", block_shards=2)
    want = take(PackedLoader(LoaderConfig(str(fx.flat), **common)))
    cache = CacheConfig(dir=str(tmp_path / "cache"), max_bytes=budget, prefetch_steps=2)
    loader = PackedLoader(LoaderConfig(str(fx.flat), cache=cache, **common))
    got, peak = [], 0
    for batch in loader:
        got.append(batch)
        peak = max(peak, dir_bytes(tmp_path / "cache"))
    assert_same_batches(got, want)
    assert 0 < peak <= budget
    assert loader.reader.process_cache().downloaded_bytes >= sum(shard_bytes(fx.flat))  # every shard came through

    with pytest.raises(LoaderConfigError, match="block_shards"):
        PackedLoader(LoaderConfig(str(fx.flat), cache=CacheConfig(dir=str(tmp_path / "c2"), max_bytes=budget // 2),
                                  **common))
    with pytest.raises(LoaderConfigError, match="shuffle='block'"):
        PackedLoader(LoaderConfig(str(fx.flat), cache=cache, global_batch_size=4, micro_batch_size=2))


def test_cache_adopts_complete_shards_and_drops_partial_ones(tmp_path):
    fx = build_sets(tmp_path / "flat", SHARDS, SEQ_LEN)
    cache = CacheConfig(dir=str(tmp_path / "cache"), max_bytes=sum(shard_bytes(fx.flat)), prefetch_steps=0)
    cfg = LoaderConfig(str(fx.flat), cache=cache, global_batch_size=4, seed=2, shuffle="block", block_shards=2)
    first = PackedLoader(cfg)
    want = take(first)
    proc = next((tmp_path / "cache").glob("*/rank-0-of-1/train/main"))
    files = sorted(p for p in proc.rglob("*.bin"))
    files[0].write_bytes(files[0].read_bytes()[:-3])  # a shard cut short (as a kill before rename cannot leave)
    (proc / "stray.bin.tmp-1-2").write_bytes(b"x" * 10)  # a download killed mid-way
    second = PackedLoader(cfg)
    assert_same_batches(take(second), want)
    c = second.reader.process_cache()
    index = json.loads((fx.flat / "index.json").read_text())
    cut = files[0].relative_to(proc).as_posix()
    refetched = [sum(f["bytes"] for f in sh["files"].values()) for st in index["sets"] for sh in st["shards"]
                 if cut in {f["path"] for f in sh["files"].values()}]
    assert c.downloaded_bytes == refetched[0]  # only the cut shard came again; the others were adopted
    assert not list(proc.rglob("*.tmp-*"))


def test_ranks_sharing_a_cache_dir_keep_their_own_folders_and_budgets(tmp_path):
    """torchrun's ranks on one node get the same data.cache.dir: each must evict only its own shards."""
    fx = build_sets(tmp_path / "flat", SHARDS, SEQ_LEN)
    budget = 6 * max(shard_bytes(fx.flat))
    cache = CacheConfig(dir=str(tmp_path / "cache"), max_bytes=budget, prefetch_steps=1)
    cfg = LoaderConfig(str(fx.flat), cache=cache, global_batch_size=4, micro_batch_size=2, seed=3, shuffle="block",
                       block_shards=2)
    rank0, rank1 = PackedLoader(cfg, rank=0, world_size=2), PackedLoader(cfg, rank=1, world_size=2)
    want0 = take(PackedLoader(LoaderConfig(str(fx.flat), global_batch_size=4, micro_batch_size=2, seed=3,
                                           shuffle="block", block_shards=2), rank=0, world_size=2))
    assert_same_batches(take(rank0), want0)
    root0 = rank0.reader.process_cache().root
    kept0 = {p: p.stat().st_size for p in root0.rglob("*.bin")}
    assert kept0 and dir_bytes(root0) <= budget
    take(rank1)  # reads, prefetches and evicts in its own folder
    root1 = rank1.reader.process_cache().root
    assert {p: p.stat().st_size for p in root0.rglob("*.bin") if p.exists()} == kept0  # rank 1 evicted none of them
    assert root0 != root1 and root1.parent.parent.name == "rank-1-of-2" and root0.parent.parent.name == "rank-0-of-2"
    assert rank1.reader.process_cache().downloaded_bytes > 0  # it adopted nothing of rank 0's
    assert dir_bytes(root1) <= budget


def test_pruning_removes_only_folders_the_cache_created(tmp_path):
    first = build_sets(tmp_path / "flat1", SHARDS, SEQ_LEN)
    second = build_sets(tmp_path / "flat2", {"a": [4, 4, 4], "b": [5, 5]}, SEQ_LEN)
    base = tmp_path / "cache"
    foreign = base / "notes"
    foreign.mkdir(parents=True)
    (foreign / "keep.txt").write_text("mine")
    lookalike = base / "0123456789abcdef"  # named like a build folder, but not made by the cache
    lookalike.mkdir()
    (lookalike / "keep.bin").write_bytes(b"x")
    (base / "loose.txt").write_text("mine too")
    common = dict(global_batch_size=4, micro_batch_size=2, seed=3, shuffle="block", block_shards=2)
    cache = CacheConfig(dir=str(base), max_bytes=sum(shard_bytes(first.flat)), prefetch_steps=0)
    take(PackedLoader(LoaderConfig(str(first.flat), cache=cache, **common)))
    builds = {p for p in base.iterdir() if p.is_dir()} - {foreign, lookalike}
    assert len(builds) == 1
    take(PackedLoader(LoaderConfig(str(second.flat), cache=cache, **common)))  # another set: the first is stale
    assert not builds & set(base.iterdir())
    assert (foreign / "keep.txt").read_text() == "mine"
    assert (lookalike / "keep.bin").exists() and (base / "loose.txt").exists()


def test_window_check_counts_what_dataloader_workers_pin(tmp_path):
    fx = build_sets(tmp_path / "flat", SHARDS, SEQ_LEN)
    budget = 6 * max(shard_bytes(fx.flat))  # one block of 2 + 1 crossing shard per source: enough in process
    common = dict(global_batch_size=4, micro_batch_size=2, seed=2, shuffle="block", block_shards=2)
    cache = CacheConfig(dir=str(tmp_path / "cache"), max_bytes=budget)
    PackedLoader(LoaderConfig(str(fx.flat), cache=cache, num_workers=0, **common))
    # 2 workers: (2 x 2 + 1) messages of 16 micro-batches of 2 samples are pinned: 160 samples, every shard
    with pytest.raises(LoaderConfigError, match=r"2 DataLoader workers.* 160 samples") as err:
        PackedLoader(LoaderConfig(str(fx.flat), cache=cache, num_workers=2, **common))
    assert str(sum(shard_bytes(fx.flat))) in str(err.value)  # the bytes needed, here the whole set
    PackedLoader(LoaderConfig(str(fx.flat), cache=CacheConfig(dir=str(tmp_path / "cache"),
                                                              max_bytes=sum(shard_bytes(fx.flat))),
                              num_workers=2, **common))


# -- S3 --------------------------------------------------------------------------------------------------
boto3 = pytest.importorskip("boto3")




def upload(client, bucket: str, flat: Path, prefix: str = "shards") -> str:
    for path in sorted(p for p in flat.rglob("*") if p.is_file()):
        client.upload_file(str(path), bucket, f"{prefix}/{path.relative_to(flat).as_posix()}")
    return f"s3://{bucket}/{prefix}"


@pytest.mark.s3
@pytest.mark.parametrize("workers", [0, 2])
def test_s3_loader_matches_local_with_a_cache_smaller_than_the_set(s3, tmp_path, workers):
    client, bucket, endpoint = s3
    # with workers the main process pins what they may be reading: (2 x 2 + 1) messages of 16 micro-batches
    # of 2 samples (seq_len 16 packs 16 a message) = 160 samples ~ 8 shards of 20, so a larger set
    fx = build_sets(tmp_path / "flat", SHARDS if workers == 0 else {"a": [20] * 12, "b": [20] * 8}, SEQ_LEN)
    url = upload(client, bucket, fx.flat)
    common = dict(global_batch_size=4, micro_batch_size=2, seed=4, shuffle="block", block_shards=2,
                  num_workers=workers)
    want = take(PackedLoader(LoaderConfig(str(fx.flat), **common)))
    budget = (6 if workers == 0 else 14) * max(shard_bytes(fx.flat))
    assert budget < sum(shard_bytes(fx.flat))
    cache = CacheConfig(dir=str(tmp_path / "cache"), max_bytes=budget, endpoint_url=endpoint)
    loader = PackedLoader(LoaderConfig(url, cache=cache, **common))
    got = take(loader)
    assert_same_batches(got, want)
    procs = sorted(p.name for p in (tmp_path / "cache").glob("*/rank-0-of-1/train/*"))
    assert procs == ["main"]  # the main process downloads for its workers: one copy of each shard
    assert dir_bytes(tmp_path / "cache") <= budget


@pytest.mark.s3
def test_s3_corrupt_object_is_a_checksum_error_naming_it(s3, tmp_path):
    client, bucket, endpoint = s3
    fx = build_sets(tmp_path / "flat", SHARDS, SEQ_LEN)
    url = upload(client, bucket, fx.flat)
    victim = next(p for p in sorted(fx.flat.rglob("*.bin")) if p.stat().st_size)
    rel = victim.relative_to(fx.flat).as_posix()
    data = bytearray(victim.read_bytes())
    data[0] ^= 0xFF
    client.put_object(Bucket=bucket, Key=f"shards/{rel}", Body=bytes(data))
    cache = CacheConfig(dir=str(tmp_path / "cache"), max_bytes=sum(shard_bytes(fx.flat)), max_attempts=2,
                        endpoint_url=endpoint, prefetch_steps=0)
    loader = PackedLoader(LoaderConfig(url, cache=cache, global_batch_size=4, shuffle="block", block_shards=2))
    with pytest.raises(RemoteChecksumError, match=rel.replace(".", r"\.")) as err:
        take(loader)
    assert "2 attempts" in str(err.value)
    assert not list((tmp_path / "cache").rglob(Path(rel).name))  # nothing unverified under the final name


@pytest.mark.s3
def test_s3_training_resumes_exactly_after_sigkill(s3, tmp_path):
    client, bucket, endpoint = s3
    flat = write_shards(tmp_path / "flat")
    url = upload(client, bucket, flat)
    budget = 2 * max(shard_bytes(flat))  # one shard per source at a time; the set has 3 (+ validation)
    assert budget < sum(shard_bytes(flat))

    def config(ckpt: Path, remote: bool) -> dict:
        raw = run_config(flat, ckpt, data__shuffle="block", data__block_shards=1)
        if remote:
            raw["data"]["data_dir"] = url
            raw["data"]["cache"] = {"dir": str(tmp_path / "cache"), "max_bytes": budget, "endpoint_url": endpoint}
        return raw

    reference = tmp_path / "reference"
    train_in_process(config(reference, remote=False))  # from local files, uninterrupted
    ckpt = tmp_path / "ckpt"
    proc = launch(["-c", KILL_AT_STEP, str(write_config(tmp_path / "run.yaml", config(ckpt, remote=True))), "5"])
    out, _ = proc.communicate(timeout=180)
    assert proc.returncode == -signal.SIGKILL, out
    assert max(train_losses(ckpt)) == 5 and latest_step(ckpt) == 3
    resumed = train_in_process(config(ckpt, remote=True))
    assert resumed.resumed_from == 3 and resumed.step == 10
    assert run_ids(ckpt) == run_ids(reference)
    assert train_losses(ckpt) == train_losses(reference)
    assert dir_bytes(tmp_path / "cache") <= 2 * budget  # the train and the validation loader's shares


def test_shuffle_quality_figures_separate_block_sizes():
    from training.data.shuffle_quality import shuffle_quality, table

    rows = dict(table(shards=64, samples=64, batch=16, blocks=(1, 4, 16)))
    assert rows["full"].same_shard_adjacent < 0.05 and rows["full"].batch_shards > 12
    for b in (1, 4, 16):
        q = rows[f"block {b}"]
        assert abs(q.same_shard_adjacent - 1 / b) < 0.35 / b, (b, q)  # ~1/b: neighbours share one of b shards
        assert q.batch_shards <= b + 1, (b, q)
        assert abs(q.rank_correlation) < 0.3 and abs(q.displacement - 1 / 3) < 0.1, (b, q)
    assert shuffle_quality(np.arange(8), [4, 4], 4).same_shard_adjacent == 6 / 7  # storage order: no shuffle
    with pytest.raises(ValueError, match="permutation"):
        shuffle_quality(np.array([0, 0, 1]), [3], 2)


def test_window_blocks_are_sized_by_the_smallest_shards_not_the_smallest_shard_alone():
    from training.data.remote_reader import _blocks_reached

    # 33 samples from equal 16-sample shards in blocks of 2: the last sample of one block, then one whole block
    assert _blocks_reached([16] * 10, 2, 33) == 2
    assert _blocks_reached([16] * 10, 2, 34) == 3
    # a set's short last shard (3 samples) is one block: 30 samples = the last of one block, the short
    # one, a whole one and 10 of a fourth (sizing every block by the short one said 1 + ceil(29 / 3) = 11)
    assert _blocks_reached([3, 16, 16, 16, 16], 1, 30) == 4
    # a pass's shorter last block holds fewer shards: 3 shards in blocks of 2 -> blocks of 2 and 1 shard
    assert _blocks_reached([10, 10, 10], 2, 22) == 3
    # more samples than a pass holds: every block, and the next pass's first one
    assert _blocks_reached([4, 4, 4, 4], 2, 100) == 3
    assert _blocks_reached([16] * 4, 1, 1) == 1
