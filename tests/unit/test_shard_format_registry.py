"""Adding a shard format is one module and one registry line: a format defined here (a directory per
set, one .npz per shard, written by the per-set protocol) is written, indexed with its declared
layout, verified and read back by the unchanged shard set code, sample for sample as `flat`."""

from __future__ import annotations

import hashlib
import io

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pytest

from platform_assets.packing import formats
from platform_assets.packing.formats.base import FileEntries, SetHeader, ShardFormat, sample_columns
from platform_assets.packing.samples import ShardSamples, concat_samples
from platform_assets.packing.settings import PackingSettings
from platform_assets.packing.shard_index import load_index, read_shard_set, verify_shards
from platform_assets.packing.shard_writers import ShardSetHeader, ShardSetWriter
from platform_assets.storage import StagedDir

SEQ_LEN, PAD = 12, 0


class NpzSetWriter:
    """Holds a shard's runs and writes it as one .npz when the next shard starts (a toy directory
    format: the set decides its own files, nothing is written per run)."""

    def __init__(self, staged: StagedDir, fmt_dir: str, set_prefix: str, header: SetHeader):
        self._staged, self._dir, self._prefix = staged, fmt_dir, set_prefix
        self._runs: dict[int, list[ShardSamples]] = {}

    def add(self, run: ShardSamples, shard: int) -> None:
        self._runs.setdefault(shard, []).append(run)

    def close_set(self) -> list[FileEntries]:
        out = []
        for shard in sorted(self._runs):
            s = concat_samples(self._runs[shard])
            buf = io.BytesIO()
            np.savez(buf, input_ids=s.tokens, seqlens=s.seqlens, seqptr=s.seqptr)
            data, rel = buf.getvalue(), f"{self._prefix}/shard-{shard:05d}.npz"
            self._staged.write_bytes(f"{self._dir}/{rel}", data)
            out.append({"data": {"path": rel, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}})
        return out


def read_npz(fs: pafs.FileSystem, base: str, index: dict, shard: dict) -> ShardSamples:
    with fs.open_input_stream(f"{base}/{shard['files']['data']['path']}") as f:
        z = np.load(io.BytesIO(f.read()))
        return ShardSamples(z["input_ids"], z["seqlens"], z["seqptr"], None)


NPZ = ShardFormat("npz", 1, NpzSetWriter, read_npz, lambda h: {
    "columns": sample_columns(h, {"input_ids": "npz array", "seqlens": "npz array", "loss_mask": "-"})})


@pytest.fixture
def with_npz(monkeypatch):
    monkeypatch.setitem(formats.REGISTRY, "npz", NPZ)  # the one registry line


def _run(rng: np.random.Generator, n: int) -> ShardSamples:
    lens = rng.integers(1, SEQ_LEN + 1, n).astype(np.int32)
    tokens = np.full((n, SEQ_LEN), PAD, np.uint16)
    for i, ln in enumerate(lens):
        tokens[i, :ln] = rng.integers(1, 1000, ln)
    return ShardSamples(tokens, lens, np.arange(n + 1, dtype=np.int64), None)


def test_a_registered_format_is_written_indexed_verified_and_read_like_flat(tmp_path, with_npz):
    header = ShardSetHeader(seq_len=SEQ_LEN, vocab_size=1000, pad_id=PAD, eos_id=None, bos_id=None,
                            has_loss_mask=False, tokenizer={"name": "t", "sha256": "0" * 64}, packing={})
    writer = ShardSetWriter(StagedDir(pafs.LocalFileSystem(), str(tmp_path)), ["npz", "flat"], header,
                            samples_per_shard=4)
    rng = np.random.default_rng(3)
    group = writer.group("train", "web")
    for n in (3, 6):
        run = _run(rng, n)
        group.add(run, pa.array([f"d{i}" for i in range(n)]))
    indexes = writer.close()
    assert set(indexes) == {"npz", "flat"}
    npz_index = load_index(str(tmp_path / "npz"))
    assert npz_index["layout"]["columns"][0]["encoding"] == "npz array"
    assert [s["samples"] for s in npz_index["sets"][0]["shards"]] == [4, 4, 1]
    assert verify_shards(str(tmp_path / "npz")) == []
    flat = [s for _, _, s in read_shard_set(str(tmp_path / "flat"))]
    npz = [s for _, _, s in read_shard_set(str(tmp_path / "npz"))]
    for a, b in zip(flat, npz, strict=True):
        assert np.array_equal(a.tokens, b.tokens) and np.array_equal(a.seqlens, b.seqlens)
    assert PackingSettings(formats=["npz", "flat"]).formats == ("flat", "npz")  # registry order, not the config's


def test_an_unregistered_format_is_refused_with_the_registered_ones():
    with pytest.raises(ValueError, match="unknown shard format 'npz'; registered: flat, parquet, webdataset"):
        PackingSettings(formats=["npz"])
