"""Quality heuristics, one core: our rule sets vs datatrove's filters, same rule set, same documents.

Rule set, in FineWeb's order: Gopher repetition, Gopher quality, C4, FineWeb quality, at the
published thresholds (both sides' defaults). `QUALITY_BENCH_RECIPE` picks C4's variant:

- `fineweb` (default): C4 with the terminal-punctuation line filter off, as FineWeb ran it and as
  our stage's default `quality:` list (`settings.fineweb_recipe()`) has it;
- `published`: every rule set at its class defaults (C4 also removes lines without terminal
  punctuation, which rewrites most documents and removes many more).

Both sides see every document (our presets are scoped to `languages: [en]` by default; here
`languages: null`, since datatrove's filters do not look at the language either), one process, one
core, in memory: the documents are read from a JSONL sample in the untimed setup, and the timed work
is the filtering alone.

- ours: `QualityStep([gopher_repetition, gopher_quality, c4, fineweb])` over Arrow record batches of
  8,192 rows (the stage's batch size), exclusion records and the funnel counts included;
- peer: `GopherRepetitionFilter -> GopherQualityFilter -> C4QualityFilter -> FineWebQualityFilter`
  chained through their `run()` generators over `Document` objects, as datatrove's executor chains
  pipeline steps (its per-step stats included; no reader or writer on either side).

Datatrove splits words and sentences with nltk (`word_tokenize`: Punkt sentences, then the Treebank
word tokenizer per sentence). nltk's code installs from PyPI, but the trained English Punkt model
(`punkt_tab`) is a separate download, which this machine cannot make. The peer therefore runs with
an offline tokenizer built from nltk's own classes: `PunktSentenceTokenizer()` with empty
(untrained) parameters and `NLTKWordTokenizer` (what `word_tokenize` uses), passed to each filter as
a datatrove `WordTokenizer` (their `language=` argument accepts one). The algorithm and its cost are
nltk's; only the learnt abbreviation/collocation lists are missing, so "e.g." or "Dr." may end a
sentence for the peer (it counts a few more C4 sentences than with the trained model). Word counts
do not depend on Punkt's parameters beyond sentence-final periods.

Input: the documents of the corpus's `text_*.jsonl` files, every k-th line over all of them (k chosen
so that about `QUALITY_BENCH_MB` MB, default 40, is taken: every source is represented, in proportion,
rather than the first files' kernel docs alone), written once to the run directory. Input MB = the
UTF-8 bytes of the texts (10^6 bytes).

Figures: MB/s per core = input MB / CPU seconds of the work (the harness's getrusage, all threads;
both sides are single-threaded, so this is also wall throughput on an idle core, and it is what a
shared machine disturbs least). Agreement = the fraction of documents that both sides keep or both
drop (a sanity figure: the two tokenizers differ slightly, see presets.py, and we count the Gopher
quality ratios over words rather than over every punctuation token). `check` writes it into both
rounds' records, since it needs both sides.
"""

from __future__ import annotations

import glob
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

TARGET_MB_DEFAULT = 40.0
BATCH_ROWS = 8192
RECIPES = ("fineweb", "published")


def text_files(corpus: Path) -> list[Path]:
    if corpus.is_file():
        return [corpus]
    return sorted(Path(p) for p in glob.glob(str(corpus / "text_*.jsonl")))


def _text_of(line: str) -> str | None:
    try:
        obj = json.loads(line)
    except ValueError:
        return None
    text = obj.get("text") if isinstance(obj, dict) else None
    return text if isinstance(text, str) and text else None


def prepare(corpus: Path, run_dir: Path) -> Spec:
    files = text_files(corpus)
    if not files:
        raise BenchmarkError(f"no text_*.jsonl files in {corpus}")
    target = float(os.environ.get("QUALITY_BENCH_MB", TARGET_MB_DEFAULT)) * MB
    recipe = os.environ.get("QUALITY_BENCH_RECIPE", "fineweb")
    if recipe not in RECIPES:
        raise BenchmarkError(f"QUALITY_BENCH_RECIPE must be one of {RECIPES}, not {recipe!r}")
    total = 0  # UTF-8 bytes of every text (a first pass: JSON escapes make file sizes ~1.6x larger)
    for f in files:
        with open(f, encoding="utf-8") as fh:
            for line in fh:
                text = _text_of(line)
                total += len(text.encode("utf-8")) if text else 0
    stride = max(1, round(total / target))
    sample = run_dir / "sample.jsonl"
    docs = text_bytes = 0
    sources: dict[str, int] = {}
    i = 0
    with open(sample, "w", encoding="utf-8") as out:
        for f in files:
            with open(f, encoding="utf-8") as fh:
                for line in fh:
                    i += 1
                    if (i - 1) % stride:
                        continue
                    text = _text_of(line)
                    if not text:
                        continue
                    obj = json.loads(line)
                    doc_id = str(obj.get("id", f"doc-{i}"))
                    out.write(json.dumps({"id": doc_id, "text": text}, ensure_ascii=False) + "\n")
                    docs += 1
                    text_bytes += len(text.encode("utf-8"))
                    src = str(obj.get("source"))
                    sources[src] = sources.get(src, 0) + 1
    if not docs:
        raise BenchmarkError(f"no documents with text in {corpus}")
    return {
        "corpus": str(corpus),
        "files": [str(f) for f in files],
        "sample": str(sample),
        "stride": stride,
        "docs": docs,
        "input_bytes": text_bytes,
        "sources": sources,
        "recipe": recipe,
    }


def describe(spec: Spec) -> str:
    return (f"every {spec['stride']}th document of {len(spec['files'])} text files: {spec['docs']:,} docs, "
            f"{spec['input_bytes'] / MB:,.1f} MB of text, {len(spec['sources'])} sources; "
            f"recipe {spec['recipe']}")


def load_sample(spec: Spec) -> tuple[list[str], list[str]]:
    ids, texts = [], []
    with open(spec["sample"], encoding="utf-8") as f:
        for line in f:
            obj = json.loads(line)
            ids.append(obj["id"])
            texts.append(obj["text"])
    return ids, texts


def kept_mask(ids: list[str], kept_ids: set[str]) -> str:
    return "".join("1" if i in kept_ids else "0" for i in ids)


# -- ours ------------------------------------------------------------------------------------------
def our_rule_sets(recipe: str) -> list[Any]:
    """The four presets, in FineWeb's order, applied to every language."""
    from platform_assets.cleaning.settings import preset

    c4 = {"filter_no_terminal_punct": False} if recipe == "fineweb" else {}
    return [
        preset("gopher_repetition", languages=None),
        preset("gopher_quality", languages=None),
        preset("c4", languages=None, **c4),
        preset("fineweb", languages=None),
    ]


def run_ours(spec: Spec, run_dir: Path) -> Prepared:
    import pyarrow as pa
    import pyarrow.json as pj

    from platform_assets.cleaning.quality.step import QualityStep

    # straight to Arrow: no Python strings held between batches (blocks must hold the longest line)
    table = pj.read_json(spec["sample"], read_options=pj.ReadOptions(block_size=64 * 2**20))
    ids = table.column("id").to_pylist()
    step = QualityStep(our_rule_sets(spec["recipe"]))
    batches = table.combine_chunks().to_batches(max_chunksize=BATCH_ROWS)
    # pyarrow imports pandas on the first pa.array() of a Python list: an import, so do it untimed
    pa.array(["x"])

    def work():
        kept, rules = [], {}
        for batch in batches:
            result = step(batch)
            kept.extend(result.kept.column("id").to_pylist())
            for rule, n in result.stats.removed_docs.items():
                rules[rule] = rules.get(rule, 0) + n
        return kept, rules

    def finish(out) -> dict[str, Any]:
        kept, rules = out
        return {"docs": len(ids), "docs_kept": len(kept), "kept_mask": kept_mask(ids, set(kept)),
                "removed_by_rule": dict(sorted(rules.items(), key=lambda kv: -kv[1]))}

    return Prepared(work, finish)


# -- peer: datatrove -------------------------------------------------------------------------------
def _no_regex_wall_clock_limit() -> None:
    """nltk 3.10 runs its tokenizers' patterns through `nltk.redos` under a 5 s wall-clock limit per
    call and raises TimeoutError past it. Punkt's sentence-end pattern walks a whole document in one
    call, so a long document on a slow or busy machine trips it without any backtracking: datatrove
    failed pipeline_end_to_end at 256 MB on 2026-11-29 (AMD EPYC, quiet) while 128 MB passed. These are
    nltk's own trusted patterns (the limit guards user-supplied ones): lift it, as nltk documents."""
    try:
        import nltk.redos
    except ImportError:  # nltk before 3.10: no limit
        return
    nltk.redos.DEFAULT_TIMEOUT = None


def offline_nltk_tokenizer():
    """nltk.word_tokenize / sent_tokenize's algorithm without the downloadable Punkt model (see above)."""
    from datatrove.utils.word_tokenizers import WordTokenizer, strip_strings
    from nltk.tokenize.destructive import NLTKWordTokenizer
    from nltk.tokenize.punkt import PunktSentenceTokenizer

    _no_regex_wall_clock_limit()

    class OfflineNLTKTokenizer(WordTokenizer):
        def __init__(self):
            super().__init__("en")
            self._punkt = PunktSentenceTokenizer()  # untrained parameters: no model file
            self._words = NLTKWordTokenizer()

        def word_tokenize(self, text: str) -> list[str]:
            # nltk.word_tokenize(text): Punkt sentences, then the Treebank word tokenizer on each
            return strip_strings([t for s in self._punkt.tokenize(text) for t in self._words.tokenize(s)])

        def sent_tokenize(self, text: str) -> list[str]:
            return strip_strings(self._punkt.tokenize(text))

        def span_tokenize(self, text: str) -> list[tuple[int, int]]:
            return list(self._punkt.span_tokenize(text))

    return OfflineNLTKTokenizer()


def datatrove_filters(recipe: str) -> list[Any]:
    from datatrove.pipeline.filters import (
        C4QualityFilter,
        FineWebQualityFilter,
        GopherQualityFilter,
        GopherRepetitionFilter,
    )

    tok = offline_nltk_tokenizer()
    return [
        GopherRepetitionFilter(language=tok),
        GopherQualityFilter(language=tok),
        C4QualityFilter(language=tok, filter_no_terminal_punct=(recipe != "fineweb")),
        FineWebQualityFilter(language=tok),
    ]


def run_peer(spec: Spec, run_dir: Path) -> Prepared:
    from datatrove.data import Document
    from loguru import logger

    logger.remove()  # no per-document log lines on either side
    ids, texts = load_sample(spec)
    docs = [Document(text=t, id=i) for i, t in zip(ids, texts, strict=True)]
    del texts
    filters = datatrove_filters(spec["recipe"])
    # warm-up outside the timing: nltk compiles its tokenizer regexes on first use
    filters[0].language.word_tokenize("Warm up, please. Thank you.")

    def work():
        stream = iter(docs)
        for f in filters:
            stream = f.run(stream)
        return [d.id for d in stream]

    def finish(kept: list[str]) -> dict[str, Any]:
        rules: dict[str, int] = {}
        for f in filters:
            for key, stat in f.stats.stats.items():
                if key.startswith("dropped_"):
                    rule = f"{type(f).__name__}.{key[len('dropped_'):]}"
                    rules[rule] = rules.get(rule, 0) + int(stat.total)
        return {"docs": len(ids), "docs_kept": len(kept), "kept_mask": kept_mask(ids, set(kept)),
                "removed_by_rule": dict(sorted(rules.items(), key=lambda kv: -kv[1]))}

    return Prepared(work, finish)


def agreement(ours: str, peer: str) -> dict[str, float]:
    n = len(ours)
    both_keep = sum(1 for a, b in zip(ours, peer, strict=True) if a == b == "1")
    both_drop = sum(1 for a, b in zip(ours, peer, strict=True) if a == b == "0")
    return {
        "agreement": (both_keep + both_drop) / n if n else 1.0,
        "both_keep": both_keep,
        "both_drop": both_drop,
        "ours_only_keep": ours.count("1") - both_keep,
        "peer_only_keep": peer.count("1") - both_keep,
    }


def check(ours: Record, peer: Record) -> None:
    if ours["docs"] != peer["docs"] or len(ours["kept_mask"]) != len(peer["kept_mask"]):
        raise BenchmarkError(f"the sides saw different documents: ours {ours['docs']}, peer {peer['docs']}")
    figures = agreement(ours["kept_mask"], peer["kept_mask"])
    ours.update(figures)  # both records carry it: a metric reads one record at a time
    peer.update(figures)


BENCHMARK = Benchmark(
    name="cleaning_quality_rules",
    description="quality heuristics (Gopher repetition + Gopher quality + C4 + FineWeb), one core",
    ours_label="platform_assets.cleaning.quality.step.QualityStep (presets gopher_repetition, "
               "gopher_quality, c4, fineweb; 8,192-row Arrow batches)",
    peer_label="datatrove GopherRepetitionFilter -> GopherQualityFilter -> C4QualityFilter -> "
               "FineWebQualityFilter (run() chain; nltk word_tokenize algorithm, untrained Punkt: offline)",
    prepare=prepare,
    ours=run_ours,
    peer=run_peer,
    metrics=(
        Metric("throughput per core", "MB/s per CPU s", True,
               lambda r, s: s["input_bytes"] / MB / r["cpu_seconds"]),
        Metric("wall throughput", "MB/s", True, lambda r, s: s["input_bytes"] / MB / r["seconds"]),
        cpu_seconds_metric(),
        peak_rss_metric(),
        Metric("docs kept", "% of docs", None, lambda r, s: 100.0 * r["docs_kept"] / r["docs"], "{:.1f}"),
        Metric("keep/drop agreement", "% of docs", None, lambda r, s: 100.0 * r["agreement"], "{:.1f}"),
    ),
    packages=("platform-assets", "regex", "numpy", "datatrove", "nltk"),
    check=check,
    targets=(Target("throughput per core", "MB/s per core at least 2x datatrove's", min_ratio=2.0),),
    env={"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "NLTK_DATA": "{run_dir}/nltk_data"},
    describe=describe,
)
