"""Random access to 2,048-token packed samples: the flat memmap vs Lance `take` vs Parquet row-group reads.

Three benchmarks (the harness compares ours with one peer at a time), same samples, same random batches:

- `shard_take_lance`: ours, the flat memmap reader the loader uses (`training.data.shard_reader.SplitReader
  .read`), vs peer `lance.dataset(dir).take(rows, columns=["input_ids"])`, tokens to numpy;
- `shard_take_parquet`: ours (flat) vs peer `pq.ParquetFile(shard).read_row_group(g, columns=["input_ids"])`
  per sample, the row sliced out (a Parquet file cannot read fewer rows than a row group);
- `shard_take_lance_reader`: ours, `training.data.lance_reader.LanceSplitReader.read` (one `take` per source
  of the batch, what the loader does with `format: lance`), vs the same peer `take`: what our reader adds.

Input: GENERATED tokens (uniform ids < 50,257, 1-3 segments a sample: random access does not depend on the
text, and uniform ids are the worst case for Lance's and Parquet's encodings), SHARD_TAKE_SAMPLES samples
(default 8,192 = 32 MiB of uint16 tokens), written once per run in a subprocess by packed_shards' own
writer (`ShardSetWriter`, 1,024 samples a shard, one row group a Parquet shard) as `flat`, `parquet` and
`lance`, so every side holds the same samples. SHARD_TAKE_CACHE=<dir> keeps the build and reuses it.

Timing: each side opens its reader (untimed), reads one warm-up batch, then times SHARD_TAKE_BATCHES
(default 300) batches of 8 random samples (the same indices on every side, seed 0), in one process, from
the page cache. A side also returns the sum of the tokens it read, which must match between the sides.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.harness import (
    REPO_ROOT,
    Benchmark,
    BenchmarkError,
    Metric,
    Prepared,
    Record,
    Spec,
    cpu_seconds_metric,
    peak_rss_metric,
)

SEQ_LEN, BATCH, VOCAB = 2048, 8, 50257
SAMPLES_PER_SHARD = 1024
SAMPLES_DEFAULT, BATCHES_DEFAULT = 8192, 300
ENV = {"OMP_NUM_THREADS": "1"}


# -- input: built in a subprocess (numpy, pyarrow, lance stay out of the parent) ----------------------
def build_input(out: str, samples: int) -> dict[str, Any]:
    import numpy as np
    import pyarrow as pa
    import pyarrow.fs as pafs

    from platform_assets.packing.samples import ShardSamples
    from platform_assets.packing.shard_writers import ShardSetHeader, ShardSetWriter
    from platform_assets.storage import StagedDir

    root = Path(out)
    header = ShardSetHeader(seq_len=SEQ_LEN, vocab_size=VOCAB, pad_id=VOCAB - 1, eos_id=VOCAB - 1, bos_id=None,
                            has_loss_mask=False, tokenizer={"name": "generated", "sha256": "0" * 64}, packing={})
    writer = ShardSetWriter(StagedDir(pafs.LocalFileSystem(), str(root)), ["flat", "parquet", "lance"], header,
                            SAMPLES_PER_SHARD)
    group = writer.group("train", "gen")
    rng = np.random.default_rng(0)
    for start in range(0, samples, SAMPLES_PER_SHARD):
        n = min(SAMPLES_PER_SHARD, samples - start)
        tokens = rng.integers(0, VOCAB - 1, (n, SEQ_LEN), dtype=np.uint16)
        segs = rng.integers(1, 4, n)
        seqptr = np.concatenate([[0], np.cumsum(segs)]).astype(np.int64)
        seqlens = np.concatenate([np.full(k, SEQ_LEN // k) for k in segs]).astype(np.int32)
        seqlens[seqptr[1:] - 1] += SEQ_LEN - np.add.reduceat(seqlens, seqptr[:-1])  # segments fill the row
        group.add(ShardSamples(tokens, seqlens, seqptr, None),
                  pa.array([f"d{start}-{i}" for i in range(len(seqlens))]))
    writer.close()
    return {"root": out, "samples": samples,
            "bytes": sum(p.stat().st_size for p in root.rglob("*") if p.is_file())}


def prepare(corpus: Path, run_dir: Path) -> Spec:
    """`corpus` is not read (the input is generated); the harness asks for one like every benchmark."""
    samples = int(os.environ.get("SHARD_TAKE_SAMPLES", SAMPLES_DEFAULT))
    batches = int(os.environ.get("SHARD_TAKE_BATCHES", BATCHES_DEFAULT))
    cache = os.environ.get("SHARD_TAKE_CACHE")
    key = hashlib.sha256(Path(__file__).read_bytes() + str(samples).encode()).hexdigest()[:16]
    out = Path(cache) / key if cache else run_dir / "input"
    meta = out / "meta.json"
    if not meta.is_file():
        code = ("import json, sys; from benchmarks.shard_take import build_input; "
                "print(json.dumps(build_input(sys.argv[1], int(sys.argv[2]))))")
        proc = subprocess.run([sys.executable, "-c", code, str(out), str(samples)], cwd=REPO_ROOT,
                              capture_output=True, text=True)
        if proc.returncode != 0:
            raise BenchmarkError(f"building the shard_take input failed:\n{proc.stderr[-3000:]}")
        meta.write_text(proc.stdout.strip().splitlines()[-1])
    return {**json.loads(meta.read_text()), "batches": batches}


def describe(spec: Spec) -> str:
    return (f"generated tokens: {spec['samples']:,} samples x {SEQ_LEN} (uint16), {spec['bytes'] / 2**20:,.0f} MiB "
            f"in three formats, {SAMPLES_PER_SHARD} samples a shard; {spec['batches']} batches of {BATCH} random "
            f"samples")


def _batch_rows(spec: Spec):
    import numpy as np

    return np.random.default_rng(0).integers(0, spec["samples"], (spec["batches"] + 1, BATCH))


def _side(spec: Spec, read) -> Prepared:
    """`read(rows) -> [BATCH, SEQ_LEN] tokens`; the first batch is the untimed warm-up."""
    import numpy as np

    rows = _batch_rows(spec)

    def work() -> dict[str, Any]:
        read(rows[0])
        total = 0
        t0 = time.perf_counter()
        for r in rows[1:]:
            tokens = read(r)
            total += int(np.asarray(tokens, dtype=np.int64).sum())
        seconds = time.perf_counter() - t0
        return {"samples_per_s": spec["batches"] * BATCH / seconds, "ms_per_batch": seconds / spec["batches"] * 1e3,
                "token_sum": total}

    return Prepared(work)


def run_flat(spec: Spec, run_dir: Path) -> Prepared:
    import numpy as np

    from training.data.shard_index import read_shard_index
    from training.data.shard_reader import SplitReader

    reader = SplitReader(read_shard_index(Path(spec["root"]) / "flat"), "train")
    source = np.zeros(BATCH, np.int64)
    return _side(spec, lambda rows: reader.read(source, rows).tokens)


def run_lance_reader(spec: Spec, run_dir: Path) -> Prepared:
    import numpy as np

    from training.data.lance_reader import LanceSplitReader
    from training.data.shard_index import read_shard_index

    reader = LanceSplitReader(read_shard_index(Path(spec["root"]) / "lance"), "train")
    source = np.zeros(BATCH, np.int64)
    return _side(spec, lambda rows: reader.read(source, rows).tokens)


def run_lance_take(spec: Spec, run_dir: Path) -> Prepared:
    import lance

    ds = lance.dataset(str(next((Path(spec["root"]) / "lance" / "train").glob("*.lance"))))

    def read(rows):
        column = ds.take(rows.tolist(), columns=["input_ids"])["input_ids"].combine_chunks()
        return column.flatten().to_numpy().reshape(len(rows), SEQ_LEN)

    return _side(spec, read)


def run_parquet(spec: Spec, run_dir: Path) -> Prepared:
    import numpy as np
    import pyarrow.parquet as pq

    files = [pq.ParquetFile(p) for p in sorted((Path(spec["root"]) / "parquet" / "train" / "gen").glob("*.parquet"))]
    if files and files[0].metadata.num_row_groups != 1:
        raise BenchmarkError("the Parquet shards were expected to hold one row group each")

    def read(rows):
        return np.stack([files[r // SAMPLES_PER_SHARD].read_row_group(0, columns=["input_ids"])["input_ids"]
                         [r % SAMPLES_PER_SHARD].values.to_numpy() for r in rows.tolist()])

    return _side(spec, read)


# -- the benchmarks -----------------------------------------------------------------------------------
METRICS = (
    Metric("samples/s", "", True, lambda r, s: r["samples_per_s"], "{:,.0f}"),
    Metric("time per batch of 8", "ms", False, lambda r, s: r["ms_per_batch"], "{:,.3f}"),
    peak_rss_metric(),
    cpu_seconds_metric(),
    Metric("sum of the tokens read", "", None, lambda r, s: r["token_sum"], "{:,.0f}", must_match=True),
)


def check(ours: Record, peer: Record) -> None:
    if ours["token_sum"] != peer["token_sum"]:
        raise BenchmarkError(f"the sides read different tokens (sums {ours['token_sum']} vs {peer['token_sum']})")


def _bench(name: str, ours, ours_label: str, peer, peer_label: str, packages: tuple[str, ...]) -> Benchmark:
    return Benchmark(
        name=name,
        description=f"random take of batches of {BATCH} packed {SEQ_LEN}-token samples, one process, page cache",
        ours_label=ours_label, peer_label=peer_label, prepare=prepare, ours=ours, peer=peer, metrics=METRICS,
        packages=("numpy", "pyarrow", *packages), check=check, env=ENV, describe=describe,
    )


_FLAT = "training.data SplitReader.read (flat shards, np.memmap)"
_TAKE = "lance.dataset(dir).take(rows, columns=['input_ids'])"
BENCHMARKS = (
    _bench("shard_take_lance", run_flat, _FLAT, run_lance_take, _TAKE, ("pylance",)),
    _bench("shard_take_parquet", run_flat, _FLAT, run_parquet,
           "pyarrow ParquetFile.read_row_group(g, columns=['input_ids']) per sample", ()),
    _bench("shard_take_lance_reader", run_lance_reader, "training.data LanceSplitReader.read (one take per source)",
           run_lance_take, _TAKE, ("pylance",)),
)
