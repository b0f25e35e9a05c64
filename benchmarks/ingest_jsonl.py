"""JSONL -> Parquet: our ingest vs `datasets.load_dataset("json")` + `Dataset.to_parquet`.

Both sides read the same files and write Parquet into a fresh directory:

- ours: `platform_assets.ingest.run.ingest_source` for a `jsonl` source over the corpus (config built
  in code, storage root in the run directory). That is the whole asset body: line-block parsing,
  quarantine checks, document ids, zstd Parquet parts, the sha256 manifest and the atomic commit.
- peer: `load_dataset("json", data_files=[...], split="train", cache_dir=<fresh>)` (JSON -> Arrow
  cache files), then `.to_parquet(out)` (snappy, datasets' default).

Input MB = the sum of the JSONL file sizes (10^6 bytes). Rows out are counted from the written
Parquet footers of each side and must be equal, or the run fails.

The peer gets an explicit `features=` schema, inferred from the first lines of each file in its
(untimed) setup: without it `datasets` infers a schema per file and fails when a field is null in
one file and a string in another (`lang` in the shared corpus: "Couldn't cast array of type string
to null"). Ours needs no schema: only the text field is typed, the rest goes to `meta` as JSON.
"""

from __future__ import annotations

import fnmatch
import json
import os
from pathlib import Path
from typing import Any

from benchmarks.harness import (
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
SOURCE_NAME = "bench"
OUT_REL = f"raw_documents/{SOURCE_NAME}"
SCHEMA_SAMPLE_LINES = 2000  # per file, for the peer's `features=`
_READ_CHUNK = 8 * 2**20


def corpus_files(corpus: Path) -> list[Path]:
    """The files our jsonl source reads for `corpus` with pattern `*.jsonl`: the file itself, or every
    matching file under the directory, recursively, hidden files and folders skipped, sorted by path
    (the same selection as `platform_assets.storage.list_files`)."""
    if corpus.is_file():
        return [corpus]
    out = []
    for dirpath, dirnames, filenames in os.walk(corpus):
        dirnames[:] = [d for d in dirnames if not d.startswith(".")]
        out += [Path(dirpath) / f for f in filenames if not f.startswith(".") and fnmatch.fnmatch(f, PATTERN)]
    return sorted(out, key=str)


def prepare(corpus: Path, run_dir: Path) -> Spec:
    files = corpus_files(corpus)
    if not files:
        raise BenchmarkError(f"no {PATTERN} files in {corpus}")
    lines = 0
    for f in files:  # counting lines also reads every file once: both sides start with a warm page cache
        with open(f, "rb") as fh:
            last = b""
            while chunk := fh.read(_READ_CHUNK):
                lines += chunk.count(b"\n")
                last = chunk
            lines += bool(last) and not last.endswith(b"\n")
    return {
        "corpus": str(corpus),
        "source_path": str(corpus),
        "files": [str(f) for f in files],
        "input_bytes": sum(f.stat().st_size for f in files),
        "lines": lines,
    }


def describe(spec: Spec) -> str:
    return f"{len(spec['files'])} files, {spec['input_bytes'] / MB:,.1f} MB, {spec['lines']:,} lines"


# -- ours ------------------------------------------------------------------------------------------
def run_ours(spec: Spec, run_dir: Path) -> Prepared:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from platform_assets.config import JsonlSource, PipelineConfig, StorageConfig
    from platform_assets.ingest.run import ingest_source
    from platform_assets.storage import Storage

    cfg = PipelineConfig(
        storage=StorageConfig(root=str(run_dir / "store")),
        sources=[JsonlSource(name=SOURCE_NAME, format="jsonl", path=spec["source_path"], pattern=PATTERN)],
    )
    storage = Storage(cfg.storage_root)
    # pyarrow imports pandas lazily, on the first pa.array() of a Python list (0.2-0.5 s here). It is
    # an import, so it happens here, untimed; the peer's `import datasets` imports pandas up front.
    pa.array(["x"])

    def work():
        return ingest_source(cfg, SOURCE_NAME, storage, OUT_REL)

    def finish(result) -> dict[str, Any]:
        if result.input_files != len(spec["files"]):
            raise BenchmarkError(
                f"ours read {result.input_files} files, the benchmark selected {len(spec['files'])}")
        out = Path(storage.path(OUT_REL))
        parts = [out / p for p in result.parts]
        return {
            "rows_out": sum(pq.ParquetFile(p).metadata.num_rows for p in parts),
            "rows_reported": result.rows,
            "quarantined": result.quarantine_counts,
            "output_bytes": sum(p.stat().st_size for p in parts),
        }

    return Prepared(work, finish)


# -- peer ------------------------------------------------------------------------------------------
def _value_type(values: set[type]) -> str | None:
    values.discard(type(None))
    if not values:
        return "string"  # only nulls in the sample
    if values == {str}:
        return "string"
    if values == {bool}:
        return "bool"
    if values <= {int, float} and bool not in values:
        return "float64" if float in values else "int64"
    return None  # nested or mixed: no flat schema


def infer_features(files: list[str], sample_lines: int = SCHEMA_SAMPLE_LINES) -> dict[str, str] | None:
    """{field: datasets Value dtype} from the first lines of every file, or None when a field is
    nested or mixed (then `datasets` infers the schema itself)."""
    seen: dict[str, set[type]] = {}
    for path in files:
        with open(path, "rb") as f:
            for i, line in enumerate(f):
                if i >= sample_lines:
                    break
                try:
                    obj = json.loads(line)
                except ValueError:
                    continue  # a bad line is the peer's own problem when it reads the file
                if isinstance(obj, dict):
                    for k, v in obj.items():
                        seen.setdefault(k, set()).add(type(v))
    types = {k: _value_type(v) for k, v in seen.items()}
    return None if any(t is None for t in types.values()) else types


def run_peer(spec: Spec, run_dir: Path) -> Prepared:
    import datasets
    import pyarrow.parquet as pq

    schema = infer_features(spec["files"])
    features = datasets.Features({k: datasets.Value(t) for k, t in schema.items()}) if schema else None
    cache_dir = run_dir / "hf_cache"  # fresh per run: nothing is served from an earlier run's cache
    out = run_dir / "peer.parquet"

    def work():
        ds = datasets.load_dataset("json", data_files=spec["files"], split="train", cache_dir=str(cache_dir),
                                   features=features)
        ds.to_parquet(str(out))
        return ds.num_rows

    def finish(num_rows) -> dict[str, Any]:
        return {
            "rows_out": pq.ParquetFile(out).metadata.num_rows,
            "rows_reported": num_rows,
            "output_bytes": out.stat().st_size,
            "features_given": schema is not None,
        }

    return Prepared(work, finish)


def check(ours: Record, peer: Record) -> None:
    if ours["rows_out"] != peer["rows_out"]:
        raise BenchmarkError(
            f"rows out differ: ours {ours['rows_out']:,}, peer {peer['rows_out']:,} "
            f"(ours quarantined: {ours.get('quarantined') or 'nothing'}); the figures are not comparable"
        )


BENCHMARK = Benchmark(
    name="ingest_jsonl",
    description="ingest JSONL files to Parquet",
    ours_label="platform_assets.ingest.run.ingest_source (jsonl source; zstd parts, ids, manifest, "
               "atomic commit)",
    peer_label='datasets.load_dataset("json", data_files=..., split="train", cache_dir=<fresh>) '
               "+ Dataset.to_parquet",
    prepare=prepare,
    ours=run_ours,
    peer=run_peer,
    metrics=(
        Metric("throughput", "MB/s", True, lambda r, s: s["input_bytes"] / MB / r["seconds"]),
        peak_rss_metric(),
        cpu_seconds_metric(),
        Metric("cores used", "CPU s / wall s", None, lambda r, s: r["cpu_seconds"] / r["seconds"], "{:.2f}"),
        Metric("output size", "MB", None, lambda r, s: r["output_bytes"] / MB),
        Metric("rows out", "", None, lambda r, s: r["rows_out"], "{:,.0f}", must_match=True),
    ),
    packages=("platform-assets", "pyarrow", "orjson", "xxhash", "datasets", "huggingface-hub", "fsspec"),
    check=check,
    targets=(
        Target("throughput", "throughput at least 2x the peer's", min_ratio=2.0),
        Target("peak RSS", "peak RSS under 1 GB (1000 MB)", max_ours=1000.0),
    ),
    env={
        "HF_DATASETS_OFFLINE": "1",
        "HF_HUB_OFFLINE": "1",
        "HF_HOME": "{run_dir}/hf_home",  # nothing read from or left in ~/.cache/huggingface
        "HF_DATASETS_DISABLE_PROGRESS_BARS": "1",
        "DAGSTER_DISABLE_TELEMETRY": "1",
    },
    describe=describe,
)
