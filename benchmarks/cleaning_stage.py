"""The whole cleaning step list with the default recipe, per core: the working tree vs the code as of
issue #13's start (the same pipeline, imported from a baseline tree), same documents, same run.

- ours: `platform_assets.cleaning.pipeline.build_pipeline(CleaningSettings()).process_batch` of the
  working tree: guard, images, audio, html, normalize, language, quality (FineWeb's recipe: Gopher
  repetition, Gopher quality, C4 without the terminal-punctuation filter, FineWeb; English only, as
  the presets are scoped), blocklist, pii, every setting at its default;
- peer ("baseline"): the same call on the code of `CLEANING_BENCH_BASELINE` (default
  :data:`BASELINE_COMMIT`, HEAD when the issue was opened), unpacked by `git archive` into the run
  directory, or the tree at `CLEANING_BENCH_BASELINE_TREE` (a directory holding `platform_assets/`).
  The child puts that tree first on `sys.path` before anything imports `platform_assets`, so the two
  sides never share a module (each side is a fresh process anyway).

Input: documents of the corpus's `text_*.jsonl` (prose, ~26 languages) and `code_*.jsonl` (source
files), every k-th line of each group, k chosen so that about `CLEANING_BENCH_MB` MB (default 30) is
taken, `CLEANING_BENCH_CODE_SHARE` (default 1/3) of it code: every source is represented, in
proportion. The child builds record batches of the documents schema from them in its untimed setup
(`io.batch_rows` rows, as the stage cuts them); the timed work is `process_batch` over every batch.
Input MB = the UTF-8 bytes of the texts (10^6 bytes).

Per step, each round records the CPU time of its calls (`step_cpu_seconds`; the table shows the main
steps'), so a run also says where the time went on each side.

Identity: `finish` hashes every output column of the kept documents, the exclusion rows (id, rule,
value, bytes) and the funnel (every step's counts and counters); `check` fails the run if any differs
between the two sides, naming what differs. Issue #17 changed three outputs on purpose after the
baseline, none of them the work a document costs, and both sides' outputs are mapped back before hashing:
Norwegian is labelled `nb` (BCP-47) where py3langid says `no`, Fulfulde `ff` for its `fuv` (RELABELLED,
also in the language exclusions' values); the documents schema v2
added `lang_script` (NEW_COLUMNS, not in the baseline's output); and short texts get lower language
thresholds (`language.min_score_by_words`: 0.25 up to 3 words, 0.3 up to 10), which keeps documents the
baseline drops. Against a baseline without them ours runs with `min_score_by_words: {}` (BASELINE_SEMANTICS:
the baseline's one `min_score` for every length): what that skips is counting each sample's first 10 words.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.harness import (
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

BASELINE_COMMIT = "9e1700c28ffe6f38b73d0e1cce646eff282ef260"  # main when issue #13 was opened
# issue #17: the language step reports some model labels under another tag (language_id.MACROLANGUAGES);
# those whose tag is no model label of its own map back exactly (Bokmål `nb` is py3langid's `no`, `ff`
# its `fuv`, ...). The folds onto a tag the model also has (yue/wuu -> zh, ary/arz -> ar, ltg -> lv,
# sdh -> ku, uzs -> uz) sum the members' probabilities: a sample holding one differs by design.
RELABELLED = {"nb": "no", "ff": "fuv", "gn": "gug", "ki": "kik"}
NEW_COLUMNS = ("lang_script",)  # documents schema v2 (issue #12)
BASELINE_SEMANTICS = {"language": {"min_score_by_words": {}}}
TARGET_MB_DEFAULT = 30.0
CODE_SHARE_DEFAULT = 1 / 3


def _texts(files: list[Path]):
    for f in files:
        with open(f, encoding="utf-8") as fh:
            for line in fh:
                try:
                    obj = json.loads(line)
                except ValueError:
                    obj = None
                text = obj.get("text") if isinstance(obj, dict) else None
                yield obj, (text if isinstance(text, str) and text else None)


def _sample(files: list[Path], target_bytes: float, out, start: int) -> dict[str, Any]:
    """Every k-th document of `files` (k so that about `target_bytes` are taken), appended to `out`."""
    total = sum(len(t.encode("utf-8")) for _, t in _texts(files) if t)
    stride = max(1, round(total / target_bytes)) if target_bytes > 0 else 0
    docs = size = 0
    for i, (obj, text) in enumerate(_texts(files)):
        if not stride or i % stride or not text:
            continue
        doc_id = str(obj.get("id", f"doc-{start + i}"))
        out.write(json.dumps({"id": doc_id, "source": str(obj.get("source") or "corpus"),
                              "uri": str(obj.get("path") or doc_id), "text": text}, ensure_ascii=False) + "\n")
        docs += 1
        size += len(text.encode("utf-8"))
    return {"files": len(files), "stride": stride, "docs": docs, "bytes": size}


def _baseline_tree(run_dir: Path) -> tuple[str, str]:
    """(directory holding the baseline's platform_assets/, what it is)."""
    tree = os.environ.get("CLEANING_BENCH_BASELINE_TREE")
    if tree:
        if not (Path(tree) / "platform_assets" / "cleaning" / "pipeline.py").is_file():
            raise BenchmarkError(f"CLEANING_BENCH_BASELINE_TREE={tree} holds no platform_assets/cleaning/")
        return str(Path(tree).resolve()), f"tree {tree}"
    commit = os.environ.get("CLEANING_BENCH_BASELINE", BASELINE_COMMIT)
    dest = run_dir / "baseline"
    dest.mkdir()
    # git archive, not a worktree: nothing is registered in the repository's .git
    archive = subprocess.run(["git", "archive", commit, "platform_assets"], cwd=REPO_ROOT, capture_output=True)
    if archive.returncode != 0:
        raise BenchmarkError(f"git archive {commit} failed: {archive.stderr.decode(errors='replace').strip()}")
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive.stdout, check=True)
    rev = subprocess.run(["git", "rev-parse", commit], cwd=REPO_ROOT, capture_output=True, text=True)
    return str(dest), f"commit {rev.stdout.strip() or commit}"


def prepare(corpus: Path, run_dir: Path) -> Spec:
    def pick(pattern: str) -> list[Path]:
        return [corpus] if corpus.is_file() else sorted(Path(p) for p in glob.glob(str(corpus / pattern)))

    prose, code = pick("text_*.jsonl"), ([] if corpus.is_file() else pick("code_*.jsonl"))
    if not prose and not code:
        raise BenchmarkError(f"no text_*.jsonl or code_*.jsonl files in {corpus}")
    target = float(os.environ.get("CLEANING_BENCH_MB", TARGET_MB_DEFAULT)) * MB
    code_share = float(os.environ.get("CLEANING_BENCH_CODE_SHARE", CODE_SHARE_DEFAULT)) if code else 0.0
    sample = run_dir / "sample.jsonl"
    with open(sample, "w", encoding="utf-8") as out:
        parts = {"prose": _sample(prose, target * (1 - code_share), out, 0)}
        parts["code"] = _sample(code, target * code_share, out, 10**9)
    docs = sum(p["docs"] for p in parts.values())
    if not docs:
        raise BenchmarkError(f"no documents with text in {corpus}")
    tree, baseline = _baseline_tree(run_dir)
    # a baseline that predates the length bands has one threshold for every length: ours runs the same
    knows_bands = "min_score_by_words" in (Path(tree) / "platform_assets/cleaning/settings.py").read_text()
    return {"corpus": str(corpus), "sample": str(sample), "parts": parts, "docs": docs,
            "input_bytes": sum(p["bytes"] for p in parts.values()), "baseline_tree": tree, "baseline": baseline,
            "ours_settings": {} if knows_bands else BASELINE_SEMANTICS}


def describe(spec: Spec) -> str:
    p = spec["parts"]
    return (f"{spec['docs']:,} docs, {spec['input_bytes'] / MB:,.1f} MB of text: prose {p['prose']['docs']:,} docs "
            f"{p['prose']['bytes'] / MB:,.1f} MB (every {p['prose']['stride']}th), code {p['code']['docs']:,} docs "
            f"{p['code']['bytes'] / MB:,.1f} MB (every {p['code']['stride']}th); baseline {spec['baseline']}")


def _batches(spec: Spec) -> list[Any]:
    """Record batches of the documents schema (of whichever platform_assets this process imported)."""
    import pyarrow as pa

    from platform_assets.contracts import DEFAULT_IO
    from platform_assets.schema import DOCUMENTS_SCHEMA

    with open(spec["sample"], encoding="utf-8") as f:
        docs = [json.loads(line) for line in f]
    n = len(docs)
    columns = {"id": [d["id"] for d in docs], "source": [d["source"] for d in docs],
               "text": [d["text"] for d in docs], "modality": ["text"] * n, "uri": [d["uri"] for d in docs]}
    arrays = [pa.array(columns[f.name], f.type) if f.name in columns else pa.nulls(n, f.type)
              for f in DOCUMENTS_SCHEMA]
    table = pa.Table.from_arrays(arrays, schema=DOCUMENTS_SCHEMA)
    return table.to_batches(max_chunksize=DEFAULT_IO.batch_rows)


def _digest(table: Any) -> str:
    import pyarrow as pa

    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table.combine_chunks())
    return hashlib.sha256(sink.getvalue().to_pybytes()).hexdigest()


def _side(spec: Spec, settings: dict[str, Any]) -> Prepared:
    import pyarrow as pa

    from platform_assets.cleaning.pipeline import build_pipeline
    from platform_assets.cleaning.settings import CleaningSettings
    from platform_assets.cleaning.steps import EXCLUSIONS_SCHEMA

    batches = _batches(spec)
    pipeline = build_pipeline(CleaningSettings(**settings))
    if hasattr(pipeline, "load"):  # the kernels from numba's cache, untimed (built pipelines load on first use)
        pipeline.load()
    step_cpu = {step.name: 0.0 for step in pipeline.steps}
    pipeline.steps = [_Timed(step, step_cpu) for step in pipeline.steps]
    pa.array(["x"])  # pyarrow imports pandas on the first pa.array() of a Python list: untimed

    def work():
        kept, excluded = [], []
        for batch in batches:
            result = pipeline.process_batch(batch)
            kept.append(result.kept)
            excluded.append(result.exclusions)
        return kept, excluded

    def finish(out) -> dict[str, Any]:
        kept_batches, excluded = out
        kept = pa.Table.from_batches(kept_batches, schema=pipeline.output_schema(batches[0].schema))
        kept = _comparable_kept(kept.drop_columns([c for c in NEW_COLUMNS if c in kept.column_names]))
        excl = _comparable_exclusions(pa.Table.from_batches(excluded, schema=EXCLUSIONS_SCHEMA))
        funnel = _relabel_keys(pipeline.funnel().to_dict())
        for step in funnel["steps"]:
            step.pop("seconds")  # wall time: the only figure that may differ
        return {
            "docs": sum(b.num_rows for b in batches),
            "docs_kept": kept.num_rows,
            "exclusions": excl.num_rows,
            "removed_by_rule": funnel["removed_by_rule"],
            "digests": {**{f"kept.{name}": _digest(kept.select([name])) for name in kept.column_names},
                        "exclusions": _digest(excl), "funnel": hashlib.sha256(
                            json.dumps(funnel, sort_keys=True).encode()).hexdigest()},
            "platform_assets": sys.modules["platform_assets"].__file__,
            "step_cpu_seconds": step_cpu,
        }

    return Prepared(work, finish)


def _comparable_kept(kept: Any) -> Any:
    """The kept documents with `lang` mapped back to the baseline's labels (module doc)."""
    import pyarrow as pa

    if "lang" not in kept.column_names:
        return kept
    lang = [RELABELLED.get(v, v) for v in kept.column("lang").to_pylist()]
    return kept.set_column(kept.column_names.index("lang"), "lang", pa.array(lang, kept.schema.field("lang").type))


def _comparable_exclusions(excl: Any) -> Any:
    """The language step's exclusion values under the baseline's labels ("ff:0.027 < 0.5" -> "fuv:0.027 < 0.5")."""
    import pyarrow as pa

    values = []
    for rule, value in zip(excl.column("rule").to_pylist(), excl.column("value").to_pylist(), strict=True):
        if value is not None and rule.startswith("language.") and ":" in value:
            tag, _, rest = value.partition(":")
            value = f"{RELABELLED.get(tag, tag)}:{rest}"
        values.append(value)
    return excl.set_column(excl.column_names.index("value"), "value", pa.array(values, excl.schema.field("value").type))


def _relabel_keys(value: Any) -> Any:
    """The funnel with per-language counters ("lang.nb") under the baseline's labels ("lang.no")."""
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for k, v in value.items():
            if isinstance(k, str) and k.startswith("lang."):
                k = "lang." + RELABELLED.get(k[5:], k[5:])
            out[k] = out.get(k, 0) + v if isinstance(v, int) and k in out else _relabel_keys(v)
        return out
    if isinstance(value, list):
        return [_relabel_keys(v) for v in value]
    return value


class _Timed:
    """A step whose calls add their CPU time (this process) to `cpu[name]`: where the time goes, per
    step, in every round's record (the steps' own `seconds` are wall time)."""

    def __init__(self, step: Any, cpu: dict[str, float]):
        self.step, self.name, self.cpu = step, step.name, cpu
        self.added_fields = step.added_fields
        self.takes_texts = getattr(step, "takes_texts", False)  # the baseline's steps predate it

    def load(self) -> None:
        self.step.load()

    def __call__(self, batch: Any) -> Any:  # the baseline's pipeline calls its steps
        start = time.process_time()
        try:
            return self.step(batch)
        finally:
            self.cpu[self.name] += time.process_time() - start

    def run(self, batch: Any, texts: Any = None, **kwargs: Any) -> Any:  # ours hands each step the decoded texts
        start = time.process_time()
        try:
            return self.step.run(batch, texts, **kwargs)
        finally:
            self.cpu[self.name] += time.process_time() - start


def run_ours(spec: Spec, run_dir: Path) -> Prepared:
    return _side(spec, spec["ours_settings"])


def run_baseline(spec: Spec, run_dir: Path) -> Prepared:
    if "platform_assets" in sys.modules:
        raise BenchmarkError("platform_assets was imported before the baseline tree was put on sys.path")
    sys.path.insert(0, spec["baseline_tree"])
    import platform_assets  # noqa: F401 - first, as the platform imports it (Arrow's memory pool)

    return _side(spec, {})


def check(ours: Record, peer: Record) -> None:
    if not ours["platform_assets"].startswith(str(REPO_ROOT)) or ours["platform_assets"] == peer["platform_assets"]:
        raise BenchmarkError(f"the sides did not import different trees: ours {ours['platform_assets']}, "
                             f"baseline {peer['platform_assets']}")
    differ = sorted(k for k in ours["digests"].keys() | peer["digests"].keys()
                    if ours["digests"].get(k) != peer["digests"].get(k))
    if differ:
        raise BenchmarkError(f"outputs differ from the baseline's in: {', '.join(differ)} (kept "
                             f"{ours['docs_kept']} vs {peer['docs_kept']}, exclusions {ours['exclusions']} vs "
                             f"{peer['exclusions']})")


BENCHMARK = Benchmark(
    name="cleaning_stage",
    description="the whole cleaning step list, default recipe, per core: working tree vs the issue's baseline",
    ours_label="working tree: cleaning.pipeline.build_pipeline(CleaningSettings()).process_batch",
    peer_label="the same pipeline at the baseline commit (CLEANING_BENCH_BASELINE, default "
               f"{BASELINE_COMMIT[:10]}), imported from a git-archive tree",
    prepare=prepare,
    ours=run_ours,
    peer=run_baseline,
    metrics=(
        Metric("throughput per core", "MB/s per CPU s", True,
               lambda r, s: s["input_bytes"] / MB / r["cpu_seconds"], "{:,.2f}"),
        Metric("wall throughput", "MB/s", True, lambda r, s: s["input_bytes"] / MB / r["seconds"], "{:,.2f}"),
        cpu_seconds_metric(),
        *(Metric(f"{step} CPU", "s", False, lambda r, s, step=step: r["step_cpu_seconds"][step], "{:,.2f}")
          for step in ("normalize", "language", "quality", "blocklist", "pii")),
        peak_rss_metric(),
        Metric("docs kept", "", None, lambda r, s: r["docs_kept"], "{:,.0f}", must_match=True),
        Metric("exclusion rows", "", None, lambda r, s: r["exclusions"], "{:,.0f}", must_match=True),
    ),
    packages=("platform-assets", "pyarrow", "numpy", "regex", "py3langid", "ftfy", "resiliparse"),
    check=check,
    targets=(Target("throughput per core", "MB per CPU-second at least 5x the baseline's", min_ratio=5.0),),
    env={"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"},
    describe=describe,
)
