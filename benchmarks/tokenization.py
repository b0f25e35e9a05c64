"""Tokenizing real text with GPT-2's tokenizer: our encoder over Arrow record batches vs tokenizers'
`Tokenizer.encode_batch`.

Input: documents of the corpus's `*.jsonl` files (prose in ~26 languages and source code), an even
stride over all their lines (every k-th line, k chosen from the line sizes so that ~TOKENIZE_BENCH_MB
MB of JSON are taken, default 50): every file and language is represented, the same documents on
every run.

- ours: `platform_assets.tokenize.encode.DocumentEncoder` with the tokenize stage's defaults
  (GPT-2's tokenizer.json as `tokenizer: {source: pretrained}` makes it: EOS appended, no BOS, no
  length limit) over record batches of 8,192 documents (id, source, split, text, meta), as the
  stage reads them. Timed: everything from the input record batch to the output record batches
  (`input_ids` list<int32>, `loss_mask`, counts), one per slice as the stage writes them
  (`encode_parts`): 1 MiB slices, one call of the document encoder each (GPT-2 qualifies for
  tiktoken, `tokenize.encoder: auto`, tokenize/tiktoken_bpe.py: the same ids as tokenizers, which
  `check`'s token counts confirm), ids to one int32 array, EOS placed, Arrow arrays built. As in
  the stage, inside `serial_tokenizers`: one slice in flight per core (or TOKENIZE_BENCH_THREADS),
  each encoded on its own thread, tokenizers' pool unused.
- peer: `tokenizers.Tokenizer.encode_batch(texts, add_special_tokens=False)` on the same texts
  (Python strings, made untimed), 1,000 per call (`datasets.map(batched=True)`'s default batch),
  the same GPT-2 tokenizer. The peer stops at Encoding objects; taking `.ids` out of them, which
  any consumer must, is not timed for it, so the comparison leans towards the peer.

Both tokenizers encode special-token strings as text (`encode_special_tokens = True`, ours by
design), so both produce the same tokens: `check` requires equal token counts (ours less one EOS
per document). Both children use one thread per core (or TOKENIZE_BENCH_THREADS threads): the peer
tokenizers' Rayon pool (TOKENIZERS_PARALLELISM=true), ours its encoder's threads.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from benchmarks.harness import (
    GPT2_TOKENIZER_JSON,
    MB,
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

PATTERN = "*.jsonl"
MB_DEFAULT = 50
TOKENIZER_JSON = Path(os.environ.get("TOKENIZE_BENCH_TOKENIZER", GPT2_TOKENIZER_JSON))
RECORD_BATCH_ROWS = 8192  # io.batch_rows: what the stage reads per batch
PEER_BATCH = 1000  # datasets.map(batched=True) default batch_size
_THREADS = os.environ.get("TOKENIZE_BENCH_THREADS")
ENV = {"TOKENIZERS_PARALLELISM": "true", "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
       **({"RAYON_NUM_THREADS": _THREADS} if _THREADS else {})}


# -- input -----------------------------------------------------------------------------------------
def corpus_files(corpus: Path) -> list[Path]:
    return [corpus] if corpus.is_file() else sorted(corpus.glob(PATTERN))


def prepare(corpus: Path, run_dir: Path) -> Spec:
    files = corpus_files(corpus)
    if not files:
        raise BenchmarkError(f"no {PATTERN} files in {corpus}")
    if not TOKENIZER_JSON.is_file():
        raise BenchmarkError(f"no tokenizer at {TOKENIZER_JSON} (set TOKENIZE_BENCH_TOKENIZER)")
    want = float(os.environ.get("TOKENIZE_BENCH_MB", MB_DEFAULT)) * MB
    total = sum(f.stat().st_size for f in files)
    stride = max(1, int(total // want))  # every stride-th non-empty line of all files, in file order
    out = run_dir / "documents.jsonl"
    docs = text_bytes = lines = 0
    per_kind: dict[str, int] = {}
    with open(out, "w", encoding="utf-8") as sink:
        for path in files:
            with open(path, encoding="utf-8") as f:
                for line in f:
                    if not line.strip():
                        continue
                    lines += 1
                    if (lines - 1) % stride:
                        continue
                    text = json.loads(line)["text"]
                    sink.write(json.dumps(text) + "\n")
                    size = len(text.encode("utf-8"))
                    docs += 1
                    text_bytes += size
                    kind = path.name.split("_")[0]
                    per_kind[kind] = per_kind.get(kind, 0) + size
    if docs == 0:
        raise BenchmarkError(f"no documents in {corpus}")
    return {"corpus": str(corpus), "files": [str(f) for f in files], "documents": str(out), "docs": docs,
            "input_bytes": text_bytes, "bytes_per_kind": per_kind, "stride": stride, "lines": lines,
            "tokenizer": str(TOKENIZER_JSON)}


def describe(spec: Spec) -> str:
    kinds = ", ".join(f"{k} {v / MB:,.1f} MB" for k, v in sorted(spec["bytes_per_kind"].items()))
    return (f"{spec['docs']:,} documents, {spec['input_bytes'] / MB:,.1f} MB of UTF-8 text ({kinds}): every "
            f"{spec['stride']}th of {spec['lines']:,} lines in {len(spec['files'])} files")


def _texts(spec: Spec) -> list[str]:
    with open(spec["documents"], encoding="utf-8") as f:
        return [json.loads(line) for line in f]


# -- ours ------------------------------------------------------------------------------------------
def run_ours(spec: Spec, run_dir: Path) -> Prepared:
    import pyarrow as pa

    from platform_assets.tokenize.encode import DocumentEncoder
    from platform_assets.tokenize.settings import TokenizerSettings, TokenizeSettings
    from platform_assets.tokenize.tokenizer_build import load_pretrained, make_artifact
    from platform_assets.tokenize.tokenizer_runtime import serial_tokenizers

    settings = TokenizerSettings(source="pretrained", path=spec["tokenizer"])
    tokenizer, declared = load_pretrained(spec["tokenizer"])
    encoder = DocumentEncoder(make_artifact(tokenizer, settings, declared), TokenizeSettings(),
                              threads=int(_THREADS) if _THREADS else None)
    texts = _texts(spec)
    batches = []
    for a in range(0, len(texts), RECORD_BATCH_ROWS):
        chunk = texts[a:a + RECORD_BATCH_ROWS]
        batches.append(pa.RecordBatch.from_pydict({
            "id": [f"d{i}" for i in range(a, a + len(chunk))],
            "source": ["bench"] * len(chunk),
            "split": ["train"] * len(chunk),
            "text": pa.array(chunk, pa.large_string()),
            "meta": pa.nulls(len(chunk), pa.string()),
        }))
    del texts, chunk  # the peer keeps its list of strings; ours starts from the record batches alone
    encoder.encode(batches[0].slice(0, 8))  # first-call costs (thread pool start), untimed

    def work():
        rows = tokens = out_bytes = 0
        with serial_tokenizers():  # as tokenize.stage.tokenize_outputs runs it
            for b in batches:
                for out in encoder.encode_parts(b):  # as the stage takes them: a slice's rows at a time
                    rows += out.batch.num_rows
                    tokens += out.stats.tokens
                    out_bytes += out.batch.nbytes
        return rows, tokens, out_bytes

    def finish(result) -> dict[str, Any]:
        rows, tokens, out_bytes = result
        return {"docs_out": rows, "tokens": tokens - rows, "tokens_with_eos": tokens, "output_arrow_bytes": out_bytes}

    return Prepared(work, finish)


# -- peer ------------------------------------------------------------------------------------------
def run_peer(spec: Spec, run_dir: Path) -> Prepared:
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(spec["tokenizer"])
    tokenizer.encode_special_tokens = True  # as ours: "<|endoftext|>" in a document is text
    texts = _texts(spec)
    tokenizer.encode_batch(texts[:8], add_special_tokens=False)  # first-call costs, untimed

    def work():
        docs = tokens = 0
        for a in range(0, len(texts), PEER_BATCH):
            encodings = tokenizer.encode_batch(texts[a:a + PEER_BATCH], add_special_tokens=False)
            docs += len(encodings)
            tokens += sum(map(len, encodings))
        return docs, tokens

    def finish(result) -> dict[str, Any]:
        docs, tokens = result
        return {"docs_out": docs, "tokens": tokens}

    return Prepared(work, finish)


# -- comparison ------------------------------------------------------------------------------------
def check(ours: Record, peer: Record) -> None:
    if ours["docs_out"] != peer["docs_out"] or ours["tokens"] != peer["tokens"]:
        raise BenchmarkError(f"outputs differ: ours {ours['docs_out']:,} documents / {ours['tokens']:,} tokens "
                             f"(EOS excluded), peer {peer['docs_out']:,} / {peer['tokens']:,}")


BENCHMARK = Benchmark(
    name="tokenization",
    description="GPT-2 tokenization of real documents, text in, token ids out",
    ours_label="platform_assets.tokenize.encode.DocumentEncoder.encode_parts over 8,192-document Arrow record "
               "batches (stage defaults: EOS appended), an output record batch built per 1 MiB slice",
    peer_label="tokenizers.Tokenizer.encode_batch(texts, add_special_tokens=False), 1,000 texts per call, "
               "Encoding objects (ids not extracted)",
    prepare=prepare,
    ours=run_ours,
    peer=run_peer,
    metrics=(
        Metric("tokens/s", "M tokens/s", True, lambda r, s: r["tokens"] / 1e6 / r["seconds"], "{:,.3f}"),
        Metric("throughput", "MB/s", True, lambda r, s: s["input_bytes"] / MB / r["seconds"], "{:,.2f}"),
        Metric("wall time", "s", False, lambda r, s: r["seconds"], "{:,.2f}"),
        cpu_seconds_metric(),
        Metric("cores used", "CPU s / wall s", None, lambda r, s: r["cpu_seconds"] / r["seconds"], "{:.2f}"),
        peak_rss_metric(),
        Metric("tokens (EOS excluded)", "", None, lambda r, s: r["tokens"], "{:,.0f}", must_match=True),
        Metric("bytes per token", "", None, lambda r, s: s["input_bytes"] / r["tokens"], "{:.3f}"),
    ),
    packages=("platform-assets", "tokenizers", "pyarrow", "numpy"),
    check=check,
    targets=(Target("tokens/s", "tokens/s at least 90% of encode_batch's", min_ratio=0.9),),
    env=ENV,
    describe=describe,
)
