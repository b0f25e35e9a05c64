"""Language identification accuracy: ours (py3langid + macrolanguage folding) vs langid.py.

Input: `--corpus` is the labelled set `manpages_langid.jsonl` (or a directory holding it, e.g.
../shared/data/langid): 3,200 paragraphs of translated Debian man pages, 16 languages x 200, mean
200 characters, one JSON object a line with `text` and `lang` (a locale: `cs`, `pt_BR`, `zh_TW`).

The expected answer is the locale's language (`pt_BR` -> pt, `zh_CN`/`zh_TW` -> zh): a language
filter keeps or drops languages, not regional variants or scripts.

- ours: `platform_assets.cleaning.language_id.LanguageIdentifier` with the stage's default settings
  (first 2,048 characters, individual languages folded into their ISO 639 macrolanguage: Cantonese
  and Wu -> zh, ...), as the language step runs it;
- peer: `langid.classify` from langid.py 1.1.6 (Lui & Baldwin 2012; the model py3langid was forked
  from, 97 languages, shipped in the wheel), as a user would call it. datatrove's LanguageFilter
  needs fastText's lid.176 model, a download: no offline peer there.

Figures: accuracy over all paragraphs; the worst language's accuracy; per-language accuracy and the
most frequent wrong answers are in the JSON result (`per_lang`). Speed: paragraphs per second of
the classification alone (models load in the untimed setup).
"""

from __future__ import annotations

import json
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

FILE_NAME = "manpages_langid.jsonl"


def expected_language(label: str) -> str:
    """The language a filter should report for a locale label: `pt_BR` -> `pt`, `zh_TW` -> `zh`."""
    return label.replace("-", "_").split("_")[0].lower()


def find_file(corpus: Path) -> Path:
    if corpus.is_file():
        return corpus
    for candidate in (corpus / FILE_NAME, corpus / "langid" / FILE_NAME):
        if candidate.is_file():
            return candidate
    raise BenchmarkError(f"no {FILE_NAME} in {corpus} (pass the file or its directory)")


def prepare(corpus: Path, run_dir: Path) -> Spec:
    path = find_file(corpus)
    labels: dict[str, int] = {}
    n = size = 0
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            obj = json.loads(line)
            labels[obj["lang"]] = labels.get(obj["lang"], 0) + 1
            size += len(obj["text"].encode("utf-8"))
            n += 1
    if not n:
        raise BenchmarkError(f"{path} holds no paragraphs")
    return {"file": str(path), "paragraphs": n, "input_bytes": size, "labels": labels}


def describe(spec: Spec) -> str:
    langs = sorted({expected_language(x) for x in spec["labels"]})
    return (f"{spec['paragraphs']:,} paragraphs, {spec['input_bytes'] / MB:.2f} MB, "
            f"{len(spec['labels'])} labels -> {len(langs)} languages ({', '.join(langs)})")


def load(spec: Spec) -> tuple[list[str], list[str]]:
    texts, labels = [], []
    with open(spec["file"], encoding="utf-8") as f:
        for line in f:
            if line.strip():
                obj = json.loads(line)
                texts.append(obj["text"])
                labels.append(obj["lang"])
    return texts, labels


def score(labels: list[str], predicted: list[str]) -> dict[str, Any]:
    per: dict[str, dict[str, Any]] = {}
    for label, got in zip(labels, predicted, strict=True):
        want = expected_language(label)
        entry = per.setdefault(label, {"expected": want, "n": 0, "correct": 0, "wrong": {}})
        entry["n"] += 1
        if got == want:
            entry["correct"] += 1
        else:
            entry["wrong"][got] = entry["wrong"].get(got, 0) + 1
    for entry in per.values():
        entry["accuracy"] = entry["correct"] / entry["n"]
        entry["wrong"] = dict(sorted(entry["wrong"].items(), key=lambda kv: -kv[1])[:5])
    # languages, not labels: pt and pt_BR together, zh_CN and zh_TW together
    by_lang: dict[str, list[int]] = {}
    for entry in per.values():
        acc = by_lang.setdefault(entry["expected"], [0, 0])
        acc[0] += entry["correct"]
        acc[1] += entry["n"]
    correct = sum(e["correct"] for e in per.values())
    return {
        "paragraphs": len(labels),
        "correct": correct,
        "accuracy": correct / len(labels),
        "worst_label": min(per, key=lambda k: per[k]["accuracy"]),
        "worst_accuracy": min(e["accuracy"] for e in per.values()),
        "per_label": dict(sorted(per.items())),
        "per_language": {k: v[0] / v[1] for k, v in sorted(by_lang.items())},
    }


def run_ours(spec: Spec, run_dir: Path) -> Prepared:
    from platform_assets.cleaning.language_id import LanguageIdentifier
    from platform_assets.cleaning.settings import LanguageSettings

    texts, labels = load(spec)
    settings = LanguageSettings()
    ident = LanguageIdentifier(settings.max_chars, settings.fold_macrolanguages)
    ident.predict("warm up")

    def work():
        return [ident.predict(t)[0] for t in texts]

    return Prepared(work, lambda predicted: score(labels, predicted))


def run_peer(spec: Spec, run_dir: Path) -> Prepared:
    import langid

    texts, labels = load(spec)
    langid.classify("warm up")  # loads the model (untimed)

    def work():
        return [langid.classify(t)[0] for t in texts]

    return Prepared(work, lambda predicted: score(labels, predicted))


BENCHMARK = Benchmark(
    name="langid_accuracy",
    description="language ID accuracy on 3,200 labelled man-page paragraphs (16 languages)",
    ours_label="platform_assets.cleaning.language_id.LanguageIdentifier (py3langid 0.4.0, macrolanguages "
               "folded, first 2,048 chars)",
    peer_label="langid.py 1.1.6 langid.classify (97-language model shipped in the wheel)",
    prepare=prepare,
    ours=run_ours,
    peer=run_peer,
    metrics=(
        Metric("accuracy", "%", True, lambda r, s: 100.0 * r["accuracy"], "{:.2f}"),
        Metric("worst label's accuracy", "%", True, lambda r, s: 100.0 * r["worst_accuracy"], "{:.1f}"),
        Metric("speed", "paragraphs/s", True, lambda r, s: r["paragraphs"] / r["seconds"], "{:,.0f}"),
        peak_rss_metric(),
    ),
    packages=("platform-assets", "py3langid", "langid", "numpy"),
    targets=(Target("accuracy", "accuracy at least 97% over the 16 languages", min_ours=97.0),),
    env={"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"},
    describe=describe,
)
