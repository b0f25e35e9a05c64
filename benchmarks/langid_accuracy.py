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

Short texts (issue #17): with `LANGID_SHORT_SET` naming the NAME-line set that
benchmarks/langid_shortset.py builds (titles of 1-15 words), ours also runs the language step itself
over it twice, untimed: `before` with one threshold for every length (min_score 0.5, no script check:
the step as it was) and `after` with the default settings (length bands, script check). Per length
band (1-3, 4-10, >10 words) and per language: label accuracy, the share of lines the step keeps, the
share of correctly labelled lines it keeps, and the accuracy of what it keeps (`short_texts` in the
JSON; `python -m benchmarks.langid_accuracy SHORT_SET` prints the same as Markdown, no harness).
"""

from __future__ import annotations

import json
import os
import sys
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
SHORT_SET_ENV = "LANGID_SHORT_SET"
BANDS = ((3, "1-3"), (10, "4-10"))  # (at most N words, name); longer: ">10"


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
    short = os.environ.get(SHORT_SET_ENV)
    if short and not Path(short).is_file():
        raise BenchmarkError(f"{SHORT_SET_ENV}={short}: no such file (build it with benchmarks/langid_shortset.py)")
    return {"file": str(path), "paragraphs": n, "input_bytes": size, "labels": labels,
            "short_file": short or None}


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


def band_name(words: int) -> str:
    return next((name for limit, name in BANDS if words <= limit), f">{BANDS[-1][0]}")


def load_short(path: str | Path) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def short_text_report(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The language step over the short set, as it was (`before`) and with its defaults (`after`)."""
    import pyarrow as pa

    from platform_assets.cleaning.language_bands import count_words
    from platform_assets.cleaning.language_id import LanguageFilter
    from platform_assets.cleaning.settings import LanguageSettings

    configs = {
        "before": LanguageSettings(min_score_by_words={}, min_script_share=0.0),
        "after": LanguageSettings(),
    }
    ids = [f"s{i}" for i in range(len(rows))]
    batch = pa.RecordBatch.from_pydict({"id": ids, "text": [r["text"] for r in rows]})
    out: dict[str, Any] = {"lines": len(rows), "settings": {}, "bands": {}, "languages": {}}
    for name, settings in configs.items():
        out["settings"][name] = {"min_score": settings.min_score,
                                 "min_score_by_words": {str(k): v for k, v in settings.min_score_by_words.items()},
                                 "min_script_share": settings.min_script_share}
        # the label with no threshold: what the model says, after the script check
        labels = LanguageFilter(settings.model_copy(update={"min_score": 0.0, "min_score_by_words": {}}))(batch)
        labelled = dict(zip(labels.kept.column("id").to_pylist(), labels.kept.column("lang").to_pylist(),
                            strict=True))  # a label refused by the script check: removed, so not correct
        kept = set(LanguageFilter(settings)(batch).kept.column("id").to_pylist())
        groups: dict[tuple[str, str], list[int]] = {}
        for i, row in enumerate(rows):
            for key in (("bands", band_name(count_words(row["text"]))), ("languages", expected_language(row["lang"]))):
                groups.setdefault(key, []).append(i)
            groups.setdefault(("bands", "all"), []).append(i)
        for (kind, key), members in sorted(groups.items()):
            correct = [i for i in members if labelled.get(ids[i]) == expected_language(rows[i]["lang"])]
            kept_members = [i for i in members if ids[i] in kept]
            kept_correct = [i for i in correct if ids[i] in kept]
            out[kind].setdefault(key, {"lines": len(members)})[name] = {
                "accuracy": len(correct) / len(members),
                "kept": len(kept_members) / len(members),
                "correct_kept": len(kept_correct) / len(correct) if correct else None,
                "kept_accuracy": len(kept_correct) / len(kept_members) if kept_members else None,
            }
    out["sweep"] = threshold_sweep(rows, labels, ids)
    return out


SWEEP = tuple(round(0.05 * k, 2) for k in range(1, 11))  # 0.05 .. 0.5


def threshold_sweep(rows: list[dict[str, Any]], labelled, ids: list[str]) -> dict[str, Any]:
    """Per length band and threshold: the share of correctly labelled lines kept, the accuracy of
    those kept, and the share of right decisions (correct lines kept + wrong ones removed), labels
    from the step with no threshold (script check on). The defaults of `min_score_by_words` are, per
    band, the threshold with the most right decisions, the highest one among those within 0.5% of
    the band's lines of the best (fewer wrong labels kept for the same count)."""
    from platform_assets.cleaning.language_bands import count_words

    got = dict(zip(labelled.kept.column("id").to_pylist(),
                   zip(labelled.kept.column("lang").to_pylist(), labelled.kept.column("lang_score").to_pylist(),
                       strict=True), strict=True))
    bands: dict[str, list[tuple[bool, float]]] = {}
    for row, doc_id in zip(rows, ids, strict=True):
        lang, score = got.get(doc_id, ("und", 0.0))
        bands.setdefault(band_name(count_words(row["text"])), []).append(
            (lang == expected_language(row["lang"]), score))
    out: dict[str, Any] = {}
    for band, items in sorted(bands.items()):
        n_correct = sum(ok for ok, _ in items)
        out[band] = {}
        for threshold in SWEEP:
            kept = [ok for ok, score in items if score >= threshold]
            removed_wrong = sum(not ok for ok, score in items if score < threshold)
            out[band][str(threshold)] = {
                "right_decisions": (sum(kept) + removed_wrong) / len(items),
                "correct_kept": sum(kept) / n_correct if n_correct else None,
                "kept_accuracy": sum(kept) / len(kept) if kept else None,
            }
    return out


def format_short_report(report: dict[str, Any]) -> str:
    def pct(x: float | None) -> str:
        return "-" if x is None else f"{100 * x:.1f}%"

    lines = []
    for kind, title in (("bands", "length band (words)"), ("languages", "language")):
        lines += [f"| {title} | lines | accuracy before / after | kept before / after | correct kept "
                  "before / after | kept accuracy before / after |", "|---|---:|---|---|---|---|"]
        for key, entry in report[kind].items():
            b, a = entry["before"], entry["after"]
            lines.append(f"| {key} | {entry['lines']} | {pct(b['accuracy'])} / {pct(a['accuracy'])} | "
                         f"{pct(b['kept'])} / {pct(a['kept'])} | {pct(b['correct_kept'])} / "
                         f"{pct(a['correct_kept'])} | {pct(b['kept_accuracy'])} / {pct(a['kept_accuracy'])} |")
        lines.append("")
    lines += ["Threshold sweep (after: script check on): correct kept / kept accuracy / right decisions", "",
              "| band | " + " | ".join(map(str, SWEEP)) + " |", "|---|" + "---|" * len(SWEEP)]
    for band, row in report["sweep"].items():
        lines.append(f"| {band} | " + " | ".join(
            f"{pct(row[str(t)]['correct_kept'])} / {pct(row[str(t)]['kept_accuracy'])} / "
            f"{pct(row[str(t)]['right_decisions'])}" for t in SWEEP) + " |")
    return "\n".join(lines)


def run_ours(spec: Spec, run_dir: Path) -> Prepared:
    from platform_assets.cleaning.language_id import LanguageIdentifier
    from platform_assets.cleaning.settings import LanguageSettings

    texts, labels = load(spec)
    settings = LanguageSettings()
    ident = LanguageIdentifier(settings.max_chars, settings.fold_macrolanguages)
    ident.predict("warm up")

    def work():
        return [ident.predict(t)[0] for t in texts]

    def finish(predicted: list[str]) -> dict[str, Any]:
        result = score(labels, predicted)
        if spec.get("short_file"):
            result["short_texts"] = short_text_report(load_short(spec["short_file"]))
        return result

    return Prepared(work, finish)


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


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: python -m benchmarks.langid_accuracy SHORT_SET.jsonl")
    print(format_short_report(short_text_report(load_short(sys.argv[1]))))
