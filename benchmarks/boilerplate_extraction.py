"""Boilerplate removal: precision and recall of the text kept from HTML pages, against the main content
that the page's generator marks. Ours (Resiliparse, the html step) vs trafilatura.

Ground truth needs no annotator: documentation generators mark the main content themselves. The
generator is read from `<meta name="generator">`; per generator:

- Sphinx ("Docutils ...": the Python docs, the kernel docs) and Node's API docs (no generator meta;
  `id="apicontent"`): the element with `role="main"` (`<div class="body" role="main">`): outside it
  are the sidebar (table of contents, search box), the related-pages bars, breadcrumbs and the footer;
- Publican (`<meta name="generator" content="publican ...">`: the Debian Administrator's Handbook,
  26 languages): the `<body>`'s one `<div>` child besides `div#banner` (`<div class="chapter">`,
  `<div class="section">`, ...): outside it are the "Download the ebook" banner, the site logos and
  the Prev / Up / Home / Next bars;
- DocBook XSL ("DocBook XSL Stylesheets ...": valgrind, PostgreSQL): the first `<div>` whose class is
  a DocBook component (chapter, section, sect1, refentry, book, ...: DocBook XSL names each div
  after its element): outside it are div.navheader / div.navfooter or a customisation's navigation
  tables;
- makeinfo ("makeinfo" / "texi2any": libffi, time; autoconf in one file): the node's `<div
  class="top|chapter|section|...">` (texinfo 7: `div.*-level-extent`), every node's in a one-file
  manual, less the navigation line inside each, div.header (texinfo 6) / div.nav-panel (texinfo 7).

What the generator puts inside the main element is main text, its admonitions and tables of
contents included.

`--corpus` is a directory searched recursively for `*.html` (e.g. /usr/share/doc, where
build_corpus.sh's documentation packages put them). Pages are grouped by site (the first path
component under the corpus: python3.11, debian-handbook, linux-doc-6.1, ...), and up to
`BOILERPLATE_PAGES_PER_SITE` (default 250) are taken from each, evenly spaced in path order; pages
with no marked main element, and generated index pages (genindex*, search, *modindex), are skipped.

Truth text: the text inside the marked element, read with the standard library's HTMLParser (so
neither side's parser defines the truth), script/style left out, block elements separated.
Scoring, token-level: a text is the multiset of its lower-cased tokens (runs of word characters;
each Han/kana character one token, since CJK text has no spaces); precision = |kept & truth| /
|kept|, recall = |kept & truth| / |truth|, summed over all pages (micro-averaged: long pages weigh
more); F1 from those; boilerplate kept = 1 - precision, the share of the kept tokens that the main
content does not account for. Per-site and per-generator figures and macro averages are in the
JSON result; recall and boilerplate kept per generator are metrics, with the issue's targets on the
worst generator (recall >= 95%, boilerplate kept below 5%).

- ours: `HtmlExtract(HtmlSettings()).extract(html)`, the html step's defaults (main_content=True,
  generator_rules=True); `BOILERPLATE_GENERATOR_RULES=0` runs it with generator_rules=False
  (Resiliparse's heuristic on every page: the figures before the generator rules);
- peer: `trafilatura.extract(html)` with its defaults (what FineWeb ran; tables kept, comments not);
- a naive baseline, strip every tag and keep all the body's text, is scored in `prepare` and printed
  with the input description (recall ~100% by construction: it measures how much boilerplate there
  is to remove).
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from pathlib import Path
from typing import Any

from benchmarks.harness import (
    MB,
    Benchmark,
    BenchmarkError,
    Metric,
    Prepared,
    Spec,
    Target,
    peak_rss_metric,
)
from benchmarks.html_generator_marks import marked_text

PAGES_PER_SITE_DEFAULT = 250
# the generators the targets name (figures for each, NaN where the corpus has none); Node's API
# docs ("node-api") are scored in the totals and in per_generator too
REPORTED_GENERATORS = ("sphinx", "docbook-xsl", "publican", "makeinfo")
_SKIP_NAMES = re.compile(r"^(genindex.*|search|py-modindex|modindex|.*-modindex)\.html$")
# a token: one Han/kana character, or a run of word characters
_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_TOKEN_RE = re.compile(f"[{_CJK}]|[^\\W{_CJK}]+")


def tokens(text: str) -> Counter[str]:
    return Counter(_TOKEN_RE.findall(text.lower()))


def select_pages(corpus: Path, per_site: int) -> list[tuple[str, Path]]:
    sites: dict[str, list[Path]] = {}
    for dirpath, dirnames, filenames in os.walk(corpus):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith((".", "_")))
        for f in filenames:
            if f.endswith(".html") and not _SKIP_NAMES.match(f):
                path = Path(dirpath) / f
                rel = path.relative_to(corpus)
                site = rel.parts[0] if len(rel.parts) > 1 else corpus.name
                sites.setdefault(site, []).append(path)
    chosen = []
    for site, paths in sorted(sites.items()):
        paths.sort()
        step = max(1, len(paths) / per_site)
        chosen += [(site, paths[int(i * step)]) for i in range(min(per_site, len(paths)))]
    return chosen


def overlap(kept: Counter[str], truth: Counter[str]) -> tuple[int, int, int]:
    """(tokens in both, tokens kept, tokens in the truth), as multisets."""
    return sum((kept & truth).values()), sum(kept.values()), sum(truth.values())


def _prf(common: int, kept: int, truth: int) -> dict[str, float]:
    p = common / kept if kept else 0.0
    r = common / truth if truth else 0.0
    # boilerplate kept: the share of kept tokens the marked main content does not account for (1 - P,
    # and 0 when nothing is kept: an empty output keeps no boilerplate, and recall says what it lost)
    return {"precision": p, "recall": r, "f1": 2 * p * r / (p + r) if p + r else 0.0,
            "boilerplate_kept": (kept - common) / kept if kept else 0.0}


def prepare(corpus: Path, run_dir: Path) -> Spec:
    if not corpus.is_dir():
        raise BenchmarkError(f"{corpus} is not a directory of HTML pages")
    per_site = int(os.environ.get("BOILERPLATE_PAGES_PER_SITE", PAGES_PER_SITE_DEFAULT))
    truth_path = run_dir / "truth.jsonl"
    pages, sites, marks = [], Counter(), Counter()
    naive = [0, 0, 0]
    skipped = 0
    with open(truth_path, "w", encoding="utf-8") as out:
        for site, path in select_pages(corpus, per_site):
            html = path.read_bytes().decode("utf-8", errors="replace")
            mark, main, body = marked_text(html)
            truth = tokens(main)
            if mark is None or not truth:
                skipped += 1
                continue
            out.write(json.dumps({"path": str(path), "site": site, "generator": mark, "truth": main},
                                 ensure_ascii=False) + "\n")
            pages.append({"path": str(path), "site": site, "bytes": len(html.encode("utf-8"))})
            sites[site] += 1
            marks[mark] += 1
            for i, v in enumerate(overlap(tokens(body), truth)):
                naive[i] += v
    if not pages:
        raise BenchmarkError(f"no HTML page with a generator-marked main element under {corpus}")
    return {
        "corpus": str(corpus),
        "truth": str(truth_path),
        "pages": pages,
        "input_bytes": sum(p["bytes"] for p in pages),
        "sites": dict(sites),
        "marks": dict(marks),
        "skipped_unmarked": skipped,
        "naive": _prf(*naive),
    }


def describe(spec: Spec) -> str:
    sites = ", ".join(f"{k} {v}" for k, v in spec["sites"].items())
    nv = spec["naive"]
    marks = ", ".join(f"{k}: {v}" for k, v in spec["marks"].items())
    return (f"{len(spec['pages']):,} pages, {spec['input_bytes'] / MB:,.1f} MB ({sites}); marked by {marks}; "
            f"naive strip-all-tags baseline: precision {100 * nv['precision']:.1f}%, "
            f"recall {100 * nv['recall']:.1f}%, F1 {100 * nv['f1']:.1f}%")


def load_pages(spec: Spec) -> list[str]:
    return [Path(p["path"]).read_bytes().decode("utf-8", errors="replace") for p in spec["pages"]]


def evaluate(spec: Spec, texts: list[str]) -> dict[str, Any]:
    totals = [0, 0, 0]
    per_site: dict[str, list[int]] = {}
    per_generator: dict[str, list[int]] = {}
    macro: list[dict[str, float]] = []
    empty = 0
    with open(spec["truth"], encoding="utf-8") as f:
        for line, text in zip(f, texts, strict=True):
            t = json.loads(line)
            counts = overlap(tokens(text or ""), tokens(t["truth"]))
            empty += not (text or "").strip()
            site = per_site.setdefault(t["site"], [0, 0, 0])
            generator = per_generator.setdefault(t["generator"], [0, 0, 0])
            for i, v in enumerate(counts):
                totals[i] += v
                site[i] += v
                generator[i] += v
            macro.append(_prf(*counts))
    return {
        **_prf(*totals),
        "pages": len(texts),
        "empty_pages": empty,
        "macro": {k: sum(m[k] for m in macro) / len(macro) for k in ("precision", "recall", "f1")},
        "per_site": {k: _prf(*v) for k, v in sorted(per_site.items())},
        "per_generator": {k: _prf(*v) for k, v in sorted(per_generator.items())},
    }


def _generator_figure(generator: str, key: str):
    # NaN when the corpus has no page of that generator: shown as "nan", and a target on it fails
    return lambda r, s: 100.0 * r["per_generator"].get(generator, {}).get(key, float("nan"))


def _worst(key: str, pick):
    return lambda r, s: 100.0 * pick(g[key] for g in r["per_generator"].values())


def run_ours(spec: Spec, run_dir: Path) -> Prepared:
    from platform_assets.cleaning.html_extract import HtmlExtract
    from platform_assets.cleaning.settings import HtmlSettings

    pages = load_pages(spec)
    step = HtmlExtract(HtmlSettings(generator_rules=os.environ.get("BOILERPLATE_GENERATOR_RULES", "1") != "0"))
    step.extract("<html><body><p>warm up</p></body></html>")

    def work():
        out = []
        for html in pages:
            text = step.extract(html)
            out.append(text if isinstance(text, str) else "")  # a Drop (too deep): nothing kept
        return out

    return Prepared(work, lambda texts: evaluate(spec, texts))


def run_peer(spec: Spec, run_dir: Path) -> Prepared:
    import trafilatura

    pages = load_pages(spec)
    trafilatura.extract("<html><body><p>warm up, a paragraph of text to extract.</p></body></html>")

    def work():
        return [trafilatura.extract(html) or "" for html in pages]

    return Prepared(work, lambda texts: evaluate(spec, texts))


BENCHMARK = Benchmark(
    name="boilerplate_extraction",
    description="HTML main-text extraction: P/R of kept tokens vs the generator-marked main content",
    ours_label="platform_assets.cleaning.html_extract.HtmlExtract (Resiliparse, main_content=True)",
    peer_label="trafilatura.extract (defaults)",
    prepare=prepare,
    ours=run_ours,
    peer=run_peer,
    metrics=(
        Metric("precision", "%", True, lambda r, s: 100.0 * r["precision"], "{:.1f}"),
        Metric("recall", "%", True, lambda r, s: 100.0 * r["recall"], "{:.1f}"),
        Metric("F1", "%", True, lambda r, s: 100.0 * r["f1"], "{:.1f}"),
        Metric("pages with no text", "", None, lambda r, s: r["empty_pages"], "{:,.0f}"),
        Metric("boilerplate kept", "%", False, lambda r, s: 100.0 * r["boilerplate_kept"], "{:.2f}"),
        Metric("worst generator's recall", "%", True, _worst("recall", min), "{:.1f}"),
        Metric("worst generator's boilerplate kept", "%", False, _worst("boilerplate_kept", max), "{:.2f}"),
        *(Metric(f"{g} {label}", "%", better, _generator_figure(g, key), fmt)
          for g in REPORTED_GENERATORS
          for label, key, better, fmt in (("recall", "recall", True, "{:.1f}"),
                                          ("boilerplate kept", "boilerplate_kept", False, "{:.2f}"))),
        Metric("throughput", "MB/s", True, lambda r, s: s["input_bytes"] / MB / r["seconds"]),
        peak_rss_metric(),
    ),
    packages=("platform-assets", "resiliparse", "trafilatura", "lxml"),
    targets=(
        Target("worst generator's recall", "recall of main text >= 95% on every generator", min_ours=95.0),
        Target("worst generator's boilerplate kept", "boilerplate kept below 5% on every generator",
               max_ours=5.0),
    ),
    env={"OMP_NUM_THREADS": "1"},
    describe=describe,
)
