"""The dedup stage with `near.method: simhash`: planted near duplicates removed with their rule and
distance, the same output for any batching and either storage, the incremental artifact."""

import random

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from platform_assets.dedup.deduplicator import NEAR_SIMHASH, Deduplicator, deduplicate
from platform_assets.dedup.settings import DedupSettings
from platform_assets.dedup.shingles import shingle_hashes
from platform_assets.dedup.signature_store import AcceptedSignatures, SignatureMismatchError
from platform_assets.dedup.simhash import SimHasher, hamming
from platform_assets.schema import DOCUMENTS_SCHEMA

SIMHASH = {"method": "simhash"}
VOCAB = [f"word{i}" for i in range(4000)]


def _table(texts, sources=None, ages=None, ids=None) -> pa.Table:
    n = len(texts)
    return pa.table({
        "id": ids or [f"doc-{i:05d}" for i in range(n)],
        "source": sources or ["web"] * n,
        "text": pa.array(texts, pa.large_string()),
        "modality": ["text"] * n,
        "uri": [f"file:///{i}" for i in range(n)],
        "license": [None] * n,
        "meta": [None] * n,
        "ingested_at": pa.array(ages if ages is not None else [1_700_000_000] * n, pa.timestamp("s", tz="UTC")),
        "media": pa.nulls(n, DOCUMENTS_SCHEMA.field("media").type),
    }, schema=DOCUMENTS_SCHEMA)


def _settings(**near) -> DedupSettings:
    return DedupSettings(near={**SIMHASH, **near})


def _long_doc(rng: random.Random) -> str:
    """~2,000 words in 5 paragraphs: a one-word edit moves ~1.4 of 64 bits."""
    return "\n\n".join(" ".join(rng.choice(VOCAB) for _ in range(400)) + "." for _ in range(5))


def _replace_word(rng: random.Random, text: str) -> str:
    words = text.split(" ")
    words[rng.randrange(len(words))] = "edited"
    return " ".join(words)


@pytest.fixture(scope="module")
def planted():
    """30 distinct long documents, a one-word edit of 10 of them and an exact copy of 3 (newer)."""
    rng = random.Random(21)
    base = [_long_doc(rng) for _ in range(30)]
    texts = list(base)
    near, exact = {}, {}
    for i in range(10):
        texts.append(_replace_word(rng, base[i]))
        near[f"doc-{len(texts) - 1:05d}"] = f"doc-{i:05d}"
    for i in (20, 21, 22):
        texts.append(base[i])
        exact[f"doc-{len(texts) - 1:05d}"] = f"doc-{i:05d}"
    ages = [1_000] * 30 + [2_000] * (len(texts) - 30)
    fps = SimHasher(1).fingerprints(shingle_hashes(texts, _settings().near.shingles))
    return _table(texts, ages=ages), near, exact, fps


def test_planted_near_duplicates_removed_with_rule_and_distance(planted):
    table, near, exact, fps = planted
    kept, result = deduplicate(table, _settings(verify="none"))
    dups = {r["removed_id"]: r for r in result.duplicates.to_pylist()}
    ids = table["id"].to_pylist()
    within = {r: k for r, k in near.items() if hamming(fps[ids.index(r)], fps[ids.index(k)]) <= 3}
    assert len(within) >= 8  # the theory gives P[d <= 3] = 0.94 per one-word edit of 2,000 words
    assert {r: d["kept_id"] for r, d in dups.items()} == within | exact
    assert all(dups[r]["rule"] == NEAR_SIMHASH for r in within)
    assert all(dups[r]["rule"] == "exact_duplicate" for r in exact)
    excl = {r["id"]: r for r in result.exclusions().to_pylist()}
    for r, k in within.items():
        d = int(hamming(fps[ids.index(r)], fps[ids.index(k)]))
        assert excl[r]["value"] == str(d) and excl[r]["similarity"] == 1 - d / 64
        assert excl[r]["kept_id"] == k
    assert result.counts.removed_near == len(within) and result.counts.removed_exact == 3
    assert result.counts.simhash_tables >= 4 and result.counts.lsh_bands == 0
    assert kept.num_rows == table.num_rows - len(within) - 3
    per_source = result.removed_per_source().to_pylist()[0]
    assert per_source["removed_near_simhash"] == len(within) and per_source["removed_near"] == 0


def test_exact_verification_uses_the_jaccard_threshold(planted):
    table, near, _, _ = planted
    _, loose = deduplicate(table, _settings(verify="exact", threshold=0.9))
    _, none = deduplicate(table, _settings(verify="none"))
    assert loose.duplicates.equals(none.duplicates)  # one-word edits: J ~ 0.995 >= 0.9
    # 0.999 is above every planted pair's Jaccard (5 of ~2,000 shingles differ): all are rejected
    _, strict = deduplicate(table, _settings(verify="exact", threshold=0.999))
    assert strict.counts.removed_near == 0 and strict.counts.removed_exact == 3
    assert strict.counts.rejected_by_verification >= none.counts.removed_near


@pytest.mark.parametrize("storage", ["disk", "memory"])
def test_same_output_for_any_batching_and_storage(planted, storage):
    table, *_ = planted
    _, ref = deduplicate(table, _settings(), batch_rows=1000)
    _, res = deduplicate(table, _settings(storage={"type": storage}), batch_rows=7)
    assert res.decisions.equals(ref.decisions) and res.duplicates.equals(ref.duplicates)
    assert res.exclusions().equals(ref.exclusions())
    assert np.array_equal(res.accepted.signatures, ref.accepted.signatures)
    shuffled = table.take(np.random.default_rng(0).permutation(table.num_rows))
    _, res = deduplicate(shuffled, _settings(storage={"type": storage}), batch_rows=5)
    assert res.duplicates.equals(ref.duplicates)  # keep-policy order, not input order


def test_incremental_artifact_round_trip(tmp_path):
    rng = random.Random(5)
    old = [_long_doc(rng) for _ in range(12)]
    settings = _settings(verify="none")
    settings = settings.model_copy(update={"incremental": True})
    _, first = deduplicate(_table(old, sources=["old"] * 12, ages=[9_000] * 12), settings)
    path = tmp_path / "signatures.parquet"
    pq.write_table(first.accepted.to_table(settings), path)
    table = pq.read_table(path)
    assert table.schema.field("signature").type.list_size == 2
    accepted = AcceptedSignatures.from_table(table, settings)
    assert np.array_equal(accepted.signatures, first.accepted.signatures)
    with pytest.raises(SignatureMismatchError, match="method"):
        AcceptedSignatures.from_table(table, DedupSettings())
    minhash_table = deduplicate(_table(old[:2]), DedupSettings())[1].accepted.to_table(DedupSettings())
    with pytest.raises(SignatureMismatchError, match="method"):
        AcceptedSignatures.from_table(minhash_table, settings)
    # the distance is a decision, not part of the signature: another max_distance reads the artifact
    AcceptedSignatures.from_table(table, _settings(verify="none", simhash={"max_distance": 5}))

    fps = SimHasher(1).fingerprints(shingle_hashes(old, settings.near.shingles))
    edited = None
    for _ in range(20):  # a one-word edit within 3 bits of its original (P = 0.94 each)
        candidate = _replace_word(rng, old[3])
        if hamming(SimHasher(1).fingerprints(shingle_hashes([candidate], settings.near.shingles))[0], fps[3]) <= 3:
            edited = candidate
            break
    assert edited is not None
    new = [edited, _long_doc(rng), old[5]]
    dedup = Deduplicator(settings, accepted)
    dedup.add_batch(_table(new, sources=["new"] * 3, ids=[f"new-{i}" for i in range(3)], ages=[1] * 3))
    result = dedup.finish()
    dups = {r["removed_id"]: r for r in result.duplicates.to_pylist()}
    assert set(dups) == {"new-0", "new-2"}
    assert dups["new-0"]["kept_id"] == "doc-00003" and dups["new-0"]["rule"] == NEAR_SIMHASH
    assert dups["new-0"]["kept_in_earlier_run"] and dups["new-2"]["rule"] == "exact_duplicate"
    assert result.counts.removed_against_earlier_runs == 2
    assert len(result.accepted) == 13 and result.accepted.ids.to_pylist()[-1] == "new-1"


def test_minhash_artifact_fingerprint_is_unchanged():
    """Adding the method must not invalidate MinHash artifacts written before it existed."""
    from platform_assets.dedup.signature_store import fingerprint

    assert "method" not in fingerprint(DedupSettings())
    assert {"algorithm", "num_perm"} <= set(fingerprint(DedupSettings()))
