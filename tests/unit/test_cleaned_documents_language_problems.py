"""language_problems (the `language_mix_as_configured` check of cleaned_documents), called directly."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from platform_assets.config import parse_config
from platform_assets.defs.cleaned_documents.checks import language_problems
from platform_assets.parquet_parts import part_name
from platform_assets.storage import Storage

# 10 kept documents counted: 4 Bokmål, 1 Nynorsk, 2 simplified Chinese, 1 Han shared by both forms, 1
# Traditional, 1 English caption; a second caption with a low score is label-only: not counted at all
KEPT = [("nb", "Latn", 0.9, "text")] * 4 + [("nn", "Latn", 0.8, "text"), ("zh", "Hans", 0.9, "text"),
                                            ("zh", "Hans", 0.7, "text"), ("zh", "Hani", 0.9, "text"),
                                            ("zh", "Hant", 0.9, "text"), ("en", "Latn", 0.6, "image"),
                                            ("en", "Latn", 0.2, "image")]


def _storage(tmp_path: Path, rows=KEPT) -> Storage:
    storage = Storage(str(tmp_path / "out"))
    langs, scripts, scores, modalities = zip(*rows, strict=True)
    table = pa.table({"id": [f"d{i}" for i in range(len(rows))], "lang": list(langs), "lang_script": list(scripts),
                      "lang_score": pa.array(scores, pa.float32()), "modality": list(modalities)})
    with storage.staged_dir("cleaned") as staged, staged.open_output(part_name(0)) as f:
        pq.write_table(table, f)
    return storage


def _problems(tmp_path: Path, shares: dict, allow=None) -> tuple[list[str], dict]:
    cfg = parse_config({"sources": [{"name": "web", "format": "jsonl", "path": "web"}],
                        "cleaning": {"language": {"allow": allow}},
                        "cleaning_gates": {"language_shares": shares}}, tmp_path)
    return language_problems(_storage(tmp_path), "cleaned", cfg)


def test_shares_within_their_bounds_are_no_problem(tmp_path):
    # no = nb + nn = 5/10; zh-Hans = Hans + shared Han = 3/10; zh-Hant = Hant + shared = 2/10; zh = 4/10
    problems, counts = _problems(tmp_path, {"no": [0.5, 0.5], "zh-Hans": [0.3, 0.3], "zh_hant": [0.2, 0.2],
                                            "ZH": [0.4, 0.4], "en": [0.1, 0.1]})
    assert problems == []
    assert counts == {"nb": 4, "zh": 4, "nn": 1, "en": 1}


@pytest.mark.parametrize(("shares", "expected"), [
    ({"NB": [0.5, 1.0]}, "nb: 40.0% of kept documents, expected 50%-100%"),
    ({"no": [0.0, 0.4]}, "no: 50.0% of kept documents, expected 0%-40%"),
    ({"zh-Hans": [0.0, 0.2]}, "zh-Hans: 30.0% of kept documents, expected 0%-20%"),
    ({"de": [0.1, 1.0]}, "de: 0.0% of kept documents, expected 10%-100%"),  # no German kept: share 0
    ({"nob": [0.5, 1.0], "sv": [0.0, 0.0]}, "nb: 40.0% of kept documents, expected 50%-100%"),
])
def test_shares_outside_their_bounds_are_named(tmp_path, shares, expected):
    problems, _ = _problems(tmp_path, shares)
    assert problems == [expected]


def test_low_scores_and_languages_outside_the_allow_list(tmp_path):
    problems, _ = _problems(tmp_path, {}, allow=["no", "zh-Hans"])
    # the caption's 0.2 is label-only; zh 0.7 is above min_score 0.5: no score problem
    assert problems == ["languages outside the allow-list: {'zh-Hant': 1, 'en-Latn': 1}"]
    low = [("de", "Latn", 0.1, "text"), *KEPT]  # below the lowest band threshold, 0.25
    cfg = parse_config({"sources": [{"name": "web", "format": "jsonl", "path": "web"}]}, tmp_path)
    problems, counts = language_problems(_storage(tmp_path, low), "cleaned", cfg)
    assert problems == ["1 kept documents score below min_score 0.25"] and counts["de"] == 1
