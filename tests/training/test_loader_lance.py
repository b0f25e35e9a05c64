"""The loader reads a `lance` shard set exactly as the `flat` one of the same ShardSetWriter run: the same
LoaderConfig gives identical batches (input_ids, labels, position_ids, ...) for whole epochs with 0 and
2 workers, packed and padded, and a resume from a lance state continues the flat run's sequence."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("lance")
shard_writers = pytest.importorskip("platform_assets.packing.shard_writers")

import pyarrow as pa  # noqa: E402
import pyarrow.fs as pafs  # noqa: E402
from loader_runs import assert_same_batches, epochs, take  # noqa: E402

from platform_assets.packing.shard_index import ShardSamples  # noqa: E402
from platform_assets.storage import StagedDir  # noqa: E402
from training.data import LoaderConfig, PackedLoader  # noqa: E402
from training.data.lance_reader import LanceSplitReader  # noqa: E402
from training.data.shard_reader import CorruptShardError, SplitReader  # noqa: E402

SEQ_LEN, PAD = 16, 50256


def _write(root, one_segment: bool = False) -> None:
    header = shard_writers.ShardSetHeader(seq_len=SEQ_LEN, vocab_size=50257, pad_id=PAD, eos_id=PAD, bos_id=None,
                                          has_loss_mask=True, tokenizer={"name": "gpt2", "sha256": "0" * 64},
                                          packing={"strategy": "test"})
    writer = shard_writers.ShardSetWriter(StagedDir(pafs.LocalFileSystem(), str(root)), ["flat", "lance"], header,
                                          samples_per_shard=5)
    rng = np.random.default_rng(1)
    for split in ("train", "validation"):
        for source, n in (("chat", 12), ("web", 9)):
            tokens = np.full((n, SEQ_LEN), PAD, np.uint16)
            mask = np.zeros((n, SEQ_LEN), np.uint8)
            seqlens, seqptr = [], [0]
            for i in range(n):
                k = 1 if one_segment else int(rng.integers(1, 4))
                lens = rng.multinomial(int(rng.integers(4, SEQ_LEN + 1)) - k, np.ones(k) / k) + 1
                used = int(lens.sum())
                tokens[i, :used] = rng.integers(0, 50000, used)
                mask[i, :used] = rng.integers(0, 2, used)
                seqlens += lens.tolist()
                seqptr.append(len(seqlens))
            writer.group(split, source).add(
                ShardSamples(tokens, np.array(seqlens, np.int32), np.array(seqptr, np.int64), mask),
                pa.array([f"{source}-{j}" for j in range(len(seqlens))]))
    writer.close()


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    root = tmp_path_factory.mktemp("lance_loader")
    _write(root)
    return root


def _loader(root, fmt: str, **kw) -> PackedLoader:
    cfg = dict(global_batch_size=4, micro_batch_size=2, seed=7, verify="first_open") | kw
    return PackedLoader(LoaderConfig(str(root / fmt), **cfg))


@pytest.mark.parametrize("num_workers", [0, 2])
def test_lance_gives_the_flat_batches_for_two_epochs(written, num_workers):
    lance_loader = _loader(written, "lance", num_workers=num_workers)
    assert isinstance(lance_loader.reader, LanceSplitReader)
    assert type(_loader(written, "flat").reader) is SplitReader
    want = epochs(_loader(written, "flat", num_workers=num_workers), 2)
    got = epochs(lance_loader, 2)
    assert {"input_ids", "labels", "position_ids", "sample_ids"} <= set(want[0])
    assert len(want) == 2 * (21 // 4) * 2  # 21 train samples, 5 steps of 2 micro-batches an epoch
    assert_same_batches(got, want)


def test_lance_weights_and_validation_split_match_flat(written):
    kw = dict(split="validation", weights={"chat": 3.0, "web": 1.0}, samples_per_epoch=24)
    assert_same_batches(epochs(_loader(written, "lance", **kw), 1), epochs(_loader(written, "flat", **kw), 1))


@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_lance_resume_continues_the_flat_sequence(written, num_workers):
    want = epochs(_loader(written, "flat"), 2)
    first = _loader(written, "lance", num_workers=num_workers)
    head = take(first, 3)
    state = json.loads(json.dumps(first.state_dict()))
    resumed = _loader(written, "lance", num_workers=num_workers)
    resumed.load_state_dict(state)
    assert_same_batches(head + take(resumed) + take(resumed), want)


def test_padded_collate_over_lance_matches_flat(tmp_path):
    _write(tmp_path, one_segment=True)
    kw = dict(collate="padded", num_workers=0)
    assert_same_batches(epochs(_loader(tmp_path, "lance", **kw), 1), epochs(_loader(tmp_path, "flat", **kw), 1))


def test_a_corrupt_lance_data_file_is_caught_or_skipped(tmp_path):
    _write(tmp_path)
    index = json.loads((tmp_path / "lance" / "index.json").read_text())
    shard = next(s for e in index["sets"] if e["split"] == "train" and e["source"] == "web" for s in e["shards"])
    lance_data, flat_tokens = shard["files"]["data"]["path"], f"{shard['name']}.tokens.bin"
    for path in (tmp_path / "lance" / lance_data, tmp_path / "flat" / flat_tokens):
        data = bytearray(path.read_bytes())
        data[len(data) // 3] ^= 0xFF  # same size: only the sha256 tells
        path.write_bytes(bytes(data))
    with pytest.raises(CorruptShardError, match="sha256"):
        take(_loader(tmp_path, "lance", verify="first_open"))
    skipping = _loader(tmp_path, "lance", verify="first_open", on_corrupt="skip")
    assert [s.shard for s in skipping.skipped_shards] == [shard["name"]]
    assert skipping.skipped_samples == 5
    # the same shard damaged in flat: the same shards left out, the same order
    assert_same_batches(take(skipping), take(_loader(tmp_path, "flat", verify="first_open", on_corrupt="skip")))
