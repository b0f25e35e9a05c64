"""Loader throughput: shuffled [8, 2048] int64 micro-batches of packed GPT-2 tokens from the real corpus.

Three benchmarks (the harness compares ours with one peer at a time), same samples, same batch shape:

- `loader_throughput_webdataset`: peer `webdataset.WebDataset(tars, shardshuffle).shuffle(1000).decode()
  .to_tuple("input_ids.npy").batched(8).repeat()` in a torch DataLoader (batch_size=None);
- `loader_throughput_datasets`: peer Hugging Face `datasets` on the Parquet files (`load_dataset("parquet")`,
  `with_format("numpy")`) in a torch DataLoader (batch_size 8, random sampler, its `__getitems__` fast path);
- `loader_throughput_memmap`: the upper reference, nanoGPT's reader: a numpy.memmap over all tokens as one
  stream, 8 random windows of 2049 tokens stacked per batch (an IterableDataset in a DataLoader for the
  workers case). It reads no segment tables and computes no labels: what a loader costs at the least.

Ours: `training.data.PackedLoader` (global_batch_size 8 = micro_batch_size 8, one rank, weights
proportional to the two sources), which delivers input_ids and also labels, position_ids, segment_ids,
cu_seqlens and counts: more work per batch than any peer. With 0 workers PackedLoader iterates its dataset
in process (no DataLoader: by design, see training/data/loader.py); the peers run in a DataLoader with
num_workers=0, their documented use.

Input (built once per run in a subprocess, untimed): an even stride over the corpus's documents (every
*.jsonl; source `text` or `code` from the file name; each document cut at 256 KB of text) up to
LOADER_BENCH_TOKENS GPT-2 tokens (default 12 M; the tokenizer.json at LOADER_BENCH_TOKENIZER), EOS after
each document, packed per source by concatenation into rows of 2048 (documents split at row ends, no
padding; the partial last row dropped), and written by packed_shards' own writer
(platform_assets.packing.shard_writers.ShardSetWriter, 1,024 samples a shard) in all three formats of
SHARD_FORMAT.md: `flat` for ours, `webdataset` tars and `parquet` files for the peers, the same samples;
plus the tokens of all rows as one uint16 stream for the memmap reader. LOADER_BENCH_CACHE=<dir> keeps the
build there and reuses it (the three benchmarks share one input).

Timing: for 0 and then 2 DataLoader workers, each side builds its pipeline, takes one batch untimed
(worker start-up, first maps and caches) and then times LOADER_BENCH_BATCHES batches (default 2,000;
32.8 M token positions). The epoch is set long enough that no side restarts its iterator inside the
timed stretch. tokens/s counts 8 x 2048 positions per batch on every side.
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
    GPT2_TOKENIZER_JSON,
    MB,
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

SEQ_LEN = 2048
BATCH = 8
WORKERS = (0, 2)
SAMPLES_PER_SHARD = 1024
DOC_MAX_CHARS = 256 * 1024  # a few documents are MBs (dictionaries, logs): one must not be the whole subset
TOKENS_DEFAULT = 12_000_000
BATCHES_DEFAULT = 2000
BYTES_PER_TOKEN_GUESS = 3.0  # GPT-2 on this corpus: ~2.6 B/token prose, more on code; sets the stride only
TOKENIZE_CHUNK = 256  # documents per encode_batch call
SHUFFLE_BUFFER = 1000  # webdataset's sample shuffle buffer (its docs' usual size)
TOKENIZER_DEFAULT = GPT2_TOKENIZER_JSON
ENV = {
    "OMP_NUM_THREADS": "1",  # no side does math that threads would speed up; keep torch from oversubscribing
    "HF_HUB_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "HF_DATASETS_CACHE": "{run_dir}/hf-cache",
}


# -- input: built in a subprocess (tokenizers, numpy, pyarrow stay out of the parent) -----------------
def _corpus_files(corpus: Path) -> list[Path]:
    return [corpus] if corpus.is_file() else sorted(corpus.glob("*.jsonl"))


def _source_of(path: Path) -> str:
    return path.name.split("_", 1)[0] if "_" in path.name else path.stem


def build_input(files: list[str], out: str, token_budget: int, tokenizer_path: str) -> dict[str, Any]:
    """Tokenize, pack and write every format (see the module docstring); returns what the sides need."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.fs as pafs
    from tokenizers import Tokenizer

    from platform_assets.packing.shard_index import FORMATS, ShardSamples
    from platform_assets.packing.shard_writers import ShardSetHeader, ShardSetWriter
    from platform_assets.storage import StagedDir

    root = Path(out)
    root.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer.from_file(tokenizer_path)
    eos = tok.token_to_id("<|endoftext|>")
    vocab = tok.get_vocab_size()
    paths = [Path(f) for f in files]
    total_bytes = sum(p.stat().st_size for p in paths)
    stride = max(1, round(total_bytes / (token_budget * BYTES_PER_TOKEN_GUESS)))

    docs: dict[str, list[str]] = {}
    n_line = 0
    for p in paths:
        with open(p, encoding="utf-8") as f:
            for line in f:
                if line.strip():
                    if n_line % stride == 0:
                        docs.setdefault(_source_of(p), []).append(json.loads(line)["text"][:DOC_MAX_CHARS])
                    n_line += 1
    # tokenize the sources in turn, chunk by chunk, each source up to its byte share of the budget
    share = {s: sum(len(t) for t in ts) for s, ts in docs.items()}
    streams: dict[str, np.ndarray] = {}
    doc_ends: dict[str, np.ndarray] = {}
    used_docs = text_bytes = 0
    for source in sorted(docs):
        budget = token_budget * share[source] / sum(share.values())
        ids: list[np.ndarray] = []
        n = 0
        for i in range(0, len(docs[source]), TOKENIZE_CHUNK):
            chunk = docs[source][i: i + TOKENIZE_CHUNK]
            for text, enc in zip(chunk, tok.encode_batch(chunk), strict=True):
                ids.append(np.array(enc.ids + [eos], dtype=np.uint16))
                n += len(ids[-1])
                used_docs += 1
                text_bytes += len(text.encode("utf-8"))
                if n >= budget:
                    break
            if n >= budget:
                break
        streams[source] = np.concatenate(ids)
        doc_ends[source] = np.cumsum([len(a) for a in ids])

    # packed_shards' own writer: every format by SHARD_FORMAT.md, the same samples in the same order
    tokenizer_sha = hashlib.sha256(Path(tokenizer_path).read_bytes()).hexdigest()
    header = ShardSetHeader(seq_len=SEQ_LEN, vocab_size=vocab, pad_id=eos, eos_id=eos, bos_id=None,
                            has_loss_mask=False, tokenizer={"name": "gpt2", "sha256": tokenizer_sha},
                            packing={"strategy": "concatenate", "overlong": "split"})
    writer = ShardSetWriter(StagedDir(pafs.LocalFileSystem(), str(root)), list(FORMATS), header, SAMPLES_PER_SHARD)
    samples, rows_of_all = {}, []
    for source in sorted(streams):
        rows = len(streams[source]) // SEQ_LEN
        tokens = streams[source][: rows * SEQ_LEN].reshape(rows, SEQ_LEN)
        ends = doc_ends[source]
        row_ends = np.arange(1, rows + 1, dtype=np.int64) * SEQ_LEN
        cuts = np.union1d(ends[ends < rows * SEQ_LEN], row_ends)  # a segment ends at a document or row end
        seqlens = np.diff(np.concatenate(([0], cuts))).astype(np.int32)
        seqptr = np.concatenate(([0], np.searchsorted(cuts, row_ends) + 1)).astype(np.int64)
        doc_of_segment = np.searchsorted(ends, cuts - 1, side="right")  # the document holding its last token
        writer.group("train", source).add(ShardSamples(tokens, seqlens, seqptr, None),
                                          pa.array([f"{source}-{d}" for d in doc_of_segment.tolist()]))
        samples[source] = rows
        rows_of_all.append(tokens)
    writer.close()
    stream = root / "stream.bin"
    np.concatenate(rows_of_all).tofile(stream)  # every sample's tokens, end to end: the memmap reader's input

    def data_files(fmt: str) -> list[str]:
        index = json.loads((root / fmt / "index.json").read_text())
        return [str(root / fmt / sh["files"]["data"]["path"]) for st in index["sets"] for sh in st["shards"]]

    return {"flat": str(root / "flat"), "tars": data_files("webdataset"), "parquet": data_files("parquet"),
            "stream": str(stream), "samples": samples, "total_samples": int(sum(samples.values())),
            "tokens": int(sum(samples.values()) * SEQ_LEN), "documents": used_docs, "text_bytes": text_bytes,
            "stride": stride, "vocab_size": vocab}


def _cache_key(files: list[Path], tokens: int, tokenizer: Path) -> str:
    h = hashlib.sha256(json.dumps([tokens, str(tokenizer)]).encode())
    h.update(Path(__file__).read_bytes())  # any change to the build (or its constants) builds anew
    for f in files:
        st = f.stat()
        h.update(f"{f}:{st.st_size}:{st.st_mtime_ns}".encode())
    return h.hexdigest()[:16]


def prepare(corpus: Path, run_dir: Path) -> Spec:
    files = _corpus_files(corpus)
    if not files:
        raise BenchmarkError(f"no *.jsonl files in {corpus}")
    tokenizer = Path(os.environ.get("LOADER_BENCH_TOKENIZER", TOKENIZER_DEFAULT))
    if not tokenizer.is_file():
        raise BenchmarkError(f"tokenizer {tokenizer} not found (set LOADER_BENCH_TOKENIZER to a tokenizer.json)")
    budget = int(os.environ.get("LOADER_BENCH_TOKENS", TOKENS_DEFAULT))
    cache = os.environ.get("LOADER_BENCH_CACHE")
    out = Path(cache) / _cache_key(files, budget, tokenizer) if cache else run_dir / "input"
    meta = out / "meta.json"
    if not meta.is_file():
        code = ("import json, sys; from benchmarks.loader_throughput import build_input; "
                "print(json.dumps(build_input(json.loads(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4])))")
        proc = subprocess.run([sys.executable, "-c", code, json.dumps([str(f) for f in files]), str(out),
                               str(budget), str(tokenizer)], cwd=REPO_ROOT, capture_output=True, text=True)
        if proc.returncode != 0:
            raise BenchmarkError(f"building the input failed:\n{proc.stderr[-3000:]}")
        meta.write_text(proc.stdout.strip().splitlines()[-1])
    built = json.loads(meta.read_text())
    if built["total_samples"] < BATCH:
        raise BenchmarkError(f"only {built['total_samples']} samples of {SEQ_LEN} tokens in {corpus}: "
                             f"need at least {BATCH}")
    return {"corpus": str(corpus), "files": [str(f) for f in files], "tokenizer": str(tokenizer),
            "token_budget": budget, "batches": int(os.environ.get("LOADER_BENCH_BATCHES", BATCHES_DEFAULT)),
            **built}


def describe(spec: Spec) -> str:
    per = ", ".join(f"{s} {n:,}" for s, n in sorted(spec["samples"].items()))
    return (f"{spec['documents']:,} documents ({spec['text_bytes'] / MB:,.1f} MB of text, every "
            f"{spec['stride']}th document of {len(spec['files'])} files) -> {spec['tokens'] / 1e6:,.1f} M GPT-2 "
            f"tokens in {spec['total_samples']:,} samples of {SEQ_LEN} ({per}); {spec['batches']:,} batches of "
            f"{BATCH} timed per worker count")


# -- timing, shared by every side -------------------------------------------------------------------
def _timed(batches, n: int) -> dict[str, float]:
    """Take one batch untimed, then time n more; every batch must be [8, >= 2048] int64."""
    import torch

    def check(x) -> None:
        if x.dtype != torch.int64 or x.shape[0] != BATCH or x.shape[1] < SEQ_LEN:
            raise BenchmarkError(f"a batch of {tuple(x.shape)} {x.dtype}, expected [{BATCH}, {SEQ_LEN}] int64")

    check(next(batches))
    t0 = time.perf_counter()
    for _ in range(n):
        check(next(batches))
    seconds = time.perf_counter() - t0
    return {"seconds": seconds, "tokens_per_s": n * BATCH * SEQ_LEN / seconds, "batches": n}


def _side(spec: Spec, pipeline) -> Prepared:
    """pipeline(num_workers) -> an iterator of [8, 2048+] int64 tensors."""

    def work() -> dict[str, Any]:
        runs = {}
        for w in WORKERS:
            it = pipeline(w)
            runs[str(w)] = _timed(it, spec["batches"])
            del it  # stop its workers before the next configuration
        return {"runs": runs}

    return Prepared(work)


def _long_epoch(spec: Spec) -> int:
    return (spec["batches"] + 2) * BATCH  # one iterator covers warm-up and timed batches: no restart inside


# -- ours ---------------------------------------------------------------------------------------------
def run_ours(spec: Spec, run_dir: Path) -> Prepared:
    from training.data import LoaderConfig, PackedLoader

    def pipeline(workers: int):
        cfg = LoaderConfig(spec["flat"], global_batch_size=BATCH, micro_batch_size=BATCH, seed=0,
                           samples_per_epoch=_long_epoch(spec), num_workers=workers)
        return (b["input_ids"] for b in PackedLoader(cfg))

    return _side(spec, pipeline)


# -- peers --------------------------------------------------------------------------------------------
def _stack_int64(rows):
    import numpy as np
    import torch

    return torch.from_numpy(np.stack(rows).astype(np.int64))


def _stack_rows_int64(rows):
    return _stack_int64([r["input_ids"] for r in rows])


def _stack_tuples_int64(rows):
    return _stack_int64([r[0] for r in rows])


def run_webdataset(spec: Spec, run_dir: Path) -> Prepared:
    import webdataset as wds
    from torch.utils.data import DataLoader

    def pipeline(workers: int):
        ds = (wds.WebDataset(spec["tars"], shardshuffle=len(spec["tars"]), seed=0, empty_check=False)
              .shuffle(SHUFFLE_BUFFER).decode().to_tuple("input_ids.npy")
              .batched(BATCH, collation_fn=_stack_tuples_int64, partial=False)
              .repeat())  # re-runs the pipeline in place (new shard order): no worker restart
        return iter(DataLoader(ds, batch_size=None, num_workers=workers))

    return _side(spec, pipeline)


def run_datasets(spec: Spec, run_dir: Path) -> Prepared:
    import datasets
    import torch
    from torch.utils.data import DataLoader, RandomSampler

    ds = datasets.load_dataset("parquet", data_files=spec["parquet"], split="train",
                               cache_dir=str(run_dir / "hf-cache")).with_format("numpy", columns=["input_ids"])

    def pipeline(workers: int):
        sampler = RandomSampler(ds, replacement=False, num_samples=_long_epoch(spec),
                                generator=torch.Generator().manual_seed(0))
        return iter(DataLoader(ds, batch_size=BATCH, sampler=sampler, num_workers=workers,
                               collate_fn=_stack_rows_int64))

    return _side(spec, pipeline)


def _memmap_windows(path: str):
    import numpy as np
    import torch
    from torch.utils.data import IterableDataset, get_worker_info

    class Windows(IterableDataset):
        def __iter__(self):
            data = np.memmap(path, dtype=np.uint16, mode="r")
            info = get_worker_info()
            rng = np.random.default_rng(info.id if info else 0)
            while True:  # nanoGPT's get_batch
                ix = rng.integers(0, len(data) - SEQ_LEN - 1, size=BATCH)
                yield torch.from_numpy(np.stack([data[i: i + SEQ_LEN + 1] for i in ix]).astype(np.int64))

    return Windows()


def run_memmap(spec: Spec, run_dir: Path) -> Prepared:
    from torch.utils.data import DataLoader

    def pipeline(workers: int):
        return iter(DataLoader(_memmap_windows(spec["stream"]), batch_size=None, num_workers=workers))

    return _side(spec, pipeline)


# -- the benchmarks -----------------------------------------------------------------------------------
def _rate(workers: int):
    return lambda r, s: r["runs"][str(workers)]["tokens_per_s"] / 1e6


def _batches(r: Record, s: Spec) -> float:
    return sum(run["batches"] for run in r["runs"].values())


METRICS = (
    *(Metric(f"tokens/s, {w} workers", "M/s", True, _rate(w), "{:,.2f}") for w in WORKERS),
    peak_rss_metric(),
    cpu_seconds_metric(),
    Metric("batches timed", "", None, _batches, "{:,.0f}", must_match=True),
)


def check(ours: Record, peer: Record) -> None:
    if _batches(ours, {}) != _batches(peer, {}):
        raise BenchmarkError(f"the sides timed different batch counts: {_batches(ours, {})} vs {_batches(peer, {})}")


def _bench(name: str, peer, peer_label: str, package: str, min_ratio: float, goal: str) -> Benchmark:
    return Benchmark(
        name=name,
        description=f"shuffled [{BATCH}, {SEQ_LEN}] int64 batches of packed GPT-2 tokens, 0 and 2 DataLoader workers",
        ours_label="training.data.PackedLoader (flat shards, np.memmap; collated: labels, positions, segments)",
        peer_label=peer_label,
        prepare=prepare,
        ours=run_ours,
        peer=peer,
        metrics=METRICS,
        packages=("torch", "numpy", package),
        check=check,
        targets=tuple(Target(f"tokens/s, {w} workers", f"{goal} with {w} workers", min_ratio=min_ratio)
                      for w in WORKERS),
        env=ENV,
        describe=describe,
    )


BENCHMARKS = (
    _bench("loader_throughput_webdataset", run_webdataset,
           f"webdataset WebDataset(tars, shardshuffle).shuffle({SHUFFLE_BUFFER}).decode().batched({BATCH}).repeat() "
           f"in a DataLoader", "webdataset", 2.0, "at least 2x webdataset"),
    _bench("loader_throughput_datasets", run_datasets,
           f"datasets load_dataset('parquet').with_format('numpy') in a DataLoader(batch_size={BATCH}, random "
           f"sampler)", "datasets", 2.0, "at least 2x Hugging Face datasets"),
    _bench("loader_throughput_memmap", run_memmap,
           f"numpy.memmap random windows of {SEQ_LEN + 1} (nanoGPT get_batch), upper reference", "numpy", 0.5,
           "at least 50% of the memmap reference"),
)
