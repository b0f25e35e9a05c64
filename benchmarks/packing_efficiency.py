"""Packing efficiency at seq_len 2048 on the real corpus's GPT-2 document lengths: every strategy of
ours vs the Hugging Face `run_clm` concatenate-and-chunk (`group_texts`), same documents, same run.

Input: every document (one per JSONL line, its `text`) of every `*.jsonl` under `--corpus`, files in
name order, lines in file order (no sample), tokenized with the GPT-2 tokenizer (`tokenizers`,
`add_special_tokens=False`) plus one `<|endoftext|>` each, so a length counts its EOS as the
tokenized_documents stage will. Tokenizing the 500 MB corpus takes ~4-5 minutes on 2 cores, so
`prepare` does it once, in a subprocess, and caches the lengths (int64) and the tokens (uint16, the
peer needs them) under `PACKING_BENCH_CACHE` (default benchmarks/.work/packing_efficiency-cache/),
keyed by sha256 of the files' names, sizes and mtimes and of the tokenizer file; the report says
whether this run tokenized or read the cache. The tokenizer is `PACKING_BENCH_TOKENIZER` (default
../shared/data/tokenizers/gpt2/tokenizer.json).

- ours: `platform_assets.packing.strategies.pack(lengths, 2048, strategy, overlong)` for every
  strategy, with `overlong="split"` (the default: documents over 2048 tokens become full 2048-token
  sequences plus a remainder packed like any document) and with `overlong="filter"` (those documents
  dropped: only what packing proper can place, the stricter test of an algorithm). Each layout is
  checked with `verify_packing` (untimed). Timing is per `pack` call: the layout from lengths, no
  token is copied. For the documents/s target the same calls run on >= `PACKING_BENCH_SCALE_DOCS`
  documents (default 1,000,000): seeded shuffles of the corpus's lengths, copied until that many.
- peer: `datasets.Dataset.map(group_texts, batched=True)` exactly as transformers'
  examples/pytorch/language-modeling/run_clm.py does it (`group_texts` verbatim, batch_size 1000,
  block_size 2048), on a Dataset of the same tokens with `input_ids` and `attention_mask` columns, as
  run_clm's tokenize step leaves them. It concatenates each batch of 1000 documents and cuts it into
  2048-token blocks, dropping each batch's remainder: no padding (100% efficiency) but documents cut
  across blocks and tokens lost. Which documents are split or cut short follows from the lengths and
  the batch boundaries; `finish` checks that layout against the peer's actual output, token by token.
  The `overlong=filter` rows give the peer the same documents (those <= 2048 tokens).

Efficiency = non-padding tokens / (sequences x 2048). "documents split" counts documents in more than
one sequence; ours split only documents longer than seq_len (overlong="split"), as they must.
Times are not comparable work (ours lays out from lengths; the peer builds the token sequences and
writes them), so they get no ratio; nor is peak RSS (both children also hold the untimed checks'
arrays: the peer's whole output is compared token by token), so it is not reported.
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
    DEFAULT_WORK_ROOT,
    GPT2_TOKENIZER_JSON,
    REPO_ROOT,
    Benchmark,
    BenchmarkError,
    Metric,
    Prepared,
    Record,
    Spec,
    Target,
)

SEQ_LEN = 2048
PATTERN = "*.jsonl"
EOS = "<|endoftext|>"
STRATEGIES = ("best_fit_decreasing", "first_fit_decreasing", "first_fit", "window", "streaming_best_fit",
              "none")  # platform_assets.packing.strategies.STRATEGIES (not imported: the parent stays light)
MODES = ("split", "filter")
PEER = "group_texts"
PEER_BATCH = 1000  # datasets.map's default batch_size, which run_clm keeps
TOKENIZE_BATCH = 256  # documents per encode_batch_fast call
SCALE_DOCS = 1_000_000
SCALE_SEED = 0
CACHE_VERSION = 1  # bump when what the cache holds changes
TOKENIZER = Path(os.environ.get("PACKING_BENCH_TOKENIZER", GPT2_TOKENIZER_JSON))


def cache_dir() -> Path:
    return Path(os.environ.get("PACKING_BENCH_CACHE", DEFAULT_WORK_ROOT / "packing_efficiency-cache"))


def corpus_files(corpus: Path) -> list[Path]:
    return [corpus] if corpus.is_file() else sorted(corpus.glob(PATTERN))


def cache_key(files: list[Path], tokenizer: Path) -> str:
    """sha256 of what the lengths depend on: each file's name, size and mtime, and the tokenizer."""
    stats = [[str(f.resolve()), f.stat().st_size, f.stat().st_mtime_ns] for f in files]
    h = hashlib.sha256(json.dumps({"version": CACHE_VERSION, "eos": EOS, "files": stats}).encode())
    h.update(hashlib.sha256(tokenizer.read_bytes()).digest())
    return h.hexdigest()


# -- the cache: runs in a child process (tokenizers, numpy) --------------------------------------------
def build_cache(files: list[str], tokenizer: str, prefix: str) -> dict[str, Any]:
    """Tokenize every document; write PREFIX.lengths.i64 (one int64 per document, EOS included) and
    PREFIX.tokens.u16 (all tokens, documents end to end). Written under temporary names and renamed."""
    import numpy as np
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(tokenizer)
    eos = tok.token_to_id(EOS)
    if eos is None:
        raise ValueError(f"tokenizer {tokenizer} has no {EOS} token")
    if tok.get_vocab_size() > 65536:
        raise ValueError(f"tokenizer {tokenizer}: vocab {tok.get_vocab_size()} does not fit uint16")
    lengths: list[int] = []
    t0 = time.perf_counter()
    tokens_tmp, lengths_tmp = Path(prefix + ".tokens.u16.tmp"), Path(prefix + ".lengths.i64.tmp")
    with open(tokens_tmp, "wb") as out:
        def flush(batch: list[str]) -> None:
            for enc in tok.encode_batch_fast(batch, add_special_tokens=False):
                ids = np.asarray(enc.ids + [eos], dtype=np.uint16)
                out.write(ids.tobytes())
                lengths.append(ids.size)
            batch.clear()

        for name in files:
            batch: list[str] = []
            with open(name, encoding="utf-8") as f:
                for line_no, line in enumerate(f, 1):
                    if not line.strip():
                        continue
                    text = json.loads(line).get("text")
                    if not isinstance(text, str):
                        raise ValueError(f"{name}:{line_no}: no string 'text' field")
                    batch.append(text)
                    if len(batch) == TOKENIZE_BATCH:
                        flush(batch)
            flush(batch)
            print(f"[packing_efficiency] tokenized {name}: {len(lengths):,} documents so far, "
                  f"{time.perf_counter() - t0:,.0f} s", file=sys.stderr, flush=True)
    np.asarray(lengths, dtype=np.int64).tofile(lengths_tmp)
    tokens_tmp.rename(prefix + ".tokens.u16")
    lengths_tmp.rename(prefix + ".lengths.i64")
    return {"docs": len(lengths), "tokens": int(sum(lengths)), "tokenize_seconds": time.perf_counter() - t0}


def prepare(corpus: Path, run_dir: Path) -> Spec:
    files = corpus_files(corpus)
    if not files:
        raise BenchmarkError(f"no {PATTERN} files in {corpus}")
    if not TOKENIZER.is_file():
        raise BenchmarkError(f"GPT-2 tokenizer {TOKENIZER} not found (set PACKING_BENCH_TOKENIZER)")
    key = cache_key(files, TOKENIZER)
    root = cache_dir()
    root.mkdir(parents=True, exist_ok=True)
    prefix = root / key[:16]
    meta_path = prefix.with_suffix(".json")
    cached = meta_path.is_file()
    if cached:
        meta = json.loads(meta_path.read_text())
    else:
        code = ("import json, sys; from benchmarks.packing_efficiency import build_cache; "
                "print(json.dumps(build_cache(json.loads(sys.argv[1]), sys.argv[2], sys.argv[3])))")
        proc = subprocess.run([sys.executable, "-c", code, json.dumps([str(f) for f in files]), str(TOKENIZER),
                               str(prefix)], cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True)
        if proc.returncode != 0:
            raise BenchmarkError(f"tokenizing {corpus} failed (exit {proc.returncode}): see the messages above")
        meta = {"key": key, "files": [str(f) for f in files], **json.loads(proc.stdout.strip().splitlines()[-1])}
        tmp = meta_path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(meta, indent=1))
        tmp.rename(meta_path)  # last: a cache entry exists only once its arrays are complete
    return {"corpus": str(corpus), "files": [str(f) for f in files], "cached": cached, "cache_dir": str(root),
            "lengths": str(prefix) + ".lengths.i64", "tokens_file": str(prefix) + ".tokens.u16",
            "docs": meta["docs"], "tokens": meta["tokens"], "tokenize_seconds": meta["tokenize_seconds"],
            "tokenizer": str(TOKENIZER), "seq_len": SEQ_LEN,
            "scale_docs": int(os.environ.get("PACKING_BENCH_SCALE_DOCS", SCALE_DOCS))}


def describe(spec: Spec) -> str:
    how = ("read from the cache" if spec["cached"]
           else f"tokenized in this run ({spec['tokenize_seconds']:,.0f} s) and cached")
    return (f"all {spec['docs']:,} documents of {len(spec['files'])} files, {spec['tokens']:,} GPT-2 tokens "
            f"incl. one EOS each, in corpus order (no sample); lengths {how} under {spec['cache_dir']}, keyed "
            f"by the files' sizes + mtimes and the tokenizer's sha256; seq_len {spec['seq_len']}")


# -- ours ----------------------------------------------------------------------------------------------
def scaled_lengths(lengths: Any, at_least: int) -> Any:
    """Seeded shuffles of `lengths`, end to end, until there are at least `at_least` documents."""
    import numpy as np

    rng = np.random.default_rng(SCALE_SEED)
    copies = max(1, -(-at_least // max(lengths.size, 1)))
    return np.concatenate([lengths[rng.permutation(lengths.size)] for _ in range(copies)])


def run_ours(spec: Spec, run_dir: Path) -> Prepared:
    import numpy as np

    from platform_assets.packing.strategies import STRATEGIES as OURS
    from platform_assets.packing.strategies import pack, verify_packing

    if tuple(OURS) != STRATEGIES:
        raise BenchmarkError(f"strategies changed: {OURS}; update benchmarks/packing_efficiency.py")
    lengths = np.fromfile(spec["lengths"], np.int64)
    scaled = scaled_lengths(lengths, spec["scale_docs"])
    pack(lengths[:1000], SEQ_LEN)  # first-call costs (imports inside numpy), untimed

    def work() -> dict[str, Any]:
        runs: dict[str, Any] = {}
        for mode in MODES:
            for strategy in STRATEGIES:
                t0 = time.perf_counter()
                p = pack(lengths, SEQ_LEN, strategy, mode)
                seconds = time.perf_counter() - t0
                verify_packing(p, lengths)
                pieces = np.bincount(p.piece_doc, minlength=lengths.size)
                runs[f"{strategy}/{mode}"] = {
                    "seconds": seconds, "efficiency": p.efficiency, "sequences": p.n_sequences,
                    "tokens": p.tokens, "tokens_dropped": int(lengths[p.dropped].sum()),
                    "pieces": int(p.piece_len.size),
                    "documents_split": p.documents_split, "documents_dropped": int(p.dropped.size),
                    "documents_split_that_fit": int(np.count_nonzero((pieces > 1) & (lengths <= SEQ_LEN))),
                }
        for strategy in STRATEGIES:
            t0, c0 = time.perf_counter(), time.process_time()
            p = pack(scaled, SEQ_LEN, strategy)
            seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
            verify_packing(p, scaled)
            runs[f"{strategy}/scaled"] = {"seconds": seconds, "cpu_seconds": cpu, "docs": int(scaled.size),
                                          "efficiency": p.efficiency}
        return {"docs": int(lengths.size), "input_tokens": int(lengths.sum()), "runs": runs}

    return Prepared(work)


# -- peer ----------------------------------------------------------------------------------------------
def make_group_texts(block_size: int):
    from itertools import chain

    # transformers examples/pytorch/language-modeling/run_clm.py, verbatim
    def group_texts(examples):
        # Concatenate all texts.
        concatenated_examples = {k: list(chain(*examples[k])) for k in examples.keys()}
        total_length = len(concatenated_examples[list(examples.keys())[0]])
        # We drop the small remainder, and if the total_length < block_size  we exclude this batch and return an
        # empty dict. We could add padding if the model supported it instead of this drop, you can customize
        # this part to your needs.
        total_length = (total_length // block_size) * block_size
        # Split by chunks of max_len.
        result = {
            k: [t[i : i + block_size] for i in range(0, total_length, block_size)]
            for k, t in concatenated_examples.items()
        }
        result["labels"] = result["input_ids"].copy()
        return result

    return group_texts


def group_texts_layout(lengths: Any, block: int, batch: int) -> dict[str, Any]:
    """What group_texts over batches of `batch` documents does to each document, from the lengths:
    per batch, the documents end to end cut every `block` tokens, the batch's remainder dropped."""
    import numpy as np

    n = lengths.size
    firsts = np.arange(0, n, batch)
    ends = np.cumsum(lengths)
    starts = ends - lengths
    base = np.repeat(starts[firsts], np.diff(np.append(firsts, n)))  # token offset of each document's batch
    totals = np.add.reduceat(lengths, firsts) if n else np.zeros(0, np.int64)
    kept_total = totals // block * block
    kept = np.repeat(kept_total, np.diff(np.append(firsts, n)))
    a, b = starts - base, np.minimum(ends - base, kept)  # the kept part of each document, within its batch
    has = b > a
    split = has & ((b - 1) // block > a // block)
    return {"sequences": int(kept_total.sum() // block), "tokens": int(kept_total.sum()),
            "tokens_dropped": int(lengths.sum() - kept_total.sum()), "documents_split": int(split.sum()),
            "documents_split_that_fit": int((split & (lengths <= block)).sum()),
            "documents_cut_short": int(((b - a).clip(min=0) < lengths).sum()),
            "batch_firsts": firsts, "kept_total": kept_total}


def run_peer(spec: Spec, run_dir: Path) -> Prepared:
    import datasets
    import numpy as np
    import pyarrow as pa

    datasets.disable_progress_bars()
    lengths = np.fromfile(spec["lengths"], np.int64)
    tokens = np.fromfile(spec["tokens_file"], np.uint16)
    group_texts = make_group_texts(SEQ_LEN)

    def dataset(keep: Any) -> tuple[Any, Any, Any]:
        """run_clm's tokenized dataset (input_ids int32, attention_mask int8) of the documents `keep`."""
        ids = tokens[np.repeat(keep, lengths)]
        offsets = pa.array(np.concatenate(([0], np.cumsum(lengths[keep]))).astype(np.int32))
        table = pa.table({"input_ids": pa.ListArray.from_arrays(offsets, pa.array(ids.astype(np.int32))),
                          "attention_mask": pa.ListArray.from_arrays(offsets, pa.array(np.ones(ids.size, np.int8)))})
        return datasets.Dataset(table), ids, lengths[keep]

    inputs = {"split": dataset(np.ones(lengths.size, bool)), "filter": dataset(lengths <= SEQ_LEN)}

    def work() -> dict[str, Any]:
        out = {}
        for mode, (ds, _, _) in inputs.items():
            t0, c0 = time.perf_counter(), time.process_time()
            grouped = ds.map(group_texts, batched=True, batch_size=PEER_BATCH, load_from_cache_file=False,
                             cache_file_name=str(run_dir / f"grouped-{mode}.arrow"))
            out[mode] = (grouped, time.perf_counter() - t0, time.process_time() - c0)
        return out

    def finish(out: dict[str, Any]) -> dict[str, Any]:
        runs = {}
        for mode, (grouped, seconds, cpu) in out.items():
            _, ids, lens = inputs[mode]
            layout = group_texts_layout(lens, SEQ_LEN, PEER_BATCH)
            _check_peer_output(grouped, ids, lens, layout)
            runs[f"{PEER}/{mode}"] = {
                "seconds": seconds, "cpu_seconds": cpu, "efficiency": 1.0 if layout["sequences"] else 0.0,
                "docs": int(lens.size), **{k: v for k, v in layout.items() if not k.startswith(("batch", "kept"))}}
        return {"docs": int(lengths.size), "input_tokens": int(lengths.sum()), "runs": runs}

    return Prepared(work, finish)


def _check_peer_output(grouped: Any, ids: Any, lengths: Any, layout: dict[str, Any]) -> None:
    """The peer's blocks are the batches' kept prefixes of the token stream, in order, 2048 each."""
    import numpy as np

    if len(grouped) != layout["sequences"]:
        raise BenchmarkError(f"group_texts made {len(grouped):,} blocks, the layout says {layout['sequences']:,}")
    n_batches = layout["kept_total"].size
    totals = np.add.reduceat(lengths, layout["batch_firsts"]) if lengths.size else np.zeros(0, np.int64)
    runs = np.stack([layout["kept_total"], totals - layout["kept_total"]], axis=1).ravel()
    want = ids[np.repeat(np.tile([True, False], n_batches), runs)]  # each batch's kept prefix, in order
    pos = 0
    for chunk in grouped.data.column("input_ids").chunks:  # chunk by chunk: the whole output is ~0.8 GB
        got = chunk.values.to_numpy(zero_copy_only=False)
        if not np.array_equal(got, want[pos : pos + got.size]):
            raise BenchmarkError(f"group_texts output differs from the batches' kept token prefixes near token "
                                 f"{pos:,}: the layout figures would not describe it")
        pos += got.size
    if pos != want.size:
        raise BenchmarkError(f"group_texts output has {pos:,} tokens, the layout says {want.size:,}")


# -- comparison ----------------------------------------------------------------------------------------
def check(ours: Record, peer: Record) -> None:
    for k in ("docs", "input_tokens"):
        if ours[k] != peer[k]:
            raise BenchmarkError(f"{k} differ: ours {ours[k]:,}, peer {peer[k]:,}")


def _run(r: Record, strategy: str, mode: str) -> dict[str, Any]:
    return r["runs"][f"{PEER}/{mode}" if r["side"] == "peer" else f"{strategy}/{mode}"]


def _docs_per_cpu_second(r: Record, strategy: str) -> float:
    run = r["runs"][f"{PEER}/split" if r["side"] == "peer" else f"{strategy}/scaled"]
    return run["docs"] / max(run["cpu_seconds"], 1e-9)


def _metrics() -> tuple[Metric, ...]:
    bfd = STRATEGIES[0]
    out = [Metric(f"efficiency, {s}", "%", True, lambda r, sp, s=s: 100 * _run(r, s, "split")["efficiency"],
                  "{:.3f}") for s in STRATEGIES]
    out += [Metric(f"efficiency, {s}, overlong=filter", "%", True,
                   lambda r, sp, s=s: 100 * _run(r, s, "filter")["efficiency"], "{:.3f}") for s in STRATEGIES]
    out += [
        Metric("sequences, best_fit_decreasing", "", None, lambda r, sp: _run(r, bfd, "split")["sequences"],
               "{:,.0f}"),
        Metric("tokens in sequences", "", None, lambda r, sp: _run(r, bfd, "split")["tokens"], "{:,.0f}"),
        Metric("tokens lost", "", False, lambda r, sp: _run(r, bfd, "split")["tokens_dropped"], "{:,.0f}"),
        Metric("documents split", "%", False,
               lambda r, sp: 100 * _run(r, bfd, "split")["documents_split"] / r["docs"], "{:.2f}"),
        Metric("documents <= 2048 tokens split", "", None,
               lambda r, sp: _run(r, bfd, "split")["documents_split_that_fit"], "{:,.0f}"),
        Metric("documents split, overlong=filter", "", None,
               lambda r, sp: _run(r, bfd, "filter")["documents_split"], "{:,.0f}"),
    ]
    out += [Metric(f"time on the corpus, {s}", "s", None, lambda r, sp, s=s: _run(r, s, "split")["seconds"],
                   "{:,.3f}") for s in STRATEGIES]
    out += [Metric(f"docs per CPU-second, {s} (ours: the >= 1M-document set)", "docs/CPU s", None,
                   lambda r, sp, s=s: _docs_per_cpu_second(r, s), "{:,.0f}") for s in STRATEGIES]
    out += [Metric("documents", "", None, lambda r, sp: r["docs"], "{:,.0f}", must_match=True),
            Metric("input tokens", "", None, lambda r, sp: r["input_tokens"], "{:,.0f}", must_match=True)]
    return tuple(out)


BENCHMARK = Benchmark(
    name="packing_efficiency",
    description=f"packing documents into {SEQ_LEN}-token sequences: non-padding fraction, documents split, time",
    ours_label="platform_assets.packing.strategies.pack(lengths, 2048, strategy, overlong) for every strategy "
               "(layout from lengths; verify_packing untimed)",
    peer_label="transformers run_clm.py group_texts via datasets.Dataset.map(batched=True, batch_size=1000), "
               "block_size 2048, on input_ids + attention_mask (concatenate and chunk, remainder dropped)",
    prepare=prepare,
    ours=run_ours,
    peer=run_peer,
    metrics=_metrics(),
    packages=("platform-assets", "numpy", "tokenizers", "datasets", "pyarrow"),
    check=check,
    targets=(
        Target("efficiency, best_fit_decreasing", "best-fit decreasing >= 99.5% non-padding", min_ours=99.5),
        Target("efficiency, best_fit_decreasing, overlong=filter",
               "best-fit decreasing >= 99.5% with only the documents that fit", min_ours=99.5),
        Target("efficiency, streaming_best_fit", "streaming best-fit >= 99% non-padding", min_ours=99.0),
        Target("efficiency, streaming_best_fit, overlong=filter",
               "streaming best-fit >= 99% with only the documents that fit", min_ours=99.0),
        Target("docs per CPU-second, best_fit_decreasing (ours: the >= 1M-document set)",
               "best-fit decreasing: 1 M documents in a few (<= 5) CPU-seconds", min_ours=200_000),
        Target("docs per CPU-second, streaming_best_fit (ours: the >= 1M-document set)",
               "streaming best-fit: 1 M documents in a few (<= 5) CPU-seconds", min_ours=200_000),
    ),
    env={"HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "HF_HOME": "{run_dir}/hf_home",
         "HF_DATASETS_DISABLE_PROGRESS_BARS": "1"},
    describe=describe,
)
