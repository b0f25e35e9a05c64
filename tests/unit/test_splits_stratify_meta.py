"""`splits.stratify_by: meta.<path>` through the split stage over stored outputs: each stratum keeps
its ratios in every split, documents without the field are their own `<missing>` stratum, no document
is in two splits, and a grown corpus keeps every earlier assignment."""

import json
import random

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from platform_assets.dedup.settings import DedupSettings
from platform_assets.schema import DOCUMENTS_SCHEMA, document_id
from platform_assets.splits.settings import SplitSettings
from platform_assets.splits.stage import check_split_leakage, split_outputs
from platform_assets.stats.fields import MISSING
from platform_assets.stats.settings import StatisticsSettings
from platform_assets.storage import Storage

RATIOS = {"train": 0.8, "validation": 0.1, "test": 0.1}
# labels of a CSV source live in meta; 23 documents have no label, 11 have no `annotation` object
SIZES = {"pos": 400, "neg": 97, "neutral": 31, None: 23}


def _docs(rng: random.Random, prefix: str, sizes: dict) -> pa.Table:
    rows = []
    for label, n in sizes.items():
        for i in range(n):
            meta = {"row": i} if label is None else {"annotation": {"label": label, "by": "ann" + str(i % 3)}}
            # every text distinct (dedup ran before the split)
            words = (rng.choice("abcdefghij") * rng.randrange(1, 6) for _ in range(40))
            text = f"{prefix} {label} {i} " + " ".join(words)
            rows.append((text, json.dumps(meta)))
    rows.append((f"{prefix} chat", json.dumps({"messages": [{"role": "user", "content": "hi"}]})))  # no annotation
    n = len(rows)
    uris = [f"{prefix}.csv#row={i}" for i in range(n)]
    return pa.table({
        "id": [document_id("csv", u, t) for u, (t, _) in zip(uris, rows, strict=True)],
        "source": ["csv"] * n, "text": pa.array([t for t, _ in rows], pa.large_string()), "modality": ["text"] * n,
        "uri": uris, "license": pa.nulls(n, pa.string()), "meta": [m for _, m in rows],
        "ingested_at": pa.array([1_700_000_000_000] * n, pa.timestamp("ms", tz="UTC")),
        "media": pa.nulls(n, DOCUMENTS_SCHEMA.field("media").type),
    }, schema=DOCUMENTS_SCHEMA)


def _write(root, rel: str, parts: list[pa.Table]) -> None:
    with Storage(str(root)).staged_dir(rel) as staged:
        for i, t in enumerate(parts):
            with staged.open_output(f"part-{i:05d}.parquet") as f:
                pq.write_table(t, f, row_group_size=100)  # several batches: the keys are read batch by batch


def _labels(table: pa.Table) -> np.ndarray:
    return np.array([json.loads(m).get("annotation", {}).get("label", MISSING) for m in table["meta"].to_pylist()])


def test_stratify_by_a_meta_field_keeps_each_stratum_ratios_and_leaks_nothing(tmp_path):
    rng = random.Random(11)
    _write(tmp_path, "dedup", [_docs(rng, "a", SIZES)])
    settings = SplitSettings(stratify_by="meta.annotation.label", ratios=RATIOS)
    stats = StatisticsSettings(label_field="meta.annotation.label", label_top_k=2)
    result = split_outputs(Storage(str(tmp_path)), "dedup", "splits", settings, statistics=stats)
    out = pq.read_table(tmp_path / "splits")
    ids, splits, labels = out["id"].to_pylist(), np.array(out["split"].to_pylist()), _labels(out)
    assert len(set(ids)) == len(ids) == sum(SIZES.values()) + 1  # each document in exactly one split
    expected_sizes = {"pos": 400, "neg": 97, "neutral": 31, MISSING: 24}  # + the chat document
    for label, n in expected_sizes.items():
        mine = splits[labels == label]
        assert len(mine) == n
        for name, r in RATIOS.items():
            assert abs((mine == name).sum() - r * n) <= 1, (label, name, (mine == name).sum())
    # the 31-document stratum gets 3 validation and 3 test documents; unstratified it would get 0..7 by luck
    neutral = splits[labels == "neutral"]
    assert ((neutral == "validation").sum(), (neutral == "test").sum()) == (3, 3)
    # the report: strata, largest first, <missing> with them; per-split counts as written
    strata = {s["stratum"]: s for s in result.strata}
    assert [s["stratum"] for s in result.strata] == ["pos", "neg", "neutral", MISSING] and result.strata_total == 4
    for label, s in strata.items():
        assert s["documents"] == expected_sizes[label]
        assert all(s[name] == int((splits[labels == label] == name).sum()) for name in RATIOS)
    # labels: top 2 by name, the rest as <other>, <missing> on its own; totals add up to the documents
    rows = {r["label"] or r["bucket"]: r for r in result.labels.table_rows(stats.label_top_k)}
    assert list(rows) == ["pos", "neg", "other", "missing"]
    assert rows["other"]["total"] == 31 and rows["missing"]["total"] == 24
    assert rows["neg"]["validation"] == strata["neg"]["validation"]
    # no duplicate or near duplicate crosses splits (the blocking check of the asset)
    assert check_split_leakage(Storage(str(tmp_path)), "splits", DedupSettings(), settings).ok

    # grown corpus: every earlier document keeps its split, the strata still hold their ratios
    before = dict(zip(ids, splits.tolist(), strict=True))
    _write(tmp_path, "dedup", [pq.read_table(tmp_path / "dedup"), _docs(rng, "b", {"neg": 40, "new": 9, None: 5})])
    split_outputs(Storage(str(tmp_path)), "dedup", "splits", settings, statistics=stats)
    grown = pq.read_table(tmp_path / "splits")
    after = dict(zip(grown["id"].to_pylist(), grown["split"].to_pylist(), strict=True))
    assert all(after[i] == s for i, s in before.items()) and len(after) == len(before) + 55
    g_labels, g_splits = _labels(grown), np.array(grown["split"].to_pylist())
    for label in ("neg", "new", MISSING):
        n = (g_labels == label).sum()
        assert abs((g_splits[g_labels == label] == "validation").sum() - 0.1 * n) <= 1


def test_same_input_same_split_and_bad_field_is_a_clear_error(tmp_path):
    _write(tmp_path, "dedup", [_docs(random.Random(2), "a", {"x": 50, "y": 20})])
    settings = SplitSettings(stratify_by="meta.annotation.label", ratios=RATIOS)
    st = Storage(str(tmp_path))
    split_outputs(st, "dedup", "one", settings)
    split_outputs(st, "dedup", "two", settings)
    read = lambda rel: [p.read_bytes() for p in sorted((tmp_path / rel).glob("part-*.parquet"))]  # noqa: E731
    assert read("one") == read("two")
    with pytest.raises(ValueError, match="splits.stratify_by: field 'labels'"):
        split_outputs(st, "dedup", "bad", SplitSettings(stratify_by="labels"))
    with pytest.raises(ValueError, match="statistics.label_field: field 'lang'"):
        split_outputs(st, "dedup", "bad", SplitSettings(), statistics=StatisticsSettings(label_field="lang"))


def test_unstratified_stage_assigns_batch_by_batch_as_the_whole_table_would(tmp_path):
    """Without stratify_by the stage assigns each batch from its ids (no first pass over all ids): the
    same split per document as assign_splits over the whole table, and counts that add up."""
    from platform_assets.contracts import IOSettings
    from platform_assets.splits.assignment import assign_splits, split_counts

    rng = random.Random(7)
    parts = [_docs(rng, f"p{p}", {"pos": 150, "neg": 90}) for p in range(3)]
    _write(tmp_path, "dedup", parts)
    settings = SplitSettings(seed=11, ratios=RATIOS)
    # 2 KB batches: dozens of batches per part, each assigned on its own
    result = split_outputs(Storage(str(tmp_path)), "dedup", "splits", settings, IOSettings(batch_bytes=2048))
    out = pq.read_table(tmp_path / "splits", columns=["id", "split"])
    whole = pa.concat_tables(parts)
    expected = dict(zip(whole["id"].to_pylist(), assign_splits(whole, settings).to_pylist(), strict=True))
    assert dict(zip(out["id"].to_pylist(), out["split"].to_pylist(), strict=True)) == expected
    assert out.num_rows == whole.num_rows == result.rows
    assert result.counts == split_counts(out["split"]) and min(result.counts.values()) > 0
