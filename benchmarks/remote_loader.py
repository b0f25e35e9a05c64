"""Remote loader: [8, 2048] int64 batches of packed GPT-2 tokens streamed from a local S3 server (moto)
through a cache of 10% of the data: ours (PackedLoader, block shuffle) vs litdata's StreamingDataset.

Input (built once in a subprocess, untimed; REMOTE_BENCH_CACHE=<dir> keeps and reuses it): the samples of
loader_throughput's build (an even stride of the corpus's documents, GPT-2 tokens packed into rows of 2048
per source, written by packed_shards' own writer), in shards of REMOTE_BENCH_SHARD_SAMPLES samples
(default 16: 64 KiB of tokens; 10% of an 8 M-token set, 372 samples, must hold what 2 workers may be
reading at once: 5 messages of 7 micro-batches of 8 = 280 samples, plus the shards where blocks cross),
REMOTE_BENCH_TOKENS tokens (default 8 M). The same rows, in the same order, are written with litdata's
`optimize` (TokensLoader, one chunk per shard's worth of tokens) for the peer.

Each side, untimed: starts its own moto server on 127.0.0.1, uploads its format (flat files / litdata
chunks + index.json) to a bucket. Timed, for 0 and 2 DataLoader workers, each with a fresh, empty cache
dir bounded at 10% of the shard bytes (REMOTE_BENCH_CACHE_FRACTION): one batch untimed (first downloads),
then REMOTE_BENCH_BATCHES batches (default 300, under one epoch on both sides).

- ours: PackedLoader(data_dir="s3://...", cache=CacheConfig(max_bytes), shuffle="block", block_shards=1),
  global = micro batch 8; checksummed downloads, background prefetch of the next 4 steps, exact resume.
- peer: litdata StreamingDataset("s3://...", item_loader=TokensLoader(block_size=2048), shuffle=True,
  max_cache_size) in its StreamingDataLoader(batch_size=8), boto3 pointed at the same kind of server.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
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
    Target,
    cpu_seconds_metric,
    peak_rss_metric,
)
from benchmarks.loader_throughput import _cache_key, _corpus_files, _timed

SEQ_LEN = 2048
BATCH = 8
WORKERS = (0, 2)
TOKENS_DEFAULT = 8_000_000
BATCHES_DEFAULT = 300
SHARD_SAMPLES_DEFAULT = 16
CACHE_FRACTION_DEFAULT = 0.10
BLOCK_SHARDS = 1  # window per source: 1 shard + 1 a micro-batch crossing into the next block touches
BUCKET = "bench"
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}
ENV = {"OMP_NUM_THREADS": "1", **CREDENTIALS}


# -- input ---------------------------------------------------------------------------------------------
def build_litdata(stream: str, out: str, shard_samples: int) -> None:
    """The rows of `stream` (uint16, SEQ_LEN each, in sample order) as litdata chunks of shard_samples rows."""
    import numpy as np
    from litdata import TokensLoader, optimize

    rows = len(np.memmap(stream, dtype=np.uint16, mode="r")) // SEQ_LEN
    optimize(fn=_Row(stream), inputs=list(range(rows)), output_dir=out, chunk_size=shard_samples * SEQ_LEN,
             item_loader=TokensLoader(), num_workers=1, mode="overwrite")


class _Row:
    """Row i of the token stream as a tensor (picklable: optimize's worker is a spawned process)."""

    def __init__(self, stream: str) -> None:
        self.stream = stream

    def __call__(self, i: int):
        import numpy as np
        import torch

        rows = np.memmap(self.stream, dtype=np.uint16, mode="r").reshape(-1, SEQ_LEN)
        return torch.from_numpy(np.array(rows[i]))  # uint16, as ours: both sides move the same bytes


def prepare(corpus: Path, run_dir: Path) -> Spec:
    files = _corpus_files(corpus)
    if not files:
        raise BenchmarkError(f"no *.jsonl files in {corpus}")
    from benchmarks.loader_throughput import TOKENIZER_DEFAULT

    tokenizer = Path(os.environ.get("LOADER_BENCH_TOKENIZER", TOKENIZER_DEFAULT))
    if not tokenizer.is_file():
        raise BenchmarkError(f"tokenizer {tokenizer} not found (set LOADER_BENCH_TOKENIZER to a tokenizer.json)")
    budget = int(os.environ.get("REMOTE_BENCH_TOKENS", TOKENS_DEFAULT))
    shard_samples = int(os.environ.get("REMOTE_BENCH_SHARD_SAMPLES", SHARD_SAMPLES_DEFAULT))
    cache = os.environ.get("REMOTE_BENCH_CACHE")
    own = hashlib.sha256(Path(__file__).read_bytes())  # a change here (build_litdata) builds anew, and one
    own.update((REPO_ROOT / "platform_assets/packing/formats/flat.py").read_bytes())  # to the flat writer
    own = own.hexdigest()[:8]
    key = f"{_cache_key(files, budget, tokenizer)}-{shard_samples}-{own}"
    out = Path(cache) / key if cache else run_dir / "input"
    meta = out / "meta.json"
    if not meta.is_file():
        # loader_throughput's build with smaller shards (its module constant, read when build_input runs)
        code = ("import json, sys; import benchmarks.loader_throughput as lt; lt.SAMPLES_PER_SHARD = int(sys.argv[5]); "
                "m = lt.build_input(json.loads(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4]); "
                "from benchmarks.remote_loader import build_litdata; "
                "build_litdata(m['stream'], sys.argv[2] + '/litdata', int(sys.argv[5])); print(json.dumps(m))")
        proc = subprocess.run([sys.executable, "-c", code, json.dumps([str(f) for f in files]), str(out), str(budget),
                               str(tokenizer), str(shard_samples)], cwd=REPO_ROOT, capture_output=True, text=True)
        if proc.returncode != 0:
            raise BenchmarkError(f"building the input failed:\n{proc.stderr[-3000:]}")
        meta.write_text(proc.stdout.strip().splitlines()[-1])
    built = json.loads(meta.read_text())
    index = json.loads((Path(built["flat"]) / "index.json").read_text())
    shard_bytes = [sum(f["bytes"] for f in sh["files"].values()) for s in index["sets"] for sh in s["shards"]]
    batches = int(os.environ.get("REMOTE_BENCH_BATCHES", BATCHES_DEFAULT))
    if batches + 1 > built["total_samples"] // BATCH - 1:
        raise BenchmarkError(f"{batches} batches + 1 untimed do not fit one epoch of {built['total_samples']} "
                             f"samples: lower REMOTE_BENCH_BATCHES or raise REMOTE_BENCH_TOKENS")
    fraction = float(os.environ.get("REMOTE_BENCH_CACHE_FRACTION", CACHE_FRACTION_DEFAULT))
    return {"corpus": str(corpus), "flat": built["flat"], "litdata": str(out / "litdata"),
            "samples": built["samples"], "total_samples": built["total_samples"], "tokens": built["tokens"],
            "documents": built["documents"], "shards": len(shard_bytes), "shard_samples": shard_samples,
            "data_bytes": sum(shard_bytes), "cache_bytes": int(sum(shard_bytes) * fraction), "batches": batches}


def describe(spec: Spec) -> str:
    return (f"{spec['tokens'] / 1e6:,.1f} M GPT-2 tokens of {spec['documents']:,} documents in "
            f"{spec['total_samples']:,} samples of {SEQ_LEN}, {spec['shards']} shards of {spec['shard_samples']} "
            f"({spec['data_bytes'] / 2**20:,.1f} MiB); cache {spec['cache_bytes'] / 2**20:,.2f} MiB "
            f"(10%); {spec['batches']} batches of {BATCH} timed per worker count")


# -- a moto server per side ------------------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serve(local: Path, prefix: str) -> tuple[subprocess.Popen, str]:
    """Start moto's S3 server, upload every file under `local` to s3://bench/<prefix>/; (process, endpoint)."""
    import boto3

    os.environ.update(CREDENTIALS)
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            break
        except OSError:
            if time.time() > deadline:
                proc.kill()
                raise BenchmarkError("moto server did not start") from None
            time.sleep(0.2)
    endpoint = f"http://127.0.0.1:{port}"
    client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
    client.create_bucket(Bucket=BUCKET)
    for path in sorted(p for p in local.rglob("*") if p.is_file()):
        client.upload_file(str(path), BUCKET, f"{prefix}/{path.relative_to(local).as_posix()}")
    return proc, endpoint


def _dir_bytes(root: Path) -> int:
    """The shard bytes a cache dir holds: index.json files, the folders' ownership marks and the workers' board
    are bookkeeping outside the budget on both sides (a mark is ~80 bytes a folder, the board 8 a worker)."""
    from training.data.remote_reader import CACHE_MARK
    from training.data.worker_fetch import BOARD_NAME

    return sum(p.stat().st_size for p in root.rglob("*")
               if p.is_file() and not p.name.endswith(".json") and p.name != CACHE_MARK
               and not p.name.startswith(BOARD_NAME))


def _side(spec: Spec, run_dir: Path, local: str, prefix: str, pipeline) -> Prepared:
    """pipeline(url, endpoint, cache_dir, workers) -> an iterator of [8, 2048] int64 tensors."""
    server, endpoint = _serve(Path(local), prefix)

    def work() -> dict[str, Any]:
        runs = {}
        try:
            for w in WORKERS:
                cache_dir = run_dir / f"cache-{w}"
                it = pipeline(f"s3://{BUCKET}/{prefix}", endpoint, cache_dir, w)
                runs[str(w)] = {**_timed(it, spec["batches"]), "cache_dir_bytes": _dir_bytes(cache_dir)}
                del it
        finally:  # also when a side fails: no server outlives its run
            server.terminate()
            server.wait(timeout=10)
        return {"runs": runs}

    return Prepared(work)


def run_ours(spec: Spec, run_dir: Path) -> Prepared:
    from training.data import PackedLoader
    from training.data.loader import CacheConfig, LoaderConfig

    def pipeline(url: str, endpoint: str, cache_dir: Path, workers: int):
        cache = CacheConfig(dir=str(cache_dir), max_bytes=spec["cache_bytes"], endpoint_url=endpoint)
        cfg = LoaderConfig(url, global_batch_size=BATCH, micro_batch_size=BATCH, seed=0, num_workers=workers,
                           shuffle="block", block_shards=BLOCK_SHARDS, cache=cache)
        return (b["input_ids"] for b in PackedLoader(cfg))

    return _side(spec, run_dir, spec["flat"], "flat", pipeline)


def run_litdata(spec: Spec, run_dir: Path) -> Prepared:
    from litdata import StreamingDataLoader, StreamingDataset, TokensLoader

    def pipeline(url: str, endpoint: str, cache_dir: Path, workers: int):
        ds = StreamingDataset(url, item_loader=TokensLoader(block_size=SEQ_LEN), shuffle=True, seed=0,
                              cache_dir=str(cache_dir), max_cache_size=spec["cache_bytes"],
                              storage_options={"endpoint_url": endpoint})
        return (b.long() for b in StreamingDataLoader(ds, batch_size=BATCH, num_workers=workers, drop_last=True))

    return _side(spec, run_dir, spec["litdata"], "litdata", pipeline)


# -- the benchmark ---------------------------------------------------------------------------------------
def _rate(workers: int):
    return lambda r, s: r["runs"][str(workers)]["tokens_per_s"] / 1e6


def _cache(workers: int):
    return lambda r, s: r["runs"][str(workers)]["cache_dir_bytes"] / 2**20


def _batches(r: Record, s: Spec) -> float:
    return sum(run["batches"] for run in r["runs"].values())


def check(ours: Record, peer: Record) -> None:
    if _batches(ours, {}) != _batches(peer, {}):
        raise BenchmarkError(f"the sides timed different batch counts: {_batches(ours, {})} vs {_batches(peer, {})}")


BENCHMARKS = (
    Benchmark(
        name="remote_loader_litdata",
        description=f"[{BATCH}, {SEQ_LEN}] int64 batches streamed from a local S3 server (moto) through a cache of "
                    f"10% of the data, 0 and 2 DataLoader workers",
        ours_label=f"training.data.PackedLoader over s3:// (flat shards, block shuffle of {BLOCK_SHARDS} shard, "
                   f"sha256-verified downloads, prefetch; collated: labels, positions, segments)",
        peer_label="litdata StreamingDataset(s3://, TokensLoader(2048), shuffle=True, max_cache_size) in its "
                   "StreamingDataLoader",
        prepare=prepare,
        ours=run_ours,
        peer=run_litdata,
        metrics=(
            *(Metric(f"tokens/s, {w} workers", "M/s", True, _rate(w), "{:,.2f}") for w in WORKERS),
            *(Metric(f"cache dir after, {w} workers", "MiB", None, _cache(w), "{:,.2f}") for w in WORKERS),
            peak_rss_metric(),
            cpu_seconds_metric(),
            Metric("batches timed", "", None, _batches, "{:,.0f}", must_match=True),
        ),
        packages=("torch", "numpy", "litdata", "moto", "boto3", "pyarrow"),
        check=check,
        targets=tuple(Target(f"tokens/s, {w} workers", f"at least litdata's rate with {w} workers", min_ratio=1.0)
                      for w in WORKERS),
        env=ENV,
        describe=describe,
    ),
)
