"""Unpacked samples (`packing.strategy: none`, one document piece per sample) on disk without padding
(`flat_varlen`) vs padded to seq_len (`flat`): bytes on disk, write time, and the training loader's
`collate="padded"` reading them back (each micro-batch trimmed to its longest sample either way).

Input: the real corpus's GPT-2 documents, tokenized and cached exactly as packing_efficiency does it
(`prepare` is its function: same cache, same key), laid out by `pack(lengths, 2048, "none", overlong)`
with overlong `split` (the default: 82.6% non-padding when padded) and `filter` (37.1%).
Both sides write the same samples with packed_shards' own writer (ShardSetWriter, 8,192 samples a
shard) and differ only in the format, so the sizes compare layouts, not writers.
- ours: `flat_varlen` (tokens concatenated + int64 offsets per shard);
- peer: `flat` (tokens [samples, 2048], pad_id after each sample's tokens).
Then, over the `split` set, `PackedLoader(collate="padded", micro_batch_size=8, global_batch_size=64)` reads the first
`UNPADDED_BENCH_READ_BATCHES` micro-batches (default 2,000) of the set in process: non-padding tokens per
second (the two must hand out the same batches; `check` compares their token sums).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from benchmarks.harness import MB, Benchmark, BenchmarkError, Metric, Prepared, Record, Spec, Target
from benchmarks.packing_efficiency import SEQ_LEN, describe, prepare

PAD_ID = 50256  # GPT-2's <|endoftext|>, the tokenizer's pad as the tokenized_documents stage resolves it
SAMPLES_PER_SHARD = 8192  # packing's default
MICRO_BATCH, GLOBAL_BATCH = 8, 64
READ_BATCHES = int(os.environ.get("UNPADDED_BENCH_READ_BATCHES", "2000"))


def _write(spec: Spec, out: Path, fmt: str, overlong: str) -> dict[str, Any]:
    """The corpus's strategy-none samples written in `fmt`; returns counts and bytes."""
    import numpy as np
    import pyarrow as pa

    from platform_assets.packing.samples import ROWS_PER_ROW_GROUP
    from platform_assets.packing.shard_writers import ShardSetHeader, ShardSetWriter, gather_samples
    from platform_assets.packing.strategies import pack
    from platform_assets.storage import Storage

    lengths = np.fromfile(spec["lengths"], np.int64)
    values = np.memmap(spec["tokens_file"], np.uint16, mode="r")
    layout = pack(lengths, SEQ_LEN, "none", overlong)
    doc_start = np.cumsum(lengths) - lengths
    piece_src = doc_start[layout.piece_doc] + layout.piece_start
    header = ShardSetHeader(seq_len=SEQ_LEN, vocab_size=50257, pad_id=PAD_ID, eos_id=PAD_ID, bos_id=None,
                            has_loss_mask=False, tokenizer={"name": "gpt2", "sha256": "0" * 64},
                            packing={"strategy": "none", "overlong": overlong, "seq_len": SEQ_LEN})
    t0 = time.perf_counter()
    with Storage(str(out)).staged_dir(f"packed-{overlong}") as staged:
        writer = ShardSetWriter(staged, [fmt], header, SAMPLES_PER_SHARD)
        group = writer.group("train", "corpus")
        seq_ptr = layout.seq_ptr
        for a in range(0, layout.n_sequences, ROWS_PER_ROW_GROUP):
            b = min(a + ROWS_PER_ROW_GROUP, layout.n_sequences)
            p0, p1 = int(seq_ptr[a]), int(seq_ptr[b])
            run = gather_samples(SEQ_LEN, PAD_ID, header.token_dtype, seq_ptr[a: b + 1] - p0, piece_src[p0:p1],
                                 layout.piece_len[p0:p1], values, None)
            group.add(run, pa.array([f"d{d}" for d in layout.piece_doc[p0:p1].tolist()], pa.string()))
        index = writer.close()[fmt]
    seconds = time.perf_counter() - t0
    fmt_dir = out / f"packed-{overlong}" / fmt
    on_disk = sum(f.stat().st_size for f in fmt_dir.rglob("*") if f.is_file())
    return {"write_seconds": seconds, "bytes_on_disk": on_disk, "samples": index["totals"]["samples"],
            "tokens": index["totals"]["tokens"], "shards": sum(len(s["shards"]) for s in index["sets"]),
            "dir": str(fmt_dir)}


def _read(fmt_dir: str) -> dict[str, Any]:
    from training.data import LoaderConfig, PackedLoader

    loader = PackedLoader(LoaderConfig(fmt_dir, global_batch_size=GLOBAL_BATCH, micro_batch_size=MICRO_BATCH,
                                       collate="padded"))
    batches = tokens = positions = 0
    t0 = time.perf_counter()
    for batch in loader:
        tokens += int(batch["num_tokens"])
        positions += batch["input_ids"].numel()
        batches += 1
        if batches == READ_BATCHES:
            break
    return {"read_seconds": time.perf_counter() - t0, "read_batches": batches, "read_tokens": tokens,
            "read_positions": positions}


def _side(fmt: str):
    def run(spec: Spec, run_dir: Path) -> Prepared:
        def work() -> dict[str, Any]:
            written = _write(spec, run_dir, fmt, "split")
            dropped = _write(spec, run_dir, fmt, "filter")  # only the documents that fit: far more padding
            return {**written, **_read(written.pop("dir")), "filter_bytes_on_disk": dropped["bytes_on_disk"],
                    "filter_samples": dropped["samples"], "filter_tokens": dropped["tokens"]}

        return Prepared(work)

    return run


def check(ours: Record, peer: Record) -> None:
    for k in ("samples", "tokens", "read_batches", "read_tokens", "read_positions", "filter_samples",
              "filter_tokens"):
        if ours[k] != peer[k]:
            raise BenchmarkError(f"{k} differ: flat_varlen {ours[k]:,}, flat {peer[k]:,}")


BENCHMARK = Benchmark(
    name="unpadded_shards",
    description=f"one document per sample at seq_len {SEQ_LEN} (strategy none): unpadded vs padded shards on "
                "disk, and the padded-collate loader over each",
    ours_label="packing format flat_varlen (no padding on disk: tokens + int64 offsets) and "
               "training.data's VarlenSplitReader",
    peer_label="packing format flat (rows padded to seq_len with pad_id) and training.data's memmap SplitReader",
    prepare=prepare,
    ours=_side("flat_varlen"),
    peer=_side("flat"),
    metrics=(
        Metric("bytes on disk", "MB", False, lambda r, s: r["bytes_on_disk"] / MB, "{:,.1f}"),
        Metric("bytes on disk, overlong=filter", "MB", False, lambda r, s: r["filter_bytes_on_disk"] / MB,
               "{:,.1f}"),
        Metric("write time (split)", "s", False, lambda r, s: r["write_seconds"], "{:,.2f}"),
        Metric("padded loader, non-padding tokens/s", "M tokens/s", True,
               lambda r, s: r["read_tokens"] / r["read_seconds"] / 1e6, "{:,.2f}"),
        Metric("samples", "", None, lambda r, s: r["samples"], "{:,.0f}", must_match=True),
        Metric("non-padding tokens", "", None, lambda r, s: r["tokens"], "{:,.0f}", must_match=True),
        Metric("shards", "", None, lambda r, s: r["shards"], "{:,.0f}"),
        Metric("micro-batches read", "", None, lambda r, s: r["read_batches"], "{:,.0f}", must_match=True),
    ),
    packages=("platform-assets", "numpy", "tokenizers", "pyarrow", "torch"),
    check=check,
    targets=(Target("bytes on disk", "no padding on disk: smaller than the padded set", min_ratio=1.0),),
    describe=describe,
)
