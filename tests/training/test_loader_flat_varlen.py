"""The loader over `flat_varlen` (no padding on disk): the same micro-batches as over the padded `flat` set
of the same samples (written together by packed_shards' writer), each padded batch trimmed to its longest
sample (or rounded up to pad_to_multiple_of), exact resume with 0 and 2 workers, and damaged files
refused with errors naming them."""

from __future__ import annotations

import hashlib
import json
import shutil

import numpy as np
import pytest

shard_writers = pytest.importorskip("platform_assets.packing.shard_writers")

import pyarrow as pa  # noqa: E402
import pyarrow.fs as pafs  # noqa: E402
from loader_runs import assert_same_batches, epochs, sample_ids, take  # noqa: E402

from platform_assets.packing.shard_index import ShardSamples  # noqa: E402
from platform_assets.storage import StagedDir  # noqa: E402
from training.data import LoaderConfig, PackedLoader  # noqa: E402
from training.data.collate import IGNORE_INDEX, padded_width  # noqa: E402
from training.data.loader import LoaderConfigError  # noqa: E402
from training.data.shard_index import ShardIndexError, read_flat_index  # noqa: E402
from training.data.shard_reader import SOURCE_SHIFT, CorruptShardError, ShardDataError  # noqa: E402

SEQ_LEN, PAD = 32, 50256
SIZES = {"chat": 23, "web": 30}  # shards of 8: 3 + 4, the last ones short


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    """flat and flat_varlen of the same one-document samples (packing.strategy none), with loss masks;
    returns (root, {sample id: (tokens, mask)})."""
    root = tmp_path_factory.mktemp("varlen")
    header = shard_writers.ShardSetHeader(seq_len=SEQ_LEN, vocab_size=50257, pad_id=PAD, eos_id=PAD, bos_id=None,
                                          has_loss_mask=True, tokenizer={"name": "gpt2", "sha256": "0" * 64},
                                          packing={"strategy": "none"})
    writer = shard_writers.ShardSetWriter(StagedDir(pafs.LocalFileSystem(), str(root)), ["flat", "flat_varlen"],
                                          header, samples_per_shard=8)
    rng = np.random.default_rng(4)
    written = {}
    for split in ("train", "validation"):
        for s, (source, n) in enumerate(SIZES.items()):
            n = n if split == "train" else 3
            lens = rng.integers(1, SEQ_LEN + 1, n)
            tokens = np.full((n, SEQ_LEN), PAD, np.uint16)
            mask = np.zeros((n, SEQ_LEN), np.uint8)
            for i, ln in enumerate(lens.tolist()):
                tokens[i, :ln] = rng.integers(0, 50000, ln)
                mask[i, :ln] = rng.integers(0, 2, ln)
                if split == "train":
                    written[(s << SOURCE_SHIFT) | i] = (tokens[i, :ln].astype(np.int64), mask[i, :ln])
            writer.group(split, source).add(
                ShardSamples(tokens, lens.astype(np.int32), np.arange(n + 1, dtype=np.int64), mask),
                pa.array([f"{source}-{split}-{i}" for i in range(n)]))
    writer.close()
    return root, written


def _cfg(root, fmt="flat_varlen", **kw) -> LoaderConfig:
    base = {"data_dir": str(root / fmt), "global_batch_size": 8, "micro_batch_size": 2, "seed": 3,
            "collate": "padded"}
    return LoaderConfig(**{**base, **kw})


@pytest.fixture(scope="module")
def reference(shards):
    """Two uninterrupted epochs over flat_varlen, in process."""
    return epochs(PackedLoader(_cfg(shards[0])), 2)


@pytest.mark.parametrize("collate", ["padded", "packed"])
def test_same_batches_as_the_padded_flat_set(shards, reference, collate):
    root, _ = shards
    varlen = reference if collate == "padded" else epochs(PackedLoader(_cfg(root, collate=collate)), 2)
    assert_same_batches(varlen, epochs(PackedLoader(_cfg(root, "flat", collate=collate)), 2))
    assert len(varlen) == 2 * 48 // 2  # 53 samples -> 6 steps of 8 per epoch, micro-batches of 2


def test_each_batch_is_trimmed_to_its_longest_sample(shards, reference):
    _, written = shards
    widths = set()
    for batch in reference:
        lengths = [len(written[sid][0]) for sid in batch["sample_ids"].tolist()]
        width = max(lengths)
        widths.add(width)
        assert batch["input_ids"].shape == batch["labels"].shape == batch["attention_mask"].shape == (2, width)
        for r, sid in enumerate(batch["sample_ids"].tolist()):
            tokens, mask = written[sid]
            n = len(tokens)
            assert batch["input_ids"][r, :n].tolist() == tokens.tolist()
            assert batch["input_ids"][r, n:].tolist() == [PAD] * (width - n)
            assert batch["attention_mask"][r].tolist() == [1] * n + [0] * (width - n)
            want = [int(tokens[t + 1]) if t + 1 < n and mask[t + 1] else IGNORE_INDEX for t in range(width)]
            assert batch["labels"][r].tolist() == want
    assert len(widths) > 3  # the batches really differ in width (lengths 1..32)


@pytest.mark.parametrize("multiple", [8, 24])
def test_widths_round_up_to_pad_to_multiple_of(shards, reference, multiple):
    got = take(PackedLoader(_cfg(shards[0], pad_to_multiple_of=multiple)))
    assert sample_ids(got) == sample_ids(reference[:24])
    assert any(g["input_ids"].shape[1] > SEQ_LEN for g in got) or multiple == 8  # 24 rounds 25..32 up to 48
    for g, w in zip(got, reference, strict=False):
        width, longest = g["input_ids"].shape[1], w["input_ids"].shape[1]
        assert width % multiple == 0 and longest <= width < longest + multiple
        assert torch_equal_prefix(g, w, longest)
        assert (g["labels"][:, longest:] == IGNORE_INDEX).all() and (g["attention_mask"][:, longest:] == 0).all()
        assert (g["input_ids"][:, longest:] == PAD).all() and g["num_tokens"] == w["num_tokens"]


def torch_equal_prefix(got, want, width: int) -> bool:
    return all(bool((got[k][:, :width] == want[k]).all())
               for k in ("input_ids", "labels", "attention_mask", "position_ids", "segment_ids"))


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("stop_at", [5, 24, 31])  # mid-step in epoch 0, the epoch's end, into epoch 1
def test_resume_matches_an_uninterrupted_run(shards, reference, num_workers, stop_at):
    root, _ = shards
    first = PackedLoader(_cfg(root, num_workers=num_workers))
    got = take(first) if stop_at >= 24 else []
    got += take(first, stop_at - len(got))
    state = json.loads(json.dumps(first.state_dict()))
    resumed = PackedLoader(_cfg(root, num_workers=num_workers))
    resumed.load_state_dict(state)
    while len(got) < len(reference):
        got += take(resumed)
    assert_same_batches(got, reference)


def _copy(root, tmp_path):
    shutil.copytree(root / "flat_varlen", tmp_path / "flat_varlen")
    return tmp_path


def test_a_flipped_byte_is_caught_by_its_checksum(shards, tmp_path):
    root = _copy(shards[0], tmp_path)
    index = json.loads((root / "flat_varlen" / "index.json").read_text())
    rel = index["sets"][0]["shards"][1]["files"]["tokens"]["path"]
    path = root / "flat_varlen" / rel
    data = bytearray(path.read_bytes())
    data[3] ^= 0x40
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptShardError, match=f"{rel}: sha256 .* does not match the index"):
        epochs(PackedLoader(_cfg(root, verify="first_open")), 1)
    skipping = PackedLoader(_cfg(root, verify="first_open", on_corrupt="skip"))
    assert [s.shard for s in skipping.skipped_shards] == [index["sets"][0]["shards"][1]["name"]]


def test_a_truncated_file_is_refused_when_the_loader_is_built(shards, tmp_path):
    root = _copy(shards[0], tmp_path)
    index = json.loads((root / "flat_varlen" / "index.json").read_text())
    rel = index["sets"][1]["shards"][0]["files"]["offsets"]["path"]
    path = root / "flat_varlen" / rel
    path.write_bytes(path.read_bytes()[:-8])
    with pytest.raises(CorruptShardError, match=f"{rel}: 64 bytes on disk, the index says 72"):
        PackedLoader(_cfg(root))


def test_offsets_that_disagree_with_the_segments_are_an_error(shards, tmp_path):
    """A writer bug (offsets off by one token, checksums made to match) is refused, not read as shifted rows."""
    root = _copy(shards[0], tmp_path)
    index_path = root / "flat_varlen" / "index.json"
    index = json.loads(index_path.read_text())
    entry = index["sets"][0]["shards"][0]["files"]["offsets"]
    offsets = np.fromfile(root / "flat_varlen" / entry["path"], "<i8")
    offsets[1] += 1
    raw = offsets.tobytes()
    (root / "flat_varlen" / entry["path"]).write_bytes(raw)
    entry["sha256"] = hashlib.sha256(raw).hexdigest()
    index_path.write_text(json.dumps(index, indent=1, sort_keys=True))
    with pytest.raises(ShardDataError, match=f"{entry['path']}: sample [01] holds tokens .*, but its segments"):
        epochs(PackedLoader(_cfg(root, verify="always")), 1)


def test_a_sample_longer_than_its_row_is_an_error_not_truncated(shards):
    """A row narrower than the sample (a writer past seq_len, or a reader asked for too few positions)
    would lose the sample's tail: the error names the shard, the sample and both lengths."""
    reader = PackedLoader(_cfg(shards[0])).reader
    src, idx = np.array([0, 0]), np.array([0, 1])
    lengths = reader.lengths(src, idx)
    assert np.array_equal(reader.read(src, idx, int(lengths.max())).lengths, lengths)  # wide enough: read whole
    short = int(lengths.max()) - 1
    longest = int(np.argmax(lengths))
    with pytest.raises(ShardDataError, match=rf"offsets.*\(shard .*\): sample {longest} holds {lengths.max()} "
                                             rf"tokens, more than the {short} positions of its row \(seq_len 32\)"):
        reader.read(src, idx, short)


def test_index_sizes_that_do_not_fit_the_counts_and_old_readers_refuse(shards, tmp_path):
    root = _copy(shards[0], tmp_path)
    index_path = root / "flat_varlen" / "index.json"
    with pytest.raises(ShardIndexError, match=r"\.format: expected 'flat', got 'flat_varlen'"):
        read_flat_index(root / "flat_varlen")  # a flat-only reader cannot misread the unpadded files
    index = json.loads(index_path.read_text())
    index["sets"][0]["shards"][0]["tokens"] += 1
    index_path.write_text(json.dumps(index))
    with pytest.raises(ShardIndexError, match=r"files\.tokens\.bytes: .* does not fit the shard"):
        PackedLoader(_cfg(root))


def test_padded_width_rounds_up_only_when_asked():
    assert [padded_width(n, None) for n in (1, 17, 32)] == [1, 17, 32]
    assert [padded_width(n, 1) for n in (1, 17)] == [1, 17]
    assert [padded_width(n, 8) for n in (1, 8, 9, 17, 32)] == [8, 8, 16, 24, 32]
    assert padded_width(0, 8) == 0  # an empty batch stays empty
    with pytest.raises(LoaderConfigError, match="pad_to_multiple_of: expected None or an int >= 1, got 0"):
        LoaderConfig("unused", pad_to_multiple_of=0)
