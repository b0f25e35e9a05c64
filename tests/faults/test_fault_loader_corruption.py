"""Corruption on read: a flipped byte or a truncated file in a shard is found, named and either stops the
training loader or leaves the shard out identically on every rank, worker count and resume.

The training loader reads the `flat` format; the Parquet and WebDataset shard sets are for other readers,
and the platform's own check of them (`verify_shards`, run by the packed_shards and dataset_version asset
checks) must name the damaged file; their readers must refuse a truncated shard instead of returning
fewer samples.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "training"))  # shard_fixtures: the loader tests' writer
from shard_fixtures import build_sets  # noqa: E402

from platform_assets.packing.shard_index import ShardSamples, ShardSetError, read_shard_set, verify_shards  # noqa: E402
from platform_assets.packing.shard_writers import ShardSetHeader, ShardSetWriter  # noqa: E402
from platform_assets.storage import Storage  # noqa: E402
from training.data import LoaderConfig, PackedLoader  # noqa: E402
from training.data.loader import LoaderStateError  # noqa: E402
from training.data.shard_reader import SOURCE_SHIFT, CorruptShardError  # noqa: E402

pytestmark = pytest.mark.faults

SEQ_LEN = 16
# code: shards of 6 and 4 samples, prose: 8. Leaving out code/shard-00001 keeps 14 samples: 7 steps of 2
# (world size 2 x micro-batch 1), so an epoch reads every remaining sample exactly once.
SIZES = {"code": [6, 4], "prose": [8]}
DAMAGED = "train/code/shard-00001"
DAMAGED_IDS = {(0 << SOURCE_SHIFT) | i for i in range(6, 10)}  # code is source 0; its samples 6..9
ALL_IDS = {(0 << SOURCE_SHIFT) | i for i in range(10)} | {(1 << SOURCE_SHIFT) | i for i in range(8)}


@pytest.fixture
def shards(tmp_path):
    return build_sets(tmp_path, SIZES, seq_len=SEQ_LEN, seed=5, with_mask=True)


def flip_byte(path: Path, offset: int = 37) -> None:
    raw = bytearray(path.read_bytes())
    raw[offset % len(raw)] ^= 0x01
    path.write_bytes(bytes(raw))


def truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:-1])


FAULTS = {"flipped_byte": flip_byte, "truncated": truncate}


def damage(flat: Path, fault: str, shard: str = DAMAGED) -> Path:
    path = flat / f"{shard}.tokens.bin"
    FAULTS[fault](path)
    return path


def config(flat: Path, **kw) -> LoaderConfig:
    return LoaderConfig(str(flat), global_batch_size=2, micro_batch_size=1, **kw)


def epoch_ids(loader: PackedLoader) -> list[int]:
    return [i for batch in loader for i in batch["sample_ids"].tolist()]


def global_order(flat: Path, num_workers: int, world_size: int = 2, **kw) -> list[int]:
    """Every rank's epoch, interleaved back into the global order (rank r holds block r of each step)."""
    per_rank = [epoch_ids(PackedLoader(config(flat, num_workers=num_workers, **kw), rank=r, world_size=world_size))
                for r in range(world_size)]
    return [i for step in zip(*per_rank, strict=True) for i in step]  # micro_batch_size 1: one id per rank a step


@pytest.mark.parametrize(("verify", "num_workers"), [("first_open", 0), ("always", 0), ("first_open", 2)])
def test_stop_on_a_flipped_byte_names_the_shard_and_both_hashes(shards, verify, num_workers):
    damage(shards.flat, "flipped_byte")
    # lazy: nothing is hashed yet; with workers the worker that opens the shard finds it, torch re-raises it here
    loader = PackedLoader(config(shards.flat, verify=verify, num_workers=num_workers))
    with pytest.raises(CorruptShardError, match=rf"{DAMAGED}\.tokens\.bin: sha256 [0-9a-f]{{64}} does not match "
                                                rf"the index \([0-9a-f]{{64}}\).*\(shard {DAMAGED} of .*index\.json"):
        epoch_ids(loader)


@pytest.mark.parametrize("verify", ["none", "first_open", "always"])
def test_stop_on_a_truncated_file_names_the_shard_and_both_sizes_before_reading(shards, verify):
    damage(shards.flat, "truncated")  # 4 samples x 16 tokens x 2 bytes = 128 on disk before the cut
    with pytest.raises(CorruptShardError, match=rf"{DAMAGED}\.tokens\.bin: 127 bytes on disk, the index says 128 "
                                                rf"\(truncated or replaced file\) \(shard {DAMAGED} of "):
        PackedLoader(config(shards.flat, verify=verify))


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_skip_leaves_the_shard_out_identically_on_every_rank_and_worker_count(shards, fault, caplog):
    intact = global_order(shards.flat, num_workers=0, on_corrupt="skip", verify="first_open")
    assert sorted(intact) == sorted(ALL_IDS)  # 9 steps of 2: all 18 samples before the damage
    damage(shards.flat, fault)
    with caplog.at_level(logging.WARNING, logger="training.data"):
        loader = PackedLoader(config(shards.flat, verify="first_open", on_corrupt="skip"), rank=0, world_size=2)
    assert [s.shard for s in loader.skipped_shards] == [DAMAGED] and loader.skipped_samples == 4
    assert "tokens.bin" in loader.skipped_shards[0].reason
    assert loader.state_dict()["skipped_shards"] == [DAMAGED]
    assert any(DAMAGED in r.getMessage() and "skipping corrupt shard" in r.getMessage() for r in caplog.records)

    in_process = global_order(shards.flat, num_workers=0, verify="first_open", on_corrupt="skip")
    with_workers = global_order(shards.flat, num_workers=2, verify="first_open", on_corrupt="skip")
    assert in_process == with_workers  # the same 14 samples, in the same order, on 2 ranks, 0 or 2 workers
    assert sorted(in_process) == sorted(ALL_IDS - DAMAGED_IDS)  # each intact sample once, none of the shard's


def test_skip_resumes_exactly_and_a_state_over_different_damage_is_refused(shards):
    damage(shards.flat, "flipped_byte")
    cfg = config(shards.flat, verify="always", on_corrupt="skip")
    full = epoch_ids(PackedLoader(cfg))
    first = PackedLoader(cfg)
    taken = []
    for batch in first:
        taken += batch["sample_ids"].tolist()
        if len(taken) == 6:  # 3 optimizer steps of 2
            break
    state = first.state_dict()
    resumed = PackedLoader(cfg)
    resumed.load_state_dict(state)
    assert taken + epoch_ids(resumed) == full

    # the shard restored (e.g. `dvc checkout`): nothing is skipped, so the order differs; said, not done
    damage(shards.flat, "flipped_byte")  # flipping the same bit again restores the byte
    restored = PackedLoader(cfg)
    assert restored.skipped_shards == ()
    with pytest.raises(LoaderStateError, match=rf"skipped_shards=\['{DAMAGED}'\], this loader has \[\]"):
        restored.load_state_dict(state)


def test_a_shard_damaged_after_the_build_stops_even_with_skip(shards):
    """Skipping it then would shift every later sample of its source on this rank only: it must stop."""
    loader = PackedLoader(config(shards.flat, verify="always", on_corrupt="skip"))
    assert len(epoch_ids(loader)) == 18  # epoch 0 intact: every sample once
    damage(shards.flat, "flipped_byte", "train/prose/shard-00000")
    with pytest.raises(CorruptShardError, match=r"train/prose/shard-00000\.tokens\.bin: sha256"):
        epoch_ids(loader)  # "always": epoch 1 reopens, so rehashes, every shard


# -- Parquet and WebDataset: the platform's verification and readers ------------------------------------------
def write_platform_shards(root: Path, fmt: str) -> Path:
    rng = np.random.default_rng(3)
    n, seq_len = 12, 32
    tokens = rng.integers(0, 50000, (n, seq_len))
    header = ShardSetHeader(seq_len=seq_len, vocab_size=50257, pad_id=0, eos_id=1, bos_id=None, has_loss_mask=False,
                            tokenizer={"name": "fixture", "sha256": "ab" * 32},
                            packing={"strategy": "fixture", "seq_len": seq_len})
    with Storage(str(root)).staged_dir("packed") as staged:
        writer = ShardSetWriter(staged, [fmt], header, 5)  # shards of 5, 5, 2 samples
        writer.group("train", "web").add(ShardSamples(tokens, np.full(n, seq_len, np.int32),
                                                      np.arange(n + 1, dtype=np.int64), None),
                                         pa.array([f"doc-{i}" for i in range(n)]))
        writer.close()
    return root / "packed" / fmt


@pytest.mark.parametrize("fault", sorted(FAULTS))
@pytest.mark.parametrize(("fmt", "suffix"), [("parquet", "parquet"), ("webdataset", "tar")])
def test_platform_verification_names_the_damaged_parquet_or_tar_shard(tmp_path, fmt, suffix, fault):
    fmt_dir = write_platform_shards(tmp_path, fmt)
    assert verify_shards(str(fmt_dir)) == []
    shard = fmt_dir / "train" / "web" / f"shard-00001.{suffix}"
    FAULTS[fault](shard)
    problems = verify_shards(str(fmt_dir))
    assert problems and all(p.startswith(f"train/web/shard-00001.{suffix}: ") for p in problems)
    assert any("corrupt" in p for p in problems)  # a changed byte changes the sha256 either way
    if fault == "truncated":
        assert any("bytes, index says" in p for p in problems)


@pytest.mark.parametrize(("fmt", "suffix", "error", "message"), [
    # Arrow's error, wrapped in the typed one naming the shard file (read_shard_set)
    ("parquet", "parquet", ShardSetError, r"shard-00001\.parquet: unreadable parquet shard .*magic bytes not found"),
    # tarfile reads a tar cut between members as a shorter valid archive: the index's size must catch it
    ("webdataset", "tar", ShardSetError, r"train/web/shard-00001: tar is 10240 bytes, index says 20480"),
])
def test_platform_readers_refuse_a_shard_cut_in_half(tmp_path, fmt, suffix, error, message):
    """A transfer cut mid-file: the reader raises instead of handing back the samples before the cut."""
    fmt_dir = write_platform_shards(tmp_path, fmt)
    shard = fmt_dir / "train" / "web" / f"shard-00001.{suffix}"
    shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])
    with pytest.raises(error, match=message):
        [samples for _, _, samples in read_shard_set(str(fmt_dir))]
