"""`flat_varlen` (samples without padding on disk): written beside `flat` from the same runs, it reads back
the same samples token for token, stores exactly the non-padding tokens, declares its layout, rebuilds
byte-identically, and any damaged file is reported by verification."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest
from test_packing_stage import LONG_ID, OUT_REL, _documents, _run
from test_packing_stage import SEQ_LEN as STAGE_SEQ_LEN

from platform_assets.packing.formats import FORMATS, format_names
from platform_assets.packing.samples import ShardSamples
from platform_assets.packing.settings import PackingSettings
from platform_assets.packing.shard_index import load_index, read_shard_set, verify_shards
from platform_assets.packing.shard_writers import ShardSetHeader, ShardSetWriter
from platform_assets.storage import StagedDir

SEQ_LEN, PAD = 16, 50256


def _one_document_samples(rng: np.random.Generator, n: int, has_mask: bool) -> ShardSamples:
    """`strategy: none` samples: one segment each, 1..seq_len tokens, pad_id after."""
    lens = rng.integers(1, SEQ_LEN + 1, n)
    tokens = np.full((n, SEQ_LEN), PAD, np.uint16)
    mask = np.zeros((n, SEQ_LEN), np.uint8)
    for i, ln in enumerate(lens):
        tokens[i, :ln] = rng.integers(0, 50000, ln)
        mask[i, :ln] = rng.integers(0, 2, ln)
    return ShardSamples(tokens, lens.astype(np.int32), np.arange(n + 1, dtype=np.int64), mask if has_mask else None)


def _write(root: Path, has_mask: bool, run_sizes=(4, 1, 9), seed: int = 5) -> list[ShardSamples]:
    header = ShardSetHeader(seq_len=SEQ_LEN, vocab_size=50257, pad_id=PAD, eos_id=PAD, bos_id=None,
                            has_loss_mask=has_mask, tokenizer={"name": "gpt2", "sha256": "0" * 64},
                            packing={"strategy": "none"})
    writer = ShardSetWriter(StagedDir(pafs.LocalFileSystem(), str(root)), ["flat", "flat_varlen"], header,
                            samples_per_shard=5)
    rng = np.random.default_rng(seed)
    runs = [_one_document_samples(rng, n, has_mask) for n in run_sizes]
    group = writer.group("train", "web")
    for k, run in enumerate(runs):
        group.add(run, pa.array([f"d{k}-{i}" for i in range(run.samples)]))
    writer.close()
    return runs


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    root = tmp_path_factory.mktemp("varlen")
    return root, _write(root, has_mask=True)


def test_opt_in_and_validated_by_settings():
    assert "flat_varlen" in format_names() and "flat_varlen" not in FORMATS
    assert PackingSettings(strategy="none", formats=("flat_varlen", "flat")).formats == ("flat", "flat_varlen")


def test_reads_back_the_flat_samples_token_for_token(written):
    root, runs = written
    flat = list(read_shard_set(str(root / "flat")))
    varlen = list(read_shard_set(str(root / "flat_varlen")))
    assert [sh["name"] for _, sh, _ in varlen] == [sh["name"] for _, sh, _ in flat] == [
        f"train/web/shard-{k:05d}" for k in range(3)]
    for (_, _, a), (_, _, b) in zip(flat, varlen, strict=True):
        np.testing.assert_array_equal(b.tokens, a.tokens)
        np.testing.assert_array_equal(b.seqlens, a.seqlens)
        np.testing.assert_array_equal(b.seqptr, a.seqptr)
        np.testing.assert_array_equal(b.loss_mask, a.loss_mask)


def test_stores_only_the_non_padding_tokens(written):
    root, runs = written
    index = load_index(str(root / "flat_varlen"))
    assert (index["format"], index["format_version"], index["format_minor"]) == ("flat_varlen", 1, 1)
    assert index["layout"]["files"] == ["tokens", "offsets", "seqlens", "seqptr", "mask"]
    # the whole set's samples, in order, without padding: built here from the runs, not by the writer
    want_tokens = np.concatenate([r.tokens[i, : r.seqlens[i]] for r in runs for i in range(r.samples)])
    want_mask = np.concatenate([r.loss_mask[i, : r.seqlens[i]] for r in runs for i in range(r.samples)])
    got_tokens, got_mask, lengths = [], [], []
    for shard in index["sets"][0]["shards"]:
        files = {r: root / "flat_varlen" / f["path"] for r, f in shard["files"].items()}
        tokens = np.fromfile(files["tokens"], "<u2")
        offsets = np.fromfile(files["offsets"], "<i8")
        assert len(tokens) == shard["tokens"] and offsets[0] == 0 and offsets[-1] == len(tokens)
        assert len(offsets) == shard["samples"] + 1
        got_tokens.append(tokens)
        got_mask.append(np.fromfile(files["mask"], "u1"))
        lengths.append(np.diff(offsets))
    np.testing.assert_array_equal(np.concatenate(got_tokens), want_tokens)
    np.testing.assert_array_equal(np.concatenate(got_mask), want_mask)
    np.testing.assert_array_equal(np.concatenate(lengths), np.concatenate([r.seqlens for r in runs]))
    flat_bytes = sum(sh["bytes"] for sh in load_index(str(root / "flat"))["sets"][0]["shards"])
    varlen_bytes = sum(sh["bytes"] for sh in index["sets"][0]["shards"])
    assert varlen_bytes < flat_bytes  # 14 samples of 1-16 tokens: the flat files hold 14 x 16 positions


def test_rebuild_is_byte_identical_whatever_the_run_sizes(written, tmp_path):
    root, _ = written
    _write(tmp_path, has_mask=True, run_sizes=(4, 1, 9))
    again = (tmp_path / "flat_varlen" / "index.json").read_bytes()
    assert again == (root / "flat_varlen" / "index.json").read_bytes()


def test_without_a_loss_mask_no_mask_file(tmp_path):
    _write(tmp_path, has_mask=False)
    index = json.loads((tmp_path / "flat_varlen" / "index.json").read_text())
    assert all(set(sh["files"]) == {"tokens", "offsets", "seqlens", "seqptr"} for sh in index["sets"][0]["shards"])
    assert verify_shards(str(tmp_path / "flat_varlen")) == []
    assert all(s.loss_mask is None for _, _, s in read_shard_set(str(tmp_path / "flat_varlen")))


@pytest.mark.parametrize("role", ["tokens", "offsets", "seqlens", "seqptr", "mask"])
def test_a_flipped_byte_or_a_truncated_file_is_reported(written, tmp_path, role):
    root, _ = written
    copy = tmp_path / "flat_varlen"
    shutil.copytree(root / "flat_varlen", copy)
    assert verify_shards(str(copy)) == []
    shard = load_index(str(copy))["sets"][0]["shards"][0]
    path = copy / shard["files"][role]["path"]
    data = bytearray(path.read_bytes())
    data[0] ^= 0xFF
    path.write_bytes(bytes(data))
    assert any("(corrupt)" in p and shard["files"][role]["path"] in p for p in verify_shards(str(copy)))
    path.write_bytes(bytes(data[:-1]))
    problems = verify_shards(str(copy))
    assert any(f"{len(data) - 1} bytes, index says {len(data)}" in p for p in problems)
    if role != "seqlens":  # the other sizes follow from the shard's counts
        assert any("the shard's counts need" in p for p in problems)


@pytest.mark.parametrize("overlong", ["split", "filter"])
def test_through_the_packing_stage_unpacked_samples_take_only_their_tokens(tmp_path, overlong):
    """`packing: {strategy: none, formats: [flat, flat_varlen]}`: one document (piece) per sample, the
    150-token document split into 64 + 64 + 22 or dropped, exactly as `flat` holds them, minus padding."""
    root, _, result = _run(tmp_path, _documents(), formats=("flat_varlen", "flat"), strategy="none",
                           overlong=overlong)
    out = root / OUT_REL
    assert result.formats == ("flat", "flat_varlen")
    assert verify_shards(str(out / "flat_varlen")) == [] and verify_shards(str(out / "flat")) == []
    flat, varlen = list(read_shard_set(str(out / "flat"))), list(read_shard_set(str(out / "flat_varlen")))
    assert [sh["name"] for _, sh, _ in varlen] == [sh["name"] for _, sh, _ in flat]
    for (_, _, a), (_, _, b) in zip(flat, varlen, strict=True):
        assert np.array_equal(a.tokens, b.tokens) and np.array_equal(a.seqlens, b.seqlens)
        assert np.array_equal(a.seqptr, np.arange(a.samples + 1))  # strategy none: one segment per sample
        assert (a.loss_mask is None) == (b.loss_mask is None)
        assert a.loss_mask is None or np.array_equal(a.loss_mask, b.loss_mask)
    flat_ix, varlen_ix = load_index(str(out / "flat")), load_index(str(out / "flat_varlen"))
    assert varlen_ix["totals"] == flat_ix["totals"]
    assert int(np.concatenate([s.seqlens for _, _, s in varlen]).max()) == STAGE_SEQ_LEN
    itemsize = 2  # uint16 tokens
    for e_flat, e_var in zip(flat_ix["sets"], varlen_ix["sets"], strict=True):
        for sf, sv in zip(e_flat["shards"], e_var["shards"], strict=True):
            assert sv["files"]["tokens"]["bytes"] == sv["tokens"] * itemsize
            assert sf["files"]["tokens"]["bytes"] == sf["samples"] * STAGE_SEQ_LEN * itemsize
    excluded = pq.read_table(out / "_exclusions.parquet")["id"].to_pylist()
    assert excluded == ([LONG_ID] if overlong == "filter" else [])
