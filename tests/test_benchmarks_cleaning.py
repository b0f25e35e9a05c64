"""Smoke tests of the cleaning benchmarks (benchmarks/cleaning_quality_rules.py, langid_accuracy.py,
boilerplate_extraction.py, cleaning_stage.py): each runs both sides through the harness (fresh child processes) on a
tiny input generated here and must produce its figures. The peers are bench extras (datatrove + nltk,
langid, trafilatura): without them a test skips. The real-data runs are in benchmarks/RESULTS.md."""

from __future__ import annotations

import importlib.util
import json
import random
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from benchmark_runs import figures as _figures  # noqa: E402
from benchmark_runs import run as _run  # noqa: E402

from benchmarks import boilerplate_extraction, cleaning_quality_rules, cleaning_stage, langid_accuracy  # noqa: E402
from benchmarks.harness import BenchmarkError  # noqa: E402


def _needs(*modules: str):
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    return pytest.mark.skipif(bool(missing), reason=f"bench extra not installed: {', '.join(missing)}")




SENTENCES = [
    "The committee met on Tuesday to discuss the new budget for the regional library network.",
    "Members agreed that the funding for rural branches should increase by twelve percent.",
    "They noted that demand for digital lending has doubled since the service was launched.",
    "The chair said that the vote was unanimous and that the plan will be published soon.",
    "Residents will have six weeks to comment on the proposal before the decision is taken.",
    "Several speakers asked whether the mobile library would return to the northern villages.",
]


def _quality_docs(rng: random.Random, n: int) -> list[str]:
    docs = []
    for i in range(n):
        kind = i % 5
        lines = [rng.choice(SENTENCES) for _ in range(rng.randint(6, 14))]
        if kind == 1:
            lines = [SENTENCES[0]] * 8  # repetition
        elif kind == 2:
            lines.append("int main(void) { return 0; }")  # C4's curly bracket
        elif kind == 3:
            lines = ["Home", "About", "Contact", "Login"] * 3  # short lines, no punctuation
        docs.append("\n".join(lines))
    return docs


@_needs("datatrove", "nltk")
def test_cleaning_quality_rules_both_sides(tmp_path: Path, monkeypatch):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    rng = random.Random(1)
    with open(corpus / "text_000.jsonl", "w") as f:
        for i, text in enumerate(_quality_docs(rng, 40)):
            f.write(json.dumps({"id": f"t{i}", "source": "generated", "lang": "en", "text": text}) + "\n")
    (corpus / "code_000.jsonl").write_text(json.dumps({"id": "c0", "text": "x = 1"}) + "\n")  # not selected
    monkeypatch.setenv("QUALITY_BENCH_MB", "1")  # everything: stride 1
    result = _run("cleaning_quality_rules", corpus, tmp_path / "work")
    spec, fig = result["spec"], _figures(result)
    assert spec["docs"] == 40 and spec["stride"] == 1 and spec["recipe"] == "fineweb"
    for m in ("throughput per core", "wall throughput", "CPU time", "peak RSS"):
        assert fig[m]["ours"] > 0 and fig[m]["peer"] > 0, m
    ours, peer = result["records"]["ours"][0], result["records"]["peer"][0]
    assert len(ours["kept_mask"]) == len(peer["kept_mask"]) == 40
    assert ours["agreement"] == peer["agreement"] and 0.5 <= ours["agreement"] <= 1.0
    assert ours["both_keep"] + ours["both_drop"] + ours["ours_only_keep"] + ours["peer_only_keep"] == 40
    # both remove the repetitive, the curly-bracket and the navigation-only documents
    for i in range(40):
        if i % 5 in (1, 2, 3):
            assert ours["kept_mask"][i] == peer["kept_mask"][i] == "0", i
    assert [t["metric"] for t in result["targets"]] == ["throughput per core"]


def test_quality_agreement_and_check():
    assert cleaning_quality_rules.agreement("1100", "1010") == {
        "agreement": 0.5, "both_keep": 1, "both_drop": 1, "ours_only_keep": 1, "peer_only_keep": 1}
    ours, peer = {"docs": 4, "kept_mask": "1100"}, {"docs": 4, "kept_mask": "1110"}
    cleaning_quality_rules.check(ours, peer)
    assert ours["agreement"] == peer["agreement"] == 0.75
    with pytest.raises(BenchmarkError, match="different documents"):
        cleaning_quality_rules.check({"docs": 3, "kept_mask": "110"}, peer)


def test_cleaning_stage_against_a_git_archive_baseline(tmp_path: Path, monkeypatch):
    # HEAD as the baseline: a commit every clone has (shallow ones too), so the git-archive path runs;
    # the identity check must then pass whatever the working tree changed in cleaning
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    rng = random.Random(2)
    with open(corpus / "text_000.jsonl", "w") as f:
        for i, text in enumerate(_quality_docs(rng, 30) + [LANGID_SAMPLES["de"] * 4, "Mail me: a.b@example.org " * 20]):
            f.write(json.dumps({"id": f"t{i}", "source": "generated", "text": text}) + "\n")
    with open(corpus / "code_000.jsonl", "w") as f:
        for i in range(6):
            f.write(json.dumps({"id": f"c{i}", "source": "code", "text": f"def f{i}(x):\n    return x + {i}\n"}) + "\n")
    monkeypatch.setenv("CLEANING_BENCH_MB", "1")  # more than the corpus: every document
    monkeypatch.setenv("CLEANING_BENCH_BASELINE", "HEAD")
    result = _run("cleaning_stage", corpus, tmp_path / "work")
    spec, fig = result["spec"], _figures(result)
    assert spec["docs"] == 38 and spec["parts"]["code"]["docs"] == 6 and spec["baseline"].startswith("commit ")
    for m in ("throughput per core", "wall throughput", "CPU time", "peak RSS"):
        assert fig[m]["ours"] > 0 and fig[m]["peer"] > 0, m
    ours, peer = result["records"]["ours"][0], result["records"]["peer"][0]
    assert ours["digests"] == peer["digests"] and "kept.lang" in ours["digests"]
    assert 0 < ours["docs_kept"] < 38 and ours["docs_kept"] + ours["exclusions"] == 38
    assert ours["platform_assets"] != peer["platform_assets"]  # two trees, one per side
    for record in (ours, peer):  # per-step CPU time, which adds up to no more than the work's
        steps = record["step_cpu_seconds"]
        assert {"guard", "normalize", "language", "quality", "blocklist", "pii"} <= set(steps)
        assert 0 < sum(steps.values()) <= record["cpu_seconds"] * 1.01
    assert fig["quality CPU"]["ours"] > 0 and fig["language CPU"]["peer"] > 0
    assert any(rule.startswith(("gopher_", "c4.", "fineweb.")) for rule in ours["removed_by_rule"])  # quality ran


def test_cleaning_stage_check_names_what_differs():
    here = str(cleaning_stage.REPO_ROOT / "platform_assets" / "__init__.py")
    ours = {"platform_assets": here, "docs_kept": 2, "exclusions": 1,
            "digests": {"kept.text": "a", "kept.lang": "b", "exclusions": "c", "funnel": "d"}}
    peer = {**ours, "platform_assets": "/tmp/baseline/platform_assets/__init__.py"}
    cleaning_stage.check(ours, dict(peer))
    with pytest.raises(BenchmarkError, match="outputs differ from the baseline's in: exclusions, kept.text"):
        cleaning_stage.check(ours, {**peer, "digests": {**ours["digests"], "kept.text": "x", "exclusions": "y"}})
    with pytest.raises(BenchmarkError, match="did not import different trees"):
        cleaning_stage.check(ours, {**peer, "platform_assets": here})


LANGID_SAMPLES = {
    "de": "Der Befehl liest die Konfigurationsdatei und schreibt das Ergebnis in die Standardausgabe, "
          "sofern keine andere Datei angegeben wurde.",
    "fr": "La commande lit le fichier de configuration et écrit le résultat sur la sortie standard, "
          "sauf si un autre fichier est indiqué.",
    "es": "El programa lee el archivo de configuración y escribe el resultado en la salida estándar, "
          "a menos que se indique otro archivo.",
    "pt_BR": "O programa lê o arquivo de configuração e escreve o resultado na saída padrão, a menos "
             "que outro arquivo seja informado.",
    "zh_CN": "该命令读取配置文件，并将结果写入标准输出，除非指定了其他文件。",
}


@_needs("langid")
def test_langid_accuracy_both_sides(tmp_path: Path):
    path = tmp_path / "manpages_langid.jsonl"
    with open(path, "w", encoding="utf-8") as f:
        for label, text in LANGID_SAMPLES.items():
            for k in range(3):
                f.write(json.dumps({"text": f"{text} ({k})", "lang": label}, ensure_ascii=False) + "\n")
    result = _run("langid_accuracy", tmp_path, tmp_path / "work")  # the directory holding the file
    fig = _figures(result)
    assert result["spec"]["paragraphs"] == 15
    for side in ("ours", "peer"):
        assert fig["accuracy"][side] >= 80.0 and fig["speed"][side] > 0
    ours = result["records"]["ours"][0]
    assert set(ours["per_label"]) == set(LANGID_SAMPLES) and ours["per_language"]["zh"] == 1.0
    assert [t["metric"] for t in result["targets"]] == ["accuracy"]


def test_langid_labels_map_to_languages():
    assert [langid_accuracy.expected_language(x) for x in ("cs", "pt_BR", "zh_TW", "zh-CN")] == [
        "cs", "pt", "zh", "zh"]
    s = langid_accuracy.score(["de", "de", "zh_TW"], ["de", "nl", "zh"])
    assert s["correct"] == 2 and s["worst_label"] == "de" and s["per_label"]["de"]["wrong"] == {"nl": 1}


PROSE = " ".join(SENTENCES)


def _sphinx_page(i: int) -> str:
    nav = "".join(f'<li><a href="p{k}.html">Chapter {k} navigation link</a></li>' for k in range(25))
    return f"""<!DOCTYPE html><html><head><title>Page {i}</title><script>var x = 1;</script>
<meta name="generator" content="Docutils 0.19: https://docutils.sourceforge.io/" /></head><body>
<div class="related" role="navigation"><ul><li><a href="index.html">index</a></li><li>next</li></ul></div>
<div class="document"><div class="documentwrapper"><div class="bodywrapper">
<div class="body" role="main"><section><h1>Section {i} title</h1><p>{PROSE}</p><p>{PROSE}</p>
<pre>print("hello")</pre><p>{SENTENCES[i % 6]}</p></section></div></div></div>
<div class="sphinxsidebar" role="navigation"><h3>Table of Contents</h3><ul>{nav}</ul>
<div id="searchbox"><form><input type="text" name="q"/></form></div></div></div>
<div class="footer">Copyright 2001-2023 the documentation authors. Last updated on Jan 01.</div>
</body></html>"""


def _publican_page(i: int) -> str:
    return f"""<?xml version="1.0" encoding="UTF-8" standalone="no"?>
<html xmlns="http://www.w3.org/1999/xhtml"><head><title>Chapter {i}</title>
<meta name="generator" content="publican v4.3.2" /></head><body>
<div id="banner"><a href="http://example.org/get/"><span class="text">Download the ebook</span></a></div>
<p id="title"><a class="left" href="http://www.example.org"><img alt="Product Site" src="x.png" /></a></p>
<ul class="docnav top"><li class="previous"><a href="a.html"><strong>Prev</strong></a></li>
<li class="home">The Handbook</li><li class="next"><a href="b.html"><strong>Next</strong></a></li></ul>
<div class="section"><div class="titlepage"><h2 class="title">{i}.1. A section</h2></div>
<div class="para">{PROSE}</div><div class="para">{SENTENCES[i % 6]} {PROSE}</div></div>
<ul class="docnav"><li class="previous"><a href="a.html"><strong>Prev</strong>Chapter</a></li>
<li class="home"><a href="index.html"><strong>Home</strong></a></li></ul></body></html>"""


def _docbook_page(i: int) -> str:  # valgrind's customisation: classless divs around the nav tables
    return f"""<html><head><title>{i}. Core</title><meta name="generator" content="DocBook XSL Stylesheets V1.79.2">
</head><body><div><table class="nav" summary="Navigation header"><tr><td><a href="a.html">Prev</a></td>
<th>Valgrind User Manual</th><td><a href="b.html">Next</a></td></tr></table></div>
<div class="chapter"><div class="titlepage"><h1 class="title">{i}. Using the core</h1></div>
<div class="toc"><p><b>Table of Contents</b></p><dl class="toc"><dt><a href="#s">{i}.1. Section</a></dt></dl></div>
<p>{PROSE}</p><div class="itemizedlist"><ul><li><p>{SENTENCES[i % 6]}</p></li><li><p>{SENTENCES[1]}</p></li></ul></div>
<div class="note"><h3 class="title">Note</h3><p>{SENTENCES[2]}</p></div></div>
<div><br><table class="nav" summary="Navigation footer"><tr><td><a href="a.html">&lt;&lt; Introduction</a></td>
<td><a href="m.html">Up</a></td><td><a href="b.html">Advanced topics &gt;&gt;</a></td></tr></table></div>
</body></html>"""


def _makeinfo_page(i: int) -> str:
    return f"""<html><head><title>Node {i}</title><meta name="Generator" content="makeinfo"></head>
<body lang="en"><div class="section" id="Node-{i}"><div class="header"><p>Next: <a href="n.html">Thread
Safety</a>, Previous: <a href="p.html">The Closure API</a>, Up: <a href="u.html">Using libffi</a> &nbsp;
[<a href="Index.html">Index</a>]</p></div><hr><h3 class="section">2.{i} Closure Example</h3><p>{PROSE}</p>
<ul><li> {SENTENCES[i % 6]}</li><li> {SENTENCES[3]}</li></ul></div>
<div class="section" id="Node-{i}-b"><div class="header"><p>Previous: <a href="x.html">Node</a></p></div>
<h3 class="section">2.{i}.1 More</h3><p>{SENTENCES[4]}</p></div></body></html>"""


@pytest.fixture()
def html_corpus(tmp_path: Path) -> Path:
    root = tmp_path / "doc"
    (root / "sphinxdocs" / "html" / "library").mkdir(parents=True)
    (root / "handbook" / "html" / "en-US").mkdir(parents=True)
    (root / "unmarked").mkdir()
    (root / "valgrind" / "html").mkdir(parents=True)
    (root / "libffi" / "html").mkdir(parents=True)
    for i in range(4):
        (root / "sphinxdocs" / "html" / "library" / f"p{i}.html").write_text(_sphinx_page(i))
        (root / "handbook" / "html" / "en-US" / f"c{i}.html").write_text(_publican_page(i))
        (root / "valgrind" / "html" / f"m{i}.html").write_text(_docbook_page(i))
        (root / "libffi" / "html" / f"n{i}.html").write_text(_makeinfo_page(i))
    (root / "sphinxdocs" / "html" / "genindex.html").write_text(_sphinx_page(9))  # index pages: skipped
    (root / "unmarked" / "plain.html").write_text(f"<html><body><p>{PROSE}</p></body></html>")  # no mark
    return root


def test_marked_main_content_is_the_truth(html_corpus: Path):
    mark, main, body = boilerplate_extraction.marked_text(_sphinx_page(1))
    assert mark == "sphinx" and "Section 1 title" in main and "hello" in main
    assert "navigation link" not in main and "Copyright" not in main and "var x" not in body
    mark, main, body = boilerplate_extraction.marked_text(_publican_page(2))
    assert mark == "publican" and "2.1. A section" in main
    assert "Download the ebook" not in main and "Prev" not in main and "Download the ebook" in body
    mark, main, body = boilerplate_extraction.marked_text(_docbook_page(3))
    assert mark == "docbook-xsl" and "3. Using the core" in main and "Table of Contents" in main
    assert SENTENCES[2] in main and "Prev" not in main and "Advanced topics" not in main and "Prev" in body
    mark, main, body = boilerplate_extraction.marked_text(_makeinfo_page(1))  # two nodes, one file
    assert mark == "makeinfo" and "2.1 Closure Example" in main and "2.1.1 More" in main and SENTENCES[4] in main
    assert "Next:" not in main and "Previous:" not in main and "Thread" not in main and "Thread" in body
    # a role=main page without a generator we know is scored, but not as Sphinx
    assert boilerplate_extraction.marked_text(_sphinx_page(1).replace("Docutils", "Hugo"))[0] == "role=main"
    # a generator's meta alone is no mark: its main element must be there too
    assert boilerplate_extraction.marked_text(_docbook_page(1).replace('"chapter"', '"x"'))[0] is None
    assert boilerplate_extraction.marked_text(f"<html><body><p>{PROSE}</p></body></html>")[0] is None
    toks = boilerplate_extraction.tokens("The cat, THE dog 日本語")
    assert toks == {"the": 2, "cat": 1, "dog": 1, "日": 1, "本": 1, "語": 1}
    assert boilerplate_extraction.overlap(toks, boilerplate_extraction.tokens("the cat sat")) == (2, 7, 3)


@_needs("trafilatura")
def test_boilerplate_extraction_both_sides(html_corpus: Path, tmp_path: Path):
    result = _run("boilerplate_extraction", html_corpus, tmp_path / "work")
    spec, fig = result["spec"], _figures(result)
    assert spec["sites"] == {"handbook": 4, "libffi": 4, "sphinxdocs": 4, "valgrind": 4}
    assert spec["skipped_unmarked"] == 1
    assert spec["marks"] == {"docbook-xsl": 4, "makeinfo": 4, "publican": 4, "sphinx": 4}
    assert spec["naive"]["recall"] == 1.0 and spec["naive"]["precision"] < 0.9
    for side in ("ours", "peer"):
        assert fig["precision"][side] > 90.0 and fig["recall"][side] > 50.0, side
        assert fig["throughput"][side] > 0
    ours = result["records"]["ours"][0]
    assert set(ours["per_site"]) == {"handbook", "libffi", "sphinxdocs", "valgrind"}
    assert set(ours["per_generator"]) == {"docbook-xsl", "makeinfo", "publican", "sphinx"}
    for g in boilerplate_extraction.REPORTED_GENERATORS:  # the generator rules read these pages exactly
        assert fig[f"{g} recall"]["ours"] == 100.0 and fig[f"{g} boilerplate kept"]["ours"] < 1.0, g
    assert fig["worst generator's recall"]["ours"] == 100.0
    worst_kept = max(g["boilerplate_kept"] for g in ours["per_generator"].values())
    assert fig["worst generator's boilerplate kept"]["ours"] == pytest.approx(100 * worst_kept)


def test_outputs_are_compared_under_the_baselines_language_labels():
    import pyarrow as pa

    from benchmarks.cleaning_stage import _comparable_exclusions, _comparable_kept, _relabel_keys
    from platform_assets.cleaning.language_id import MACROLANGUAGES
    from platform_assets.cleaning.language_tags import PY3LANGID_LABELS

    # every tag the step reports for a model label that is no model label itself maps back (the folds
    # onto a model label, yue -> zh, cannot: they sum probabilities); Nynorsk `nn` is py3langid's own
    renames = {tag: raw for raw, tag in MACROLANGUAGES.items() if tag not in PY3LANGID_LABELS}
    kept = pa.table({"id": list("abcdefgh"), "lang": ["nb", "en", None, "nn", *renames]})
    assert _comparable_kept(kept).column("lang").to_pylist() == ["no", "en", None, "nn", *renames.values()]
    assert _comparable_kept(kept).column("id").to_pylist() == list("abcdefgh")
    funnel = {"steps": [{"name": "language", "counters": {"lang.nb": 2, "lang.no": 1, "lang.en": 4, "x": 3}}]}
    assert _relabel_keys(funnel) == {"steps": [{"name": "language", "counters": {"lang.no": 3, "lang.en": 4, "x": 3}}]}
    excl = pa.table({"id": ["a", "b", "c"], "rule": ["language.low_confidence", "quality.x", "language.not_allowed"],
                     "value": ["ff:0.02698 < 0.5", "ff:1", "en:0.99"]})
    assert _comparable_exclusions(excl).column("value").to_pylist() == ["fuv:0.02698 < 0.5", "ff:1", "en:0.99"]
