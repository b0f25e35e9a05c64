"""The step contract: per-document decisions become a kept batch, exclusion records and exact counts."""

from __future__ import annotations

import random
from collections import Counter

import pyarrow as pa
import pytest
from document_batches import documents_batch

from platform_assets.cleaning.guard import Guard
from platform_assets.cleaning.settings import GuardSettings
from platform_assets.cleaning.steps import EXCLUSIONS_SCHEMA, Doc, DocumentStep, Drop, StepStats
from platform_assets.schema import DOCUMENTS_SCHEMA


def batch(texts, modalities=None, ids=None, schema=DOCUMENTS_SCHEMA) -> pa.RecordBatch:
    uris = [f"file://x#{i}" for i in range(len(texts))]
    return documents_batch(texts, modalities=modalities, ids=ids, source="src", uris=uris, schema=schema)


class Shout(DocumentStep):
    """Test step: upper-cases texts, removes those containing 'spam', adds a length column, can raise."""

    name = "shout"
    added_fields = (pa.field("n_chars", pa.int64()),)

    def process(self, doc: Doc, counters: Counter[str]) -> Drop | None:
        if "boom" in doc.text:
            raise RuntimeError("exploded")
        if "spam" in doc.text:
            return Drop("spam", f"{doc.text.count('spam')} > 0")
        counters["seen"] += 1
        doc.text = doc.text.upper()
        doc.out["n_chars"] = len(doc.text)
        return None


def test_kept_batch_exclusions_and_counts():
    b = batch(["hello", "spam spam", "héllo wörld", "no spam"])
    r = Shout()(b)
    assert r.kept.column("text").to_pylist() == ["HELLO", "HÉLLO WÖRLD"]
    assert r.kept.column("id").to_pylist() == ["d0", "d2"]
    assert r.kept.column("n_chars").to_pylist() == [5, 11]
    assert r.kept.schema.names == DOCUMENTS_SCHEMA.names + ["n_chars"]
    # the document schema's metadata (its version tag) survives
    assert r.kept.schema.metadata == DOCUMENTS_SCHEMA.metadata
    assert r.exclusions.schema == EXCLUSIONS_SCHEMA
    assert r.exclusions.to_pylist() == [
        {"id": "d1", "rule": "shout.spam", "value": "2 > 0", "bytes": 9},
        {"id": "d3", "rule": "shout.spam", "value": "1 > 0", "bytes": 7},
    ]
    s = r.stats
    assert (s.docs_in, s.docs_out, s.docs_removed, s.modified) == (4, 2, 2, 2)
    assert s.bytes_in == 5 + 9 + len("héllo wörld".encode()) + 7
    assert s.bytes_out == 5 + len("HÉLLO WÖRLD".encode())
    assert s.removed_docs == {"shout.spam": 2} and s.removed_bytes == {"shout.spam": 16}
    assert s.bytes_in == s.bytes_out + s.bytes_removed + s.bytes_rewritten
    assert s.counters["seen"] == 2


def test_modality_and_language_gates_skip_documents_unchanged():
    step = Shout(modalities=["html"])
    r = step(batch(["a", "b spam", "c"], modalities=["text", "html", "html"]))
    assert r.kept.column("text").to_pylist() == ["a", "C"]
    assert r.kept.column("n_chars").to_pylist() == [None, 1]  # skipped rows get nulls in added columns
    assert r.stats.skipped == 1
    lang_batch = batch(["x", "y"]).append_column("lang", pa.array(["en", "de"]))
    r = Shout(languages=["de"])(lang_batch)
    assert r.kept.column("text").to_pylist() == ["x", "Y"] and r.stats.skipped == 1


def test_an_exception_removes_that_document_only_or_raises_when_asked():
    r = Shout()(batch(["fine", "boom", "also fine"]))
    assert r.kept.num_rows == 2
    (row,) = r.exclusions.to_pylist()
    assert row["rule"] == "shout.error" and row["value"] == "RuntimeError: exploded"
    with pytest.raises(RuntimeError):
        Shout(on_error="raise")(batch(["boom"]))


def test_empty_batch_keeps_schema_and_counts_nothing():
    r = Shout()(batch([]))
    assert r.kept.num_rows == 0 and "n_chars" in r.kept.schema.names
    assert r.exclusions.num_rows == 0 and r.exclusions.schema == EXCLUSIONS_SCHEMA
    assert (r.stats.docs_in, r.stats.bytes_in) == (0, 0)


def test_rerunning_a_step_replaces_its_added_column():
    once = Shout()(batch(["ab"])).kept
    twice = Shout()(once).kept
    assert twice.schema.names.count("n_chars") == 1 and twice.column("n_chars").to_pylist() == [2]


def test_stats_merge_adds_up_and_refuses_other_steps():
    a, b = StepStats("x", docs_in=2, docs_out=1), StepStats("x", docs_in=3, docs_out=3)
    a.removed_docs["x.r"] += 1
    b.counters["c"] += 4
    a.merge(b)
    assert (a.docs_in, a.docs_out, a.docs_removed, a.counters["c"]) == (5, 4, 1, 4)
    with pytest.raises(ValueError):
        a.merge(StepStats("y"))


# -- the guard -------------------------------------------------------------------------------------------


def test_guard_removes_empty_whitespace_and_null_texts():
    schema = DOCUMENTS_SCHEMA.set(2, pa.field("text", pa.large_string(), nullable=True))
    r = Guard()(batch(["", "  \n\t\u00a0 ", None, "ok"], schema=schema))
    assert r.kept.column("text").to_pylist() == ["ok"]
    rules = {row["id"]: (row["rule"], row["value"]) for row in r.exclusions.to_pylist()}
    assert rules == {
        "d0": ("guard.empty", "0 bytes of whitespace"),
        "d1": ("guard.empty", "7 bytes of whitespace"),
        "d2": ("guard.empty", "null"),
    }


def test_guard_removes_a_50_mb_one_line_document_without_reading_it_in_python():
    huge = "x" * 50_000_000
    r = Guard()(batch([huge, "small"]))
    assert r.kept.column("id").to_pylist() == ["d1"]
    assert r.exclusions.to_pylist() == [
        {"id": "d0", "rule": "guard.too_large", "value": "50000000 > 4194304", "bytes": 50_000_000}
    ]
    assert r.stats.seconds < 2.0  # Arrow kernels over the column; the text never becomes a str


def test_guard_binary_junk_is_removed_and_real_text_in_any_script_kept():
    rng = random.Random(7)
    junk = bytes(rng.getrandbits(8) for _ in range(4000))
    texts = [
        junk.decode("utf-8", "replace"),  # ~50% U+FFFD
        junk.decode("latin-1"),  # ~12% C0 controls
        "\x00" * 10 + "a" * 10,
        "Ordinary text.\tWith a tab\r\nand a form feed\f.",
        "日本語のテキストです。" * 20,
        "😀🎉 emoji only",
        "a" + "\x07" * 5 + "b" * 100,  # 5 controls in 106 chars: under 10%
    ]
    r = Guard()(batch(texts))
    removed = {row["id"]: row["rule"] for row in r.exclusions.to_pylist()}
    assert removed == {"d0": "guard.binary", "d1": "guard.binary", "d2": "guard.binary"}
    assert r.exclusions.to_pylist()[2]["value"] == "0.5 > 0.1"


def test_guard_thresholds_are_configurable():
    g = Guard(GuardSettings(max_bytes=10, max_binary_ratio=0.5))
    r = g(batch(["0123456789", "01234567890", "\x00\x01abcd"]))
    assert r.kept.column("id").to_pylist() == ["d0", "d2"]
    assert r.exclusions.column("value").to_pylist() == ["11 > 10"]
