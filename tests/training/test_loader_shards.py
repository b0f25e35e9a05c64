"""The shard-set reader: index.json checked against SHARD_FORMAT.md with errors that name the key, file
sizes checked on open, sha256 verification catching a flipped byte, and config errors by field."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from shard_fixtures import build_sets

from training.data import LoaderConfig, PackedLoader
from training.data.loader import LoaderConfigError
from training.data.shard_index import ShardIndexError, read_flat_index
from training.data.shard_reader import ShardDataError, SplitReader


@pytest.fixture
def shards(tmp_path):
    return build_sets(tmp_path, {"code": [6, 5], "prose": [7]}, seq_len=16, seed=2, with_mask=True)


def _edit_index(flat: Path, edit) -> None:
    path = flat / "index.json"
    doc = json.loads(path.read_text())
    edit(doc)
    path.write_text(json.dumps(doc))


def test_index_is_read_as_written(shards):
    index = read_flat_index(shards.flat)
    assert (index.seq_len, index.token_dtype, index.pad_id, index.has_loss_mask) == (16, "uint16", 0, True)
    assert [(s.split, s.source, s.samples) for s in index.sets] == [
        ("train", "code", 11), ("train", "prose", 7), ("validation", "code", 3), ("validation", "prose", 3)]
    shard = index.split_sets("train")[0].shards[1]
    assert shard.name == "train/code/shard-00001" and shard.samples == 5 and shard.mask is not None
    assert shard.tokens.bytes == 5 * 16 * 2 and shard.seqptr.bytes == 6 * 8
    reader = SplitReader(index, "validation")
    assert reader.sources == ("code", "prose") and reader.sizes.tolist() == [3, 3]


def test_any_minor_version_is_read_and_unknown_keys_are_ignored(shards):
    """1.0 (no format_minor, no layout), 1.1 (the platform's, with layout) and a later minor with keys
    this loader has never seen all read the same."""
    v10 = read_flat_index(shards.flat)
    for minor in (1, 7):
        _edit_index(shards.flat, lambda d, m=minor: d.update(format_minor=m, layout={"columns": []}, added={"x": 1}))
        later = read_flat_index(shards.flat)
        assert (later.seq_len, later.token_dtype, later.has_loss_mask, later.sets) == (
            v10.seq_len, v10.token_dtype, v10.has_loss_mask, v10.sets)


@pytest.mark.parametrize(("edit", "message"), [
    (lambda d: d.update(format="parquet"), r"\.format: expected 'flat', got 'parquet'"),
    (lambda d: d.update(format_version=2), r"\.format_version: this loader reads version 1, got 2"),
    (lambda d: d.update(format_version=True), r"\.format_version: this loader reads version 1, got True"),
    (lambda d: d.update(format_minor=-1), r"\.format_minor: expected an int >= 0, got -1"),
    (lambda d: d.update(format_minor="1"), r"\.format_minor: expected an int >= 0, got '1'"),
    (lambda d: d.pop("seq_len"), r": missing key 'seq_len'"),
    (lambda d: d.update(seq_len="16"), r"\.seq_len: expected int, got str '16'"),
    (lambda d: d.update(token_dtype="int8"), r"\.token_dtype: expected one of \['uint16', 'uint32'\]"),
    (lambda d: d.update(vocab_size=70000), r"\.vocab_size: 70000 does not fit token_dtype uint16"),
    (lambda d: d.update(has_loss_mask=1), r"\.has_loss_mask: expected bool, got int 1"),
    (lambda d: d["sets"][0]["shards"][0]["files"]["tokens"].update(bytes=10),
     r"sets\[0\] \(train/code\)\.shards\[0\] \(train/code/shard-00000\)\.files\.tokens\.bytes: 10 does not fit"),
    (lambda d: d["sets"][0]["shards"][1]["files"]["seqlens"].update(path="../../etc/passwd"),
     r"shards\[1\] \(train/code/shard-00001\)\.files\.seqlens\.path: must be relative to the index directory"),
    (lambda d: d["sets"][1]["shards"][0]["files"].pop("mask"),
     r"\.files: expected files \['mask', 'seqlens', 'seqptr', 'tokens'\] \(has_loss_mask=True\)"),
    (lambda d: d["sets"][1].update(samples=8), r"sets\[1\] \(train/prose\)\.samples: 8 is not the sum of its shards"),
    (lambda d: d["sets"].reverse(), r"\.sets: must be sorted by \(split, source\) without repeats"),
    (lambda d: d["sets"][0]["shards"][0]["files"]["seqptr"].update(sha256="abc"), r"seqptr\.sha256: expected 64"),
])
def test_a_malformed_index_is_refused_naming_the_key(shards, edit, message):
    _edit_index(shards.flat, edit)
    with pytest.raises(ShardIndexError, match=message) as err:
        read_flat_index(shards.flat)
    assert str(shards.flat / "index.json") in str(err.value)


def test_missing_index_and_unknown_split(shards, tmp_path):
    with pytest.raises(ShardIndexError, match="not found .*a `flat` format directory holding index.json"):
        read_flat_index(tmp_path / "nowhere")
    with pytest.raises(ShardIndexError, match="no shard set for split 'test' \\(splits: train, validation\\)"):
        PackedLoader(LoaderConfig(str(shards.flat), split="test"))


def test_a_flipped_byte_fails_checksum_verification(shards):
    path = shards.flat / "train" / "prose" / "shard-00000.tokens.bin"
    raw = bytearray(path.read_bytes())
    raw[37] ^= 0x01
    path.write_bytes(bytes(raw))
    cfg = LoaderConfig(str(shards.flat), global_batch_size=2, verify="first_open")
    with pytest.raises(ShardDataError, match=r"train/prose/shard-00000\.tokens\.bin: sha256 [0-9a-f]{64} does not "
                                             r"match the index \([0-9a-f]{64}\): the file is corrupt"):
        list(PackedLoader(cfg))  # the epoch reads every train shard: the first open of prose's hashes it
    list(PackedLoader(LoaderConfig(str(shards.flat), global_batch_size=2)))  # same size: only hashing sees it
    list(PackedLoader(LoaderConfig(str(shards.flat), split="validation", verify="always", global_batch_size=2)))


def test_intact_shards_pass_verification(shards):
    loader = PackedLoader(LoaderConfig(str(shards.flat), global_batch_size=2, verify="always", on_corrupt="skip"))
    # micro_batch_size 1: 2 micro-batches a step
    assert loader.steps_per_epoch == 9 and len(list(loader)) == 18 and loader.skipped_shards == ()


def test_a_truncated_or_missing_file_is_refused_on_open(shards):
    path = shards.flat / "train" / "code" / "shard-00001.mask.bin"
    path.write_bytes(path.read_bytes()[:-1])
    with pytest.raises(ShardDataError, match=r"shard-00001\.mask\.bin: 79 bytes on disk, the index says 80"):
        PackedLoader(LoaderConfig(str(shards.flat)))
    path.unlink()
    with pytest.raises(ShardDataError, match=r"shard-00001\.mask\.bin: missing \(listed in the index\) \(shard "
                                             r"train/code/shard-00001 of .*index\.json"):
        PackedLoader(LoaderConfig(str(shards.flat)))


def test_corrupt_segment_tables_are_reported_with_the_file(shards):
    path = shards.flat / "train" / "prose" / "shard-00000.seqlens.bin"
    lens = np.fromfile(path, dtype="<i4")
    lens[0] = 17  # more than seq_len 16
    lens.tofile(path)
    reader = SplitReader(read_flat_index(shards.flat), "train")
    with pytest.raises(ShardDataError, match=r"prose/shard-00000\.seqlens\.bin: sample 0 has segment lengths \[17"):
        reader.read(np.array([1]), np.array([0]))  # source 1 (prose), its sample 0 holds segment 0


@pytest.mark.parametrize(("field", "value", "message"), [
    ("global_batch_size", 0, "global_batch_size: expected an int >= 1, got 0"),
    ("micro_batch_size", True, "micro_batch_size: expected an int >= 1, got True"),
    ("seed", -1, "seed: expected an int >= 0, got -1"),
    ("num_workers", 1.0, "num_workers: expected an int >= 0, got 1.0"),
    ("samples_per_epoch", 0, "samples_per_epoch: expected None or an int >= 1, got 0"),
    ("collate", "ragged", r"collate: expected one of \['packed', 'padded'\], got 'ragged'"),
    ("weights", [("a", 1.0)], "weights: expected None or a mapping"),
    ("verify", True, r"verify: expected one of \['none', 'first_open', 'always'\], got True"),
    ("on_corrupt", "ignore", r"on_corrupt: expected one of \['stop', 'skip'\], got 'ignore'"),
])
def test_config_errors_name_the_field(field, value, message):
    with pytest.raises(LoaderConfigError, match=message):
        LoaderConfig("/data/flat", **{field: value})


def test_an_epoch_smaller_than_a_global_batch_is_refused(shards):
    with pytest.raises(LoaderConfigError, match="samples_per_epoch 18 < global_batch_size 32"):
        PackedLoader(LoaderConfig(str(shards.flat), global_batch_size=32))


def test_the_open_file_limit_is_raised_for_the_mapped_files_or_refused(shards, monkeypatch):
    import resource

    from training.data import shard_reader

    index = read_flat_index(shards.flat)
    files = 3 * 4  # train: 3 shards x (tokens, seqlens, seqptr, mask)
    raised = []
    monkeypatch.setattr(resource, "setrlimit", lambda which, limits: raised.append((which, limits)))
    monkeypatch.setattr(resource, "getrlimit", lambda which: (files + shard_reader.FD_HEADROOM, 10**6))
    SplitReader(index, "train")
    assert raised == []  # exactly enough: left alone
    monkeypatch.setattr(resource, "getrlimit", lambda which: (64, 10**6))
    SplitReader(index, "train")
    assert raised == [(resource.RLIMIT_NOFILE, (files + shard_reader.FD_HEADROOM, 10**6))]
    monkeypatch.setattr(resource, "getrlimit", lambda which: (64, 128))
    with pytest.raises(ShardDataError, match=r"split 'train' of .*index.json maps 12 files .* the open-file limit "
                                             r"is 128: raise it \(ulimit -Hn\) or pack fewer, larger shards"):
        SplitReader(index, "train")
