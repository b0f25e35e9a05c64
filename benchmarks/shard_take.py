"""Random access to 2,048-token packed samples: `lance` take vs Parquet row-group reads vs the flat memmap.

Not yet a harness benchmark (no BENCHMARK: `python -m benchmarks.shard_take` runs it standalone).
Input: GENERATED tokens (uniform ids < 50257, 1-3 segments a sample), SHARD_TAKE_SAMPLES samples (default
8,192 = 32 MiB of uint16 tokens) written once by packed_shards' own ShardSetWriter (1,024 samples a shard)
as `flat`, `parquet` and `lance`, so every side holds the same samples. Each side then reads
SHARD_TAKE_BATCHES (default 300) batches of 8 random samples (the same indices for every side, seed 0),
after one untimed warm-up batch, in one process, from the page cache:

- ours: `training.data.shard_reader.SplitReader.read` (the flat memmap reader the loader uses);
- ours, lance: `training.data.lance_reader.LanceSplitReader.read` (one `take` per source of the batch);
- peer lance: `lance.dataset(dir).take(rows, columns=["input_ids"])`, tokens to numpy;
- peer parquet: `pq.ParquetFile(shard).read_row_group(g, columns=["input_ids"])` per sample, the row sliced
  out (a Parquet file cannot read fewer rows than a row group: 1,024 here).
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

SEQ_LEN, BATCH, VOCAB = 2048, 8, 50257


def build(root: Path, samples: int) -> None:
    import pyarrow as pa
    import pyarrow.fs as pafs

    from platform_assets.packing.samples import ShardSamples
    from platform_assets.packing.shard_writers import ShardSetHeader, ShardSetWriter
    from platform_assets.storage import StagedDir

    header = ShardSetHeader(seq_len=SEQ_LEN, vocab_size=VOCAB, pad_id=VOCAB - 1, eos_id=VOCAB - 1, bos_id=None,
                            has_loss_mask=False, tokenizer={"name": "generated", "sha256": "0" * 64}, packing={})
    writer = ShardSetWriter(StagedDir(pafs.LocalFileSystem(), str(root)), ["flat", "parquet", "lance"], header, 1024)
    group = writer.group("train", "gen")
    rng = np.random.default_rng(0)
    for start in range(0, samples, 1024):
        n = min(1024, samples - start)
        tokens = rng.integers(0, VOCAB - 1, (n, SEQ_LEN), dtype=np.uint16)
        segs = rng.integers(1, 4, n)
        seqptr = np.concatenate([[0], np.cumsum(segs)]).astype(np.int64)
        seqlens = np.concatenate([np.full(k, SEQ_LEN // k) for k in segs]).astype(np.int32)
        group.add(ShardSamples(tokens, seqlens, seqptr, None), pa.array([f"d{start}-{i}" for i in range(len(seqlens))]))
    writer.close()


def main() -> int:
    import lance
    import pyarrow.parquet as pq

    from training.data.lance_reader import LanceSplitReader
    from training.data.shard_index import read_shard_index
    from training.data.shard_reader import SplitReader

    samples = int(os.environ.get("SHARD_TAKE_SAMPLES", 8192))
    batches = int(os.environ.get("SHARD_TAKE_BATCHES", 300))
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        build(root, samples)
        rng = np.random.default_rng(0)
        idx = rng.integers(0, samples, (batches + 1, BATCH))
        src = np.zeros(BATCH, np.int64)
        flat = SplitReader(read_shard_index(root / "flat"), "train")
        lance_ours = LanceSplitReader(read_shard_index(root / "lance"), "train")
        ds = lance.dataset(str(next((root / "lance" / "train").glob("*.lance"))))
        pfiles = sorted((root / "parquet" / "train" / "gen").glob("*.parquet"))

        def parquet_read(rows):
            out = []
            for r in rows.tolist():
                f = pq.ParquetFile(pfiles[r // 1024])
                g = (r % 1024) // 1024
                out.append(f.read_row_group(g, columns=["input_ids"])["input_ids"][r % 1024].values.to_numpy())
            return np.stack(out)

        sides = {
            "ours flat memmap (SplitReader)": lambda rows: flat.read(src, rows).tokens,
            "ours lance (LanceSplitReader)": lambda rows: lance_ours.read(src, rows).tokens,
            "peer lance take": lambda rows: ds.take(rows.tolist(), columns=["input_ids"])["input_ids"]
            .combine_chunks().flatten().to_numpy().reshape(len(rows), SEQ_LEN),
            "peer parquet row groups": parquet_read,
        }
        ref = [sides["ours flat memmap (SplitReader)"](rows).astype(np.int64) for rows in idx[:3]]
        print(f"generated tokens: {samples} samples x {SEQ_LEN}, {batches} batches of {BATCH} random samples, "
              f"load avg {os.getloadavg()[0]:.2f} on {os.cpu_count()} cpus")
        for name, fn in sides.items():
            for rows, want in zip(idx[:3], ref, strict=True):
                assert np.array_equal(np.asarray(fn(rows), np.int64), want), name
            fn(idx[0])
            t0 = time.perf_counter()
            for rows in idx[1:]:
                fn(rows)
            dt = time.perf_counter() - t0
            print(f"{name:34s} {batches * BATCH / dt:10.0f} samples/s  {dt / batches * 1e3:8.3f} ms/batch")
    return 0


if __name__ == "__main__":
    sys.exit(main())
