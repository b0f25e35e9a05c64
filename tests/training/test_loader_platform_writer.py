"""The loader reads what packed_shards' own writer (platform_assets.packing.shard_writers) writes: the
`flat` directory of a ShardSetWriter run, with loss masks, several shards and sources, checksums verified
and every sample's tokens and labels as written (the loader tests use their own fixture writer)."""

from __future__ import annotations

import numpy as np
import pytest

shard_writers = pytest.importorskip("platform_assets.packing.shard_writers")

import pyarrow as pa  # noqa: E402
import pyarrow.fs as pafs  # noqa: E402
from loader_runs import take  # noqa: E402

from platform_assets.packing.shard_index import ShardSamples  # noqa: E402
from platform_assets.storage import StagedDir  # noqa: E402
from training.data import LoaderConfig, PackedLoader  # noqa: E402
from training.data.collate import IGNORE_INDEX  # noqa: E402
from training.data.shard_reader import SOURCE_SHIFT  # noqa: E402

SEQ_LEN, PAD = 16, 50256


def test_loader_reads_the_platform_writers_flat_shards(tmp_path):
    header = shard_writers.ShardSetHeader(seq_len=SEQ_LEN, vocab_size=50257, pad_id=PAD, eos_id=PAD, bos_id=None,
                                          has_loss_mask=True, tokenizer={"name": "gpt2", "sha256": "0" * 64},
                                          packing={"strategy": "test"})
    writer = shard_writers.ShardSetWriter(StagedDir(pafs.LocalFileSystem(), str(tmp_path)),
                                          ["flat", "parquet", "webdataset"], header, samples_per_shard=5)
    rng = np.random.default_rng(0)
    written = {}
    for s, source in enumerate(["chat", "web"]):
        n = 12  # 3 shards of 5, 5, 2
        tokens = np.full((n, SEQ_LEN), PAD, np.uint16)
        mask = np.zeros((n, SEQ_LEN), np.uint8)
        seqlens, seqptr = [], [0]
        for i in range(n):
            k = int(rng.integers(1, 4))
            lens = rng.multinomial(int(rng.integers(8, SEQ_LEN + 1)) - k, np.ones(k) / k) + 1
            used = int(lens.sum())
            tokens[i, :used] = rng.integers(0, 50000, used)
            mask[i, :used] = rng.integers(0, 2, used)
            seqlens += lens.tolist()
            seqptr.append(len(seqlens))
            written[(s << SOURCE_SHIFT) | i] = (tokens[i].astype(np.int64), lens.tolist(), mask[i])
        writer.group("train", source).add(ShardSamples(tokens, np.array(seqlens, np.int32), np.array(seqptr, np.int64),
                                                       mask), pa.array([f"{source}-{j}" for j in range(len(seqlens))]))
    writer.close()

    loader = PackedLoader(LoaderConfig(str(tmp_path / "flat"), global_batch_size=4, micro_batch_size=2,
                                       verify="first_open"))
    seen = set()
    for batch in take(loader):
        for r, sid in enumerate(batch["sample_ids"].tolist()):
            tokens, lens, mask = written[sid]
            assert batch["input_ids"][r].tolist() == tokens.tolist()
            labels = batch["labels"][r].tolist()
            start = 0
            for n in lens:  # labels[t] = tokens[t+1] inside a segment where mask[t+1] == 1
                for t in range(start, start + n):
                    ok = t + 1 < start + n and mask[t + 1] == 1
                    assert labels[t] == (int(tokens[t + 1]) if ok else IGNORE_INDEX)
                start += n
            seen.add(sid)
    assert seen == set(written)
