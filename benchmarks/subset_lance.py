"""Streaming subset -> tokenize -> Lance from a remote corpus, at three input sizes: ours vs the seed's recipe.

The real corpus (`../shared/data/build_corpus.sh`: JSONL of prose and code) is served "as if remote" by a
local S3 server (moto on 127.0.0.1, started by each side before its timing, objects public-read). The
subset is the Python code (`source = 'python'`: about a third of the code files' rows), no row budget: the
whole input is streamed, the rejected rows are never stored. Three input sizes (SUBSET_LANCE_PATTERNS,
default `code_000.jsonl`, `*_000.jsonl`, `*.jsonl`: 1, 2 and all 6 files of the corpus, ~105 / 210 /
524 MB), each run in a fresh subprocess so each size has its own peak RSS.

- ours: the platform's own stage functions: `ingest_source` with `subset: {where: "source = 'python'",
  columns: [text, source]}` reading the objects through pyarrow's S3 filesystem, the documents given the
  one split `train` (the pass dataset_splits would make; a Parquet rewrite of the subset), the tokenizer
  stage loading GPT-2's tokenizer.json (`source: pretrained`), and tokenized_documents with `lance: true`
  (Lance datasets written batch by batch, beside its Parquet parts: ours writes both);
- peer (the seed's recipe): `datasets.load_dataset("json", data_files=<the objects' URLs>, streaming=True)`
  (its fields declared as strings) `.filter(source == "python")`, one `tokenizer(text)` call per sample
  (`PreTrainedTokenizerFast` of the same tokenizer.json, EOS appended as ours does), rows batched by 1,024
  into `lance.write_dataset` from a RecordBatchReader (bounded: the recipe at its best; collecting all rows
  first would grow with the input).
  datasets reads the objects over plain HTTP from the same server (s3fs is not installed here).

Figures per size: wall seconds, CPU seconds, peak RSS (the subprocess's ru_maxrss), input MB/s, documents
and tokens written (the sides must agree on the documents; tokens may differ by ingest's text
normalisation, reported). Targets (#14): ours under 3 GB peak RSS at every size and flat (largest / smallest
<= 1.1).
"""

from __future__ import annotations

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
)

PATTERNS_DEFAULT = ("code_000.jsonl", "*_000.jsonl", "*.jsonl")
WHERE = "source = 'python'"
BUCKET = "corpus"
LANCE_ROWS = 1024
CORPUS_FIELDS = ("id", "kind", "source", "path", "lang", "sha256", "text")  # build_corpus.sh's JSONL rows
ENV = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "HF_DATASETS_CACHE": "{run_dir}/hf-cache",
       "AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench", "AWS_DEFAULT_REGION": "us-east-1"}


def _patterns() -> tuple[str, ...]:
    raw = os.environ.get("SUBSET_LANCE_PATTERNS")
    return tuple(p for p in raw.split(",") if p) if raw else PATTERNS_DEFAULT


def prepare(corpus: Path, run_dir: Path) -> Spec:
    tokenizer = Path(os.environ.get("SUBSET_LANCE_TOKENIZER", GPT2_TOKENIZER_JSON))
    if not tokenizer.is_file():
        raise BenchmarkError(f"tokenizer {tokenizer} not found (set SUBSET_LANCE_TOKENIZER to a tokenizer.json)")
    patterns = _patterns()
    if len(patterns) != SIZES:
        raise BenchmarkError(f"SUBSET_LANCE_PATTERNS names {len(patterns)} sizes, expected {SIZES}")
    sizes = []
    for pattern in patterns:
        files = sorted(corpus.glob(pattern))
        if not files:
            raise BenchmarkError(f"no files match {pattern!r} in {corpus}")
        sizes.append({"pattern": pattern, "files": [f.name for f in files],
                      "bytes": sum(f.stat().st_size for f in files)})
    return {"corpus": str(corpus), "tokenizer": str(tokenizer), "sizes": sizes,
            "all_files": sorted({f for s in sizes for f in s["files"]})}


def describe(spec: Spec) -> str:
    return ("real corpus served by a local S3 server (moto), subset `source = 'python'`, three sizes: "
            + ", ".join(f"size {k + 1} = {s['pattern']} ({len(s['files'])} files, {s['bytes'] / MB:,.0f} MB)"
                        for k, s in enumerate(spec["sizes"])))


# -- the server: each side starts its own, before its timing -------------------------------------------
class _Server:
    def __init__(self, spec: Spec) -> None:
        import boto3

        sys.path.insert(0, str(REPO_ROOT / "tests"))
        from moto_server import free_port

        self.port = free_port()
        self.proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.endpoint = f"http://127.0.0.1:{self.port}"
        client = boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1")
        deadline = time.time() + 60
        while True:
            try:
                client.create_bucket(Bucket=BUCKET)
                break
            except Exception:  # noqa: BLE001 -- not accepting connections yet
                if time.time() > deadline:
                    self.stop()
                    raise BenchmarkError("the moto S3 server did not start") from None
                time.sleep(0.3)
        for name in spec["all_files"]:
            client.upload_file(str(Path(spec["corpus"]) / name), BUCKET, f"corpus/{name}",
                               ExtraArgs={"ACL": "public-read"})

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)


def _run_sizes(spec: Spec, run_dir: Path, code: str, server: _Server) -> dict[str, Any]:
    """Each size in a fresh subprocess running `code` (argv: size JSON, endpoint, out dir, tokenizer)."""
    runs = {}
    for k, size in enumerate(spec["sizes"]):
        out = run_dir / f"size{k}"
        proc = subprocess.run([sys.executable, "-c", code, json.dumps(size), server.endpoint, str(out),
                               spec["tokenizer"]], cwd=REPO_ROOT, capture_output=True, text=True)
        if proc.returncode != 0:
            raise BenchmarkError(f"size {size['pattern']}: the run failed:\n{proc.stderr[-3000:]}")
        runs[size["pattern"]] = {**json.loads(proc.stdout.strip().splitlines()[-1]), "input_bytes": size["bytes"]}
    return {"sizes": runs}


_MEASURE = """
import json, resource, sys, time
t0, c0 = time.perf_counter(), time.process_time()
result = run(json.loads(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4])
print(json.dumps({**result, "seconds": time.perf_counter() - t0, "cpu_s": time.process_time() - c0,
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e6}))
"""


def ours_run(size: dict, endpoint: str, out: str, tokenizer: str) -> dict[str, Any]:
    import lance
    import pyarrow as pa
    import pyarrow.compute as pc

    from platform_assets.config import parse_config
    from platform_assets.ingest.run import ingest_source
    from platform_assets.parquet_parts import TableSink, TableSource
    from platform_assets.storage import Storage
    from platform_assets.tokenize.lance_documents import set_dir
    from platform_assets.tokenize.settings import TokenizerSettings, TokenizeSettings
    from platform_assets.tokenize.stage import build_tokenizer, tokenize_outputs

    cfg = parse_config({"storage": {"root": out, "s3": {"endpoint_url": endpoint}},
                        "sources": [{"name": "code", "format": "jsonl", "path": f"s3://{BUCKET}/corpus",
                                     "pattern": size["pattern"],
                                     "subset": {"where": WHERE, "columns": ["text", "source"]}}]}, Path(out))
    storage = Storage(cfg.storage_root)
    ingest_source(cfg, "code", Storage(cfg.storage_root, cfg.s3_settings()), "raw_documents/code")
    # the one split, as dataset_splits would assign it (streamed: one batch at a time)
    source = TableSource(storage, "raw_documents/code", cfg.io)
    with TableSink(storage, "dataset_splits", source.schema.append(pa.field("split", pa.string())), cfg.io) as sink:
        for batch in source.batches():
            sink.write(batch.append_column("split", pa.array(["train"] * batch.num_rows, pa.string())))
    build_tokenizer(storage, "dataset_splits", "tokenizer", TokenizerSettings(source="pretrained", path=tokenizer))
    result = tokenize_outputs(storage, "dataset_splits", "tokenizer", "tokenized_documents",
                              TokenizeSettings(lance=True), cfg.io)
    ds = lance.dataset(f"{out}/tokenized_documents/{set_dir('train', 'code')}")
    tokens = pc.sum(ds.to_table(columns=["num_tokens"])["num_tokens"]).as_py()
    return {"documents": ds.count_rows(), "tokens": tokens, "parquet_tokens": result.tokens}


def peer_run(size: dict, endpoint: str, out: str, tokenizer: str) -> dict[str, Any]:
    import datasets
    import lance
    import pyarrow as pa
    from transformers import PreTrainedTokenizerFast

    tok = PreTrainedTokenizerFast(tokenizer_file=tokenizer)
    eos = tok.convert_tokens_to_ids("<|endoftext|>")
    urls = [f"{endpoint}/{BUCKET}/corpus/{name}" for name in size["files"]]
    # the corpus's fields, declared: inferred from the first file, `lang` (null in every code row) would be
    # typed null and the first prose row would fail the cast
    features = datasets.Features({name: datasets.Value("string") for name in CORPUS_FIELDS})
    ds = datasets.load_dataset("json", data_files=urls, streaming=True, split="train", features=features)
    ds = ds.filter(lambda row: row["source"] == "python")
    schema = pa.schema([("id", pa.string()), ("input_ids", pa.list_(pa.int32())), ("num_tokens", pa.int32())])
    counts = {"documents": 0, "tokens": 0}

    def batches():
        rows: list[dict] = []
        for row in ds:
            ids = tok(row["text"])["input_ids"] + [eos]
            rows.append({"id": row["id"], "input_ids": ids, "num_tokens": len(ids)})
            counts["documents"] += 1
            counts["tokens"] += len(ids)
            if len(rows) == LANCE_ROWS:
                yield pa.RecordBatch.from_pylist(rows, schema=schema)
                rows = []
        if rows:
            yield pa.RecordBatch.from_pylist(rows, schema=schema)

    lance.write_dataset(pa.RecordBatchReader.from_batches(schema, batches()), f"{out}/peer.lance")
    return counts


def _side(run_name: str):
    def side(spec: Spec, run_dir: Path) -> Prepared:
        server = _Server(spec)  # untimed: the upload is the "remote" corpus being there
        code = f"from benchmarks.subset_lance import {run_name} as run\n{_MEASURE}"

        def work() -> dict[str, Any]:
            try:
                return _run_sizes(spec, run_dir, code, server)
            finally:
                server.stop()  # also when a size fails: the server must not outlive the side

        return Prepared(work)

    return side


run_ours = _side("ours_run")
run_peer = _side("peer_run")


# -- figures -------------------------------------------------------------------------------------------
def _size_figure(k: int, key: str):
    def value(r: Record, s: Spec) -> float:
        return r["sizes"][s["sizes"][k]["pattern"]][key]
    return value


def _mb_per_s(k: int):
    def value(r: Record, s: Spec) -> float:
        run = r["sizes"][s["sizes"][k]["pattern"]]
        return run["input_bytes"] / MB / run["seconds"]
    return value


def _rss_growth(r: Record, s: Spec) -> float:
    rss = [run["peak_rss_mb"] for run in r["sizes"].values()]
    return max(rss) / min(rss)


SIZES = 3


def _metrics() -> tuple[Metric, ...]:
    out: list[Metric] = []
    for k in range(SIZES):
        label = f"size {k + 1}"
        out += [Metric(f"input MB/s, {label}", "MB/s", True, _mb_per_s(k), "{:,.2f}"),
                Metric(f"peak RSS, {label}", "MB", False, _size_figure(k, "peak_rss_mb"), "{:,.0f}"),
                Metric(f"CPU s, {label}", "s", False, _size_figure(k, "cpu_s"), "{:,.1f}"),
                Metric(f"documents, {label}", "", None, _size_figure(k, "documents"), "{:,.0f}", must_match=True),
                Metric(f"tokens, {label}", "", None, _size_figure(k, "tokens"), "{:,.0f}")]
    out.append(Metric("peak RSS largest / smallest size", "x", False, _rss_growth, "{:,.2f}"))
    return tuple(out)


def check(ours: Record, peer: Record) -> None:
    for pattern, run in ours["sizes"].items():
        if run["documents"] != peer["sizes"][pattern]["documents"]:
            raise BenchmarkError(f"{pattern}: ours wrote {run['documents']} documents, the peer "
                                 f"{peer['sizes'][pattern]['documents']}")


def _bench() -> Benchmark:
    return Benchmark(
        name="subset_lance",
        description="streaming subset (source = 'python') -> GPT-2 tokens -> Lance, from a local S3 server, "
                    "three input sizes",
        ours_label="platform: ingest subset (pyarrow S3) -> split -> tokenizer (pretrained) -> tokenized_documents "
                   "(lance: true)",
        peer_label="datasets streaming (HTTP) .filter -> tokenizer() per sample -> lance.write_dataset(reader)",
        prepare=prepare, ours=run_ours, peer=run_peer, metrics=_metrics(),
        packages=("pyarrow", "pylance", "datasets", "tokenizers", "transformers", "moto"),
        check=check,
        targets=(Target(f"peak RSS, size {SIZES}", "ours under 3 GB at the largest size", max_ours=3000),
                 Target("peak RSS largest / smallest size", "ours flat across the sizes (within 10%)",
                        max_ours=1.1)),
        env=ENV, describe=describe,
    )


BENCHMARK = _bench()
