"""The dedup stage end to end on planted duplicates: found, kept deterministically, reported."""

import random
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from platform_assets.dedup.deduplicator import DECISIONS_SCHEMA, DUPLICATES_SCHEMA, Deduplicator, deduplicate
from platform_assets.dedup.settings import DedupSettings
from platform_assets.dedup.signature_store import AcceptedSignatures, SignatureMismatchError
from platform_assets.schema import DOCUMENTS_SCHEMA

VOCAB = [f"word{i}" for i in range(4000)]


def _doc(rng: random.Random, n_words: int = 320) -> str:
    paras = []
    for _ in range(4):
        paras.append(" ".join(rng.choice(VOCAB) for _ in range(n_words // 4)) + ".")
    return "\n\n".join(paras)


def _edit(rng: random.Random, text: str, n: int) -> str:
    words = text.split(" ")
    for _ in range(n):
        words[rng.randrange(len(words))] = "edited"
    return " ".join(words)


def _table(texts, sources=None, ages=None, quality=None, ids=None):
    n = len(texts)
    cols = {
        "id": ids or [f"doc-{i:05d}" for i in range(n)],
        "source": sources or ["web"] * n,
        "text": pa.array(texts, pa.large_string()),
        "modality": ["text"] * n,
        "uri": [f"file:///{i}" for i in range(n)],
        "license": [None] * n,
        "meta": [None] * n,
        "ingested_at": pa.array(
            ages if ages is not None else [1_700_000_000] * n, pa.timestamp("s", tz="UTC")
        ),
        "media": pa.nulls(n, DOCUMENTS_SCHEMA.field("media").type),
    }
    schema = DOCUMENTS_SCHEMA
    if quality is not None:
        cols["quality"] = pa.array(quality, pa.float64())
        schema = schema.append(pa.field("quality", pa.float64()))
    return pa.table(cols, schema=schema)


@pytest.fixture(scope="module")
def planted():
    """40 distinct documents plus planted duplicates of the first ones (each copy is newer)."""
    rng = random.Random(42)
    base = [_doc(rng) for _ in range(40)]
    texts, expect = list(base), {}

    def plant(i, text, kind):
        expect[len(texts)] = (i, kind)
        texts.append(text)

    plant(0, base[0], "exact")
    plant(1, "  " + base[1].upper().replace(" ", "   ") + "\n", "exact")  # case + whitespace
    plant(2, _edit(rng, base[2], 3), "near")  # 3 word edits: J ~ 0.91
    paras = base[3].split("\n\n")
    plant(3, "\n\n".join([paras[2], paras[0], paras[1], paras[3]]), "near")  # paragraphs reordered
    plant(4, "Copyright 2024 Example Corp. All rights reserved.\n" + base[4] + "\nShare this page:", "near")
    plant(5, base[5].replace(".", "!").replace(" ", ", "), "near")  # punctuation only: same tokens
    # controls that must survive: half of a document, and two documents glued (J ~ 0.5 / 0.33)
    half = " ".join(base[6].split(" ")[:160])
    texts += [half, base[7] + " " + base[8]]
    n = len(texts)
    ages = [1_600_000_000 + i for i in range(n)]  # later rows are newer: originals are oldest
    return _table(texts, sources=["web" if i % 2 else "books" for i in range(n)], ages=ages), expect


def test_planted_duplicates_are_found_and_originals_kept(planted):
    table, expect = planted
    kept, result = deduplicate(table, DedupSettings())
    removed = {r["removed_id"]: r for r in result.duplicates.to_pylist()}
    assert set(removed) == {f"doc-{i:05d}" for i in expect}
    for row, (orig, kind) in expect.items():
        r = removed[f"doc-{row:05d}"]
        assert r["kept_id"] == f"doc-{orig:05d}" == r["cluster_id"]
        assert r["rule"] == f"{kind}_duplicate"
        assert r["similarity"] >= 0.8 if kind == "near" else r["similarity"] == 1.0
        assert r["kept_source"] == table["source"][orig].as_py()
    assert kept.num_rows == table.num_rows - len(expect)
    assert result.counts.removed_exact == 2 and result.counts.removed_near == 4
    assert result.counts.kept == kept.num_rows
    assert kept.column_names == table.column_names + ["cluster_id"]
    assert result.decisions.schema == DECISIONS_SCHEMA and result.duplicates.schema == DUPLICATES_SCHEMA


def test_same_output_whatever_the_input_order_and_batching(planted):
    table, _ = planted
    ref_kept, ref = deduplicate(table, DedupSettings())
    rng = np.random.default_rng(3)
    for batch_rows in (7, 1000):
        shuffled = table.take(pa.array(rng.permutation(table.num_rows)))
        kept, res = deduplicate(shuffled, DedupSettings(), batch_rows=batch_rows)
        assert res.duplicates.equals(ref.duplicates)
        assert res.decisions.equals(ref.decisions)
        assert sorted(kept["id"].to_pylist()) == sorted(ref_kept["id"].to_pylist())


@pytest.mark.parametrize(
    ("keep", "expected_kept"),
    [("oldest", "a-old"), ("longest", "c-long"), ("highest_quality", "b-best")],
)
def test_keep_policy_picks_the_cluster_member(keep, expected_kept):
    rng = random.Random(7)
    text = _doc(rng)
    texts = [text, _edit(rng, text, 1), text + " and a few more words at the end"]
    table = _table(texts, ids=["a-old", "b-best", "c-long"], ages=[100, 200, 300], quality=[0.1, 0.9, 0.5])
    kept, result = deduplicate(table, DedupSettings(keep=keep))
    assert kept["id"].to_pylist() == [expected_kept]
    assert set(result.duplicates["kept_id"].to_pylist()) == {expected_kept}


def test_ties_are_broken_by_id():
    text = _doc(random.Random(8))
    table = _table([text] * 3, ids=["z", "m", "b"], ages=[5, 5, 5])
    kept, _ = deduplicate(table, DedupSettings(keep="oldest"))
    assert kept["id"].to_pylist() == ["b"]


def test_missing_policy_column_names_it():
    with pytest.raises(KeyError, match="quality"):
        deduplicate(_table(["a b c"]), DedupSettings(keep="highest_quality"))


def test_bad_input_empty_short_and_huge_documents():
    rng = random.Random(9)
    huge = " ".join(rng.choice(VOCAB) for _ in range(300_000))  # ~3 MB
    texts = ["", "", "   ", "hi", "hi", "one two", huge, huge + " tail", _doc(rng)]
    settings = DedupSettings(near={"shingles": {"max_chars": 50_000}})
    t = time.perf_counter()
    kept, result = deduplicate(_table(texts), settings)
    assert time.perf_counter() - t < 5
    removed = set(result.duplicates["removed_id"].to_pylist())
    # exact: the second empty doc (and whitespace-only: empty after trimming), the second "hi";
    # near: the huge doc with a different tail (only the first 50k chars are compared)
    assert removed == {"doc-00001", "doc-00002", "doc-00004", "doc-00007"}
    assert result.counts.without_shingles == 3


def test_boilerplate_cluster_is_linear_not_quadratic():
    """2,000 copies of one licence, 500 near-copies: each query meets one accepted document."""
    rng = random.Random(10)
    licence = _doc(rng, 200)
    texts = (
        [licence] * 2000 + [f"Project {i}: " + licence for i in range(500)] + [_doc(rng) for _ in range(20)]
    )
    settings = DedupSettings(exact={"enabled": False})  # make the near path carry all of it
    t = time.perf_counter()
    kept, result = deduplicate(_table(texts), settings)
    elapsed = time.perf_counter() - t
    assert kept.num_rows == 21
    assert result.counts.removed_near == 2499
    assert result.counts.lsh_candidates <= 2 * len(texts)  # not ~n^2/2 = 3 M
    assert elapsed < 10
    hist = result.cluster_size_histogram().to_pylist()
    assert hist == [{"cluster_size": 2500, "clusters": 1}]


def test_distinct_documents_are_not_removed():
    rng = random.Random(11)
    texts = [_doc(rng) for _ in range(300)]
    kept, result = deduplicate(_table(texts), DedupSettings())
    assert kept.num_rows == 300 and result.duplicates.num_rows == 0


@pytest.mark.parametrize("verify", ["none", "estimated", "exact"])
def test_verification_modes_find_planted_pairs(planted, verify):
    table, expect = planted
    _, result = deduplicate(table, DedupSettings(near={"verify": verify}))
    removed = set(result.duplicates["removed_id"].to_pylist())
    assert {f"doc-{i:05d}" for i in expect} <= removed
    if verify != "none":
        assert len(removed) == len(expect)


def test_reports_per_source_and_exclusions(planted):
    table, expect = planted
    kept, result = deduplicate(table, DedupSettings())
    per_source = {r["source"]: r for r in result.removed_per_source().to_pylist()}
    assert sum(r["removed"] for r in per_source.values()) == len(expect)
    assert sum(r["documents"] for r in per_source.values()) == table.num_rows
    sources = table["source"].to_pylist()
    books = sum(1 for i in expect if sources[i] == "books")
    assert per_source["books"]["removed"] == books
    excl = result.exclusions()
    assert excl.column_names == ["id", "rule", "value", "bytes", "kept_id", "similarity"]
    assert excl.num_rows == len(expect)
    assert excl["value"].to_pylist() == [f"{s:.4g}" for s in excl["similarity"].to_pylist()]
    assert result.cluster_size_histogram()["clusters"].to_pylist() == [len(expect)]


def test_filter_batch_emits_each_id_once():
    rng = random.Random(12)
    a, b = _doc(rng), _doc(rng)
    table = _table([a, b, a], ids=["x", "y", "x"])  # the same document read twice
    dedup = Deduplicator(DedupSettings())
    dedup.add_batch(table)
    result = dedup.finish()
    assert result.counts.duplicate_ids == 1
    out = [result.filter_batch(table.slice(i, 1)) for i in range(3)]
    assert [t["id"].to_pylist() for t in out] == [["x"], ["y"], []]
    with pytest.raises(ValueError):
        result.filter_batch(_table(["never seen"], ids=["new"]))


def test_incremental_new_source_against_accepted_artifact(tmp_path):
    rng = random.Random(13)
    old = [_doc(rng) for _ in range(30)]
    settings = DedupSettings(incremental=True)
    _, first = deduplicate(_table(old, sources=["old"] * 30, ages=[9_000] * 30), settings)
    path = tmp_path / "signatures.parquet"
    pq.write_table(first.accepted.to_table(settings), path)
    accepted = AcceptedSignatures.from_table(pq.read_table(path), settings)
    assert np.array_equal(accepted.signatures, first.accepted.signatures)

    new = [old[0], _edit(rng, old[1], 2), _doc(rng), _doc(rng)]
    new.append(new[2])  # a duplicate inside the new source, too
    calls = []
    dedup = Deduplicator(settings, accepted)
    original = dedup.minhasher.signatures
    dedup.minhasher.signatures = lambda sh: calls.append(sh.n_docs) or original(sh)
    # the new documents are older: in a full run they would win, incrementally accepted ones stay
    new_table = _table(new, sources=["new"] * 5, ids=[f"new-{i}" for i in range(5)], ages=[1] * 5)
    dedup.add_batch(new_table)
    result = dedup.finish()
    assert sum(calls) == 5  # only the new documents were signed: the index came from the artifact
    dups = {r["removed_id"]: r for r in result.duplicates.to_pylist()}
    assert set(dups) == {"new-0", "new-1", "new-4"}
    assert dups["new-0"]["kept_id"] == "doc-00000" and dups["new-0"]["kept_in_earlier_run"]
    assert dups["new-1"]["kept_id"] == "doc-00001" and dups["new-1"]["rule"] == "near_duplicate"
    assert dups["new-4"]["kept_id"] == "new-2" and not dups["new-4"]["kept_in_earlier_run"]
    assert len(result.accepted) == 32 and result.accepted.ids.to_pylist()[-2:] == ["new-2", "new-3"]
    assert result.counts.removed_against_earlier_runs == 2


def test_artifact_from_other_settings_is_refused():
    settings = DedupSettings()
    _, result = deduplicate(_table([_doc(random.Random(14))]), settings)
    table = result.accepted.to_table(settings)
    other = DedupSettings(near={"num_perm": 64})
    with pytest.raises(SignatureMismatchError, match="num_perm"):
        AcceptedSignatures.from_table(table, other)
    with pytest.raises(SignatureMismatchError, match="shingles"):
        AcceptedSignatures.from_table(table, DedupSettings(near={"shingles": {"size": 3}}))


def test_exclusions_of_an_earlier_run_are_carried_into_the_shared_schema():
    """An incremental run after the exclusions schema gained its shared columns: the earlier run's
    table (value = similarity as float64, no tag) is converted, not refused and not misread."""
    from platform_assets.dedup.deduplicator import EXCLUSIONS_SCHEMA
    from platform_assets.dedup.stage import _previous_exclusions

    old = pa.table({"id": ["a", "b"], "rule": ["near_duplicate", "exact_duplicate"],
                    "value": pa.array([0.8125, 1.0]), "kept_id": ["k", "k"]})
    new = _previous_exclusions(old)
    assert new.schema == EXCLUSIONS_SCHEMA
    assert new.to_pylist() == [
        {"id": "a", "rule": "near_duplicate", "value": "0.8125", "bytes": None, "kept_id": "k", "similarity": 0.8125},
        {"id": "b", "rule": "exact_duplicate", "value": "1", "bytes": None, "kept_id": "k", "similarity": 1.0},
    ]
    assert _previous_exclusions(new) is new
