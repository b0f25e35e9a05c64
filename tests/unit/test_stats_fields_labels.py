"""Record fields (`source`, `meta.label`, `meta.a.b`) and the label distribution built on them."""

import json

import pyarrow as pa
import pytest
from pydantic import ValidationError

from platform_assets.splits.settings import SplitSettings
from platform_assets.stats.fields import MISSING, FieldPath, field_values
from platform_assets.stats.labels import MISSING_BUCKET, OTHER, OVERFLOW, LabelCounts
from platform_assets.stats.report import labels_markdown
from platform_assets.stats.settings import StatisticsSettings

META = [
    json.dumps({"label": "spam", "annotation": {"class": "b", "score": 0.5}}),
    json.dumps({"label": 3, "annotation": {"class": ["x", "y"]}}),
    json.dumps({"label": True, "annotation": "flat"}),  # annotation is not an object: no class in it
    json.dumps({"other": 1}),
    None,
    "{not json",
    json.dumps({"label": None}),
    '{"l\\u0061bel": "esc\\u00e9"}',  # JSON may spell the key with escapes: still found
    json.dumps({"label": {"b": 1, "a": [2]}}),
    json.dumps(["label"]),  # not an object
]


def _batch():
    return pa.record_batch({"id": [f"d{i}" for i in range(len(META))], "lang": ["en", None] * 5, "meta": META})


def test_meta_paths_and_columns_read_as_strings_missing_as_null():
    batch = _batch()
    label = field_values(batch, FieldPath.parse("meta.label", batch.schema.names))
    assert label.to_pylist() == ["spam", "3", "true", None, None, None, None, "esc\u00e9", '{"a":[2],"b":1}', None]
    cls = field_values(batch, FieldPath.parse("meta.annotation.class", batch.schema.names))
    assert cls.to_pylist() == ["b", '["x","y"]', None, None, None, None, None, None, None, None]
    assert field_values(batch, FieldPath.parse("lang", batch.schema.names)).to_pylist() == ["en", None] * 5
    ints = pa.record_batch({"bucket": pa.array([1, None], pa.int64())})
    assert field_values(ints, FieldPath.parse("bucket", ["bucket"])).to_pylist() == ["1", None]


def test_skipping_json_parsing_never_loses_a_key():
    """Texts without the key's literal form are skipped unparsed unless an escape could spell it."""
    meta = [json.dumps({"note": "caf\u00e9 \u4e2d", "label": "x"}),  # non-ASCII escaped, the key literal
            json.dumps({"note": "caf\u00e9"}),  # skipped: no key, no ASCII escape
            '{"\\u006cabel": "y"}',  # the key spelled with an ASCII escape: parsed, found
            json.dumps({"\u00e9t\u00e9": "summer"}, ensure_ascii=True),  # a non-ASCII key, escaped
            json.dumps({"\u00e9t\u00e9": "winter"}, ensure_ascii=False)]  # and raw
    batch = pa.record_batch({"meta": meta})
    assert field_values(batch, FieldPath("meta", ("label",))).to_pylist() == ["x", None, "y", None, None]
    assert field_values(batch, FieldPath("meta", ("\u00e9t\u00e9",))).to_pylist() == [None, None, None, "summer",
                                                                                  "winter"]


def test_struct_meta_is_read_too():
    struct = pa.record_batch({"meta": pa.array([{"label": "a", "n": 1}, None, {"label": None, "n": 2}])})
    assert field_values(struct, FieldPath("meta", ("label",))).to_pylist() == ["a", None, None]


def test_bad_field_specs_are_clear_errors():
    names = ["id", "meta"]
    with pytest.raises(ValueError, match="no such column"):
        FieldPath.parse("lang", names)
    with pytest.raises(ValueError, match="has no 'meta' column"):
        FieldPath.parse("meta.label", ["id"])
    with pytest.raises(ValueError, match="empty key"):
        FieldPath.parse("meta..label", names)
    with pytest.raises(ValidationError, match="empty key"):
        SplitSettings(stratify_by="meta.label.")
    with pytest.raises(ValidationError, match="without spaces"):
        StatisticsSettings(label_field=" meta.label")
    with pytest.raises(ValueError, match="not JSON text or a struct"):
        field_values(pa.record_batch({"meta": pa.array([1])}), FieldPath("meta", ("label",)))


def test_label_counts_top_k_other_missing_per_split():
    path = FieldPath("meta", ("label",))
    counts = LabelCounts(path, max_distinct=100)
    labels = ["a"] * 5 + ["b"] * 3 + ["c"] * 2 + ["d"] + [None] * 2
    splits = ["train", "validation"] * 6 + ["test"]
    meta = [None if x is None else json.dumps({"label": x}) for x in labels]
    counts.add_batch(pa.record_batch({"meta": meta[:7]}), pa.array(splits[:7]))
    counts.add_batch(pa.record_batch({"meta": meta[7:]}), pa.array(splits[7:]))
    rows = counts.table_rows(2)
    # by hand: a at rows 0-4 -> train 0,2,4 / validation 1,3; b at 5-7 -> validation 5,7 / train 6;
    # c at 8,9 -> train 8 / validation 9; d at 10 -> train; missing at 11 (validation), 12 (test)
    assert rows == [
        {"label": "a", "train": 3, "validation": 2, "test": 0, "total": 5},
        {"label": "b", "train": 1, "validation": 2, "test": 0, "total": 3},
        {"label": None, "bucket": OTHER.value, "train": 2, "validation": 1, "test": 0, "total": 3},
        {"label": None, "bucket": MISSING_BUCKET.value, "train": 0, "validation": 1, "test": 1, "total": 2},
    ]
    assert sum(r["total"] for r in rows) == len(labels)
    md = labels_markdown(counts, 2)
    assert "| label | train | validation | test | total |" in md and "| _(no label)_ | 0 | 1 | 1 | 2 |" in md
    assert md.count("data:image/svg+xml;base64,") == 1 and not counts.truncated
    assert counts.to_dict(2)["distinct_labels"] == 4


def test_distinct_labels_are_capped_and_the_report_says_so():
    counts = LabelCounts(FieldPath("label"), max_distinct=3)
    ids = [f"id{i}" for i in range(10)]
    counts.add_batch(pa.record_batch({"label": ids[:5] + ["id0"]}), pa.array(["train"] * 6))
    counts.add_batch(pa.record_batch({"label": ids[5:] + ["id1"]}), pa.array(["test"] * 6))
    # sorted per batch: id0, id1, id2 counted by name (id0 twice), the rest together
    assert counts.counts["train"] == {"id0": 2, "id1": 1, "id2": 1, OVERFLOW: 2}
    assert counts.counts["test"] == {"id1": 1, OVERFLOW: 5}
    assert counts.table_rows(10)[-1] == {"label": None, "bucket": OVERFLOW.value, "train": 2, "test": 5, "total": 7}
    assert counts.truncated and sum(r["total"] for r in counts.table_rows(10)) == 12
    assert "more than 3 distinct labels" in labels_markdown(counts, 10)


def test_a_real_label_spelled_like_a_bucket_stays_apart_from_it():
    """Documents labelled "<missing>", "<other>" or "(no label)" are labels; documents without one are not."""
    counts = LabelCounts(FieldPath("label"), max_distinct=100)
    labels = [MISSING, MISSING, None, "(no label)", "<other>", "a", "a", "a", "b"]
    counts.add_batch(pa.record_batch({"label": pa.array(labels, pa.string())}), pa.array(["train"] * len(labels)))
    rows = counts.table_rows(3)
    assert rows == [
        {"label": "a", "train": 3, "total": 3},
        {"label": MISSING, "train": 2, "total": 2},
        {"label": "(no label)", "train": 1, "total": 1},
        {"label": None, "bucket": OTHER.value, "train": 2, "total": 2},  # "<other>" and "b"
        {"label": None, "bucket": MISSING_BUCKET.value, "train": 1, "total": 1},
    ]
    assert counts.top(10) == ["a", MISSING, "(no label)", "<other>", "b"]
    md = labels_markdown(counts, 3)
    assert f"| {MISSING} | 2 | 2 |" in md and "| (no label) | 1 | 1 |" in md and "| _(no label)_ | 1 | 1 |" in md
    assert json.loads(json.dumps(counts.to_dict(3)))["rows"] == rows
