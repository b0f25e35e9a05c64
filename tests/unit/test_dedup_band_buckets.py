"""dedup.near.storage.type: disk (band_buckets.py) decides exactly as the in-memory datasketch index,
keeps nothing on disk after the run, and groups band values exactly."""

import random

import numpy as np
import pyarrow as pa
import pytest
from test_dedup_stage import _doc, _edit, _table

from platform_assets.dedup import band_buckets
from platform_assets.dedup.band_buckets import BandBuckets, ShingleSpill, SpillDir, record_dtype, shared_groups
from platform_assets.dedup.deduplicator import Deduplicator
from platform_assets.dedup.near_dedup import ShingleStore
from platform_assets.dedup.settings import DedupSettings, ShingleSettings
from platform_assets.dedup.shingles import shingle_hashes


def _corpus(seed: int, n_base: int = 60, id_prefix: str = "doc") -> pa.Table:
    """Distinct documents and copies at every distance from them: 1-40 word edits of 320 (J from
    ~0.97 down to ~0.6, around the 0.8 threshold), copies of copies (chains), and repeated ids."""
    rng = random.Random(seed)
    base = [_doc(rng) for _ in range(n_base)]
    texts = list(base)
    for i in range(n_base):
        for _ in range(rng.randrange(4)):
            texts.append(_edit(rng, rng.choice(texts[i:]), rng.choice([1, 3, 8, 15, 25, 40])))
    ids = [f"{id_prefix}-{i:05d}" for i in range(len(texts))]
    texts += texts[:3]  # the same documents read twice: same ids, same text
    ids += ids[:3]
    return _table(texts, ids=ids, ages=[rng.randrange(1000) for _ in texts],
                  sources=[rng.choice(["web", "books"]) for _ in texts])


def _run(table: pa.Table, settings: DedupSettings, prior=None, batch_rows: int = 37):
    dedup = Deduplicator(settings, prior)
    for batch in table.to_batches(max_chunksize=batch_rows):
        dedup.add_batch(batch)
    return dedup.finish()


def _disk(settings: DedupSettings, tmp_path, **storage) -> DedupSettings:
    near = settings.near.model_copy(update={"storage": settings.near.storage.model_copy(
        update={"type": "disk", "spill_dir": str(tmp_path), **storage})})
    return settings.model_copy(update={"near": near})


def _assert_same(a, b):
    assert a.decisions.equals(b.decisions)
    assert a.duplicates.equals(b.duplicates)
    assert np.array_equal(a.accepted.signatures, b.accepted.signatures)
    assert a.accepted.ids.equals(b.accepted.ids)
    assert a.counts == b.counts


@pytest.mark.parametrize("verify", ["exact", "estimated", "none"])
@pytest.mark.parametrize("partitions", [1, 7, 64])
def test_disk_index_decides_as_the_memory_index(tmp_path, verify, partitions):
    table = _corpus(seed=partitions)
    memory = DedupSettings(exact={"enabled": False}, near={"verify": verify})  # near carries it all
    a = _run(table, memory)
    b = _run(table, _disk(memory, tmp_path, partitions=partitions))
    assert a.counts.removed_near > 20  # the corpus has work for the index
    _assert_same(a, b)
    assert list(tmp_path.iterdir()) == []  # the spill directory is gone with the run


def test_disk_index_with_exact_dedup_and_max_candidates(tmp_path):
    table = _corpus(seed=5)
    memory = DedupSettings(near={"max_candidates": 2})
    _assert_same(_run(table, memory), _run(table, _disk(memory, tmp_path)))


def test_incremental_run_against_an_artifact(tmp_path):
    first_half, second_half = _corpus(seed=11), _corpus(seed=12, id_prefix="new")
    memory = DedupSettings(incremental=True)
    prior = _run(first_half, memory).accepted
    # some of the new documents copy accepted ones of the earlier run
    extra = _table([_edit(random.Random(1), t, 2) for t in first_half["text"].to_pylist()[:10]],
                   ids=[f"copy-{i}" for i in range(10)])
    new = pa.concat_tables([second_half, extra])
    a = _run(new, memory, prior)
    b = _run(new, _disk(memory, tmp_path), prior)
    assert a.counts.removed_against_earlier_runs >= 10
    _assert_same(a, b)


def test_boilerplate_cluster_stays_linear(tmp_path):
    rng = random.Random(10)
    licence = _doc(rng, 200)
    texts = [licence] * 500 + [f"Project {i}: " + licence for i in range(300)] + [_doc(rng) for _ in range(20)]
    settings = _disk(DedupSettings(exact={"enabled": False}), tmp_path)
    result = _run(_table(texts), settings, batch_rows=256)
    assert result.counts.kept == 21 and result.counts.lsh_candidates <= 2 * len(texts)


def test_band_values_are_grouped_exactly(tmp_path):
    buckets = BandBuckets(tmp_path, bands=2, rows=2, partitions=1)  # one bucket: every record meets
    sigs = np.array([[1, 2, 3, 4], [1, 2, 9, 9], [5, 6, 3, 4], [7, 7, 7, 7], [1, 2, 3, 4]], np.uint32)
    buckets.add(10, sigs, np.array([True, True, True, True, False]))  # the last has no shingles
    docs, keys = buckets.shared_keys()
    pairs = sorted(zip(docs.tolist(), keys.tolist(), strict=True))
    # band 0 (1, 2): docs 10 and 11; band 1 (3, 4): docs 10 and 12; doc 13 shares nothing
    groups: dict[int, set[int]] = {}
    for d, k in pairs:
        groups.setdefault(k, set()).add(d)
    assert sorted(map(sorted, groups.values())) == [[10, 11], [10, 12]]
    assert list(tmp_path.iterdir()) == []  # bucket files are deleted once read


def test_shingle_spill_reads_back_what_the_store_holds(tmp_path):
    texts = pa.array([_doc(random.Random(i), 40) for i in range(30)], pa.large_string())
    store, spill_dir = ShingleStore(), SpillDir(str(tmp_path))
    spill = ShingleSpill(spill_dir.path)
    for a, b in ((0, 11), (11, 30)):
        batch = shingle_hashes(texts[a:b], ShingleSettings())
        store.add(batch)
        spill.add(batch)
    assert len(spill) == len(store) == 30
    for doc in (0, 10, 11, 29):
        assert np.array_equal(spill.get(doc), store.get(doc))
    spill.close()
    spill_dir.close()
    assert list(tmp_path.iterdir()) == []


def test_the_candidate_index_finds_what_a_dict_of_lists_finds():
    """The greedy pass's index (pairs sorted by key, a flag per accepted document) against the dict of
    key -> accepted documents it replaced, over random shared keys and a random acceptance order."""
    from platform_assets.dedup.band_buckets import BucketedNearDedup
    from platform_assets.dedup.signature_store import AcceptedSignatures

    rng = np.random.default_rng(5)
    docs = rng.integers(0, 300, 2_000)
    keys = rng.integers(0, 150, 2_000)
    index = BucketedNearDedup(DedupSettings().near, AcceptedSignatures.empty(128), (docs, keys), ids_unique=True)
    reference: dict[int, list[int]] = {}
    for doc in rng.permutation(320).tolist():  # 300..319 hold no shared key
        its_keys = index._keys_of(doc)
        assert sorted(its_keys.tolist()) == sorted(keys[docs == doc].tolist())
        if len(its_keys):
            expected = sorted({g for k in its_keys.tolist() for g in reference.get(k, ())})
            assert index._candidates(its_keys) == expected
        if rng.random() < 0.6:  # accepted: in the index from now on
            assert index._insert(doc, None) == bool(len(its_keys))
            for k in its_keys.tolist():
                reference.setdefault(k, []).append(doc)


def _records(n: int, rows: int, distinct_values: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    records = np.empty(n, record_dtype(rows))
    records["doc"] = rng.permutation(n)
    records["band"] = rng.integers(0, 3, n)
    records["values"] = rng.integers(0, distinct_values, (n, rows))
    return records


def _groups_by_key(records: np.ndarray, group: np.ndarray) -> set[frozenset[int]]:
    """The groups as sets of record positions, and a check that each is one exact key."""
    out: dict[int, list[int]] = {}
    for i, g in enumerate(group.tolist()):
        if g >= 0:
            out.setdefault(g, []).append(i)
    for members in out.values():
        keys = {(int(records["band"][i]), records["values"][i].tobytes()) for i in members}
        assert len(keys) == 1 and len(members) >= 2
    return {frozenset(m) for m in out.values()}


def _reference_groups(records: np.ndarray) -> set[frozenset[int]]:
    by_key: dict[tuple, list[int]] = {}
    for i in range(len(records)):
        by_key.setdefault((int(records["band"][i]), records["values"][i].tobytes()), []).append(i)
    return {frozenset(m) for m in by_key.values() if len(m) >= 2}


@pytest.mark.parametrize(("n", "rows", "distinct"), [(3000, 2, 6), (3000, 5, 2**31), (2, 4, 1), (500, 3, 2)])
def test_shared_groups_are_the_exact_keys_held_twice(n, rows, distinct):
    records = _records(n, rows, distinct, seed=n + rows)
    if distinct == 2**31:  # nearly all keys unique: plant repeats
        records["values"][:40] = records["values"][-40:]
        records["band"][:40] = records["band"][-40:]
    group = shared_groups(records)
    assert _groups_by_key(records, group) == _reference_groups(records)
    shared = np.unique(group[group >= 0])
    assert (shared == np.arange(len(shared))).all()  # dense from 0


def test_shared_groups_fall_back_to_the_bytes_when_hashes_collide(monkeypatch):
    records = _records(2000, 3, 4, seed=5)
    # 4 hash values for 64 distinct keys: distinct keys share hashes, the check must see it
    real = band_buckets.band_value_hashes
    monkeypatch.setattr(band_buckets, "band_value_hashes", lambda band, values: real(band, values) & np.uint64(3))
    by_bytes = band_buckets._shared_groups_by_bytes
    calls = []
    monkeypatch.setattr(band_buckets, "_shared_groups_by_bytes", lambda r: calls.append(len(r)) or by_bytes(r))
    group = shared_groups(records)
    assert calls == [2000]  # the collision was seen
    assert _groups_by_key(records, group) == _reference_groups(records)
