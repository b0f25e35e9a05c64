"""SimHash near dedup (dedup/simhash.py): fingerprints against a per-document reference, distances
against the angle the theory predicts, block tables against brute force, settings validation."""

import math
import random
from itertools import combinations

import numpy as np
import pytest
from pydantic import ValidationError

from platform_assets.dedup import simhash as simhash_module
from platform_assets.dedup.hash64 import fmix64, seed_key
from platform_assets.dedup.near_dedup import NearOutcome
from platform_assets.dedup.settings import DedupSettings, NearSettings, ShingleSettings
from platform_assets.dedup.shingles import ShingleBatch, shingle_hashes
from platform_assets.dedup.simhash import (
    GreedySimHashDedup,
    SimHashBlocks,
    SimHasher,
    choose_key_blocks,
    fingerprints_of,
    hamming,
    signature_words,
)

VOCAB = [f"v{i}" for i in range(5000)]


def _words(rng: random.Random, n: int) -> list[str]:
    return [rng.choice(VOCAB) for _ in range(n)]


def _reference(shingles: ShingleBatch, seed: int) -> np.ndarray:
    """Bit by bit, document by document: +1/-1 per shingle occurrence, majority strictly positive."""
    out = []
    for i in range(shingles.n_docs):
        h = fmix64(shingles.doc(i) ^ seed_key(seed, 2))
        fp = 0
        for b in range(64):
            ones = int(((h >> np.uint64(b)) & np.uint64(1)).sum())
            if 2 * ones > len(h):
                fp |= 1 << b
        out.append(fp)
    return np.array(out, dtype=np.uint64)


def test_fingerprints_match_the_reference_including_repeats_long_documents_and_chunks(monkeypatch):
    rng = random.Random(1)
    texts = [
        "", "   ", "one", "a b c d e", " ".join(_words(rng, 300)),
        " ".join(["same five words here again"] * 80),  # repeated shingles: term frequency counts
        " ".join(_words(rng, 700)),  # > 255 shingles: lanes are summed in runs
        "", " ".join(_words(rng, 40)),
    ]
    sh = shingle_hashes(texts, ShingleSettings())
    ref = _reference(sh, seed=7)
    assert np.array_equal(SimHasher(7).fingerprints(sh), ref)
    monkeypatch.setattr(simhash_module, "_CHUNK_SHINGLES", 300)  # many passes, runs cut across them
    assert np.array_equal(SimHasher(7).fingerprints(sh), ref)
    assert ref[0] == 0 and ref[1] == 0  # no shingles
    assert not np.array_equal(SimHasher(8).fingerprints(sh)[2:], ref[2:])  # the seed matters


def test_term_frequency_changes_the_fingerprint():
    sh = shingle_hashes(["x y", "x y x y x y x y", "x y z w"], ShingleSettings(size=1))
    fp = SimHasher(1).fingerprints(sh)
    assert fp[0] == fp[1]  # the same proportions of votes
    sh = shingle_hashes(["x y z", "x x x x x y z"], ShingleSettings(size=1))
    fp2 = SimHasher(1).fingerprints(sh)
    assert fp2[0] != fp2[1]  # x weighs 5 of 7 votes in the second


def test_identical_equal_one_word_edit_near_unrelated_far():
    rng = random.Random(2)
    bases = [_words(rng, 2000) for _ in range(60)]
    edited = []
    for w in bases:
        w = list(w)
        w[rng.randrange(len(w))] = "edited"
        edited.append(" ".join(w))
    texts = [" ".join(w) for w in bases]
    sh = shingle_hashes(texts + edited + texts[:5], ShingleSettings())
    fp = SimHasher(1).fingerprints(sh)
    assert np.array_equal(fp[:5], fp[120:])  # identical text, identical fingerprint
    d_edit = hamming(fp[:60], fp[60:120])
    # one word of 2,000 changes 5 of 1,996 shingles: cosine 1991/1996, angle 0.0708 rad, so a bit
    # differs with p = angle/pi = 0.0225: 1.44 bits on average, P[d <= 3] = 0.94
    cosine = 1991 / 1996
    expected = 64 * math.acos(cosine) / math.pi
    assert abs(d_edit.mean() - expected) < 0.6, d_edit.mean()
    assert (d_edit <= 3).mean() >= 0.85
    far = hamming(fp[:60, None], fp[None, :60])[np.triu_indices(60, 1)]
    assert far.min() > 12 and abs(far.mean() - 32) < 1.5  # unrelated: ~Binomial(64, 1/2)


def test_signature_words_round_trip():
    fps = np.array([0, 1, 2**63 + 5, 2**64 - 1], dtype=np.uint64)
    words = signature_words(fps)
    assert words.shape == (4, 2) and words.dtype == np.uint32
    assert words[1].tolist() == [1, 0] and words[2].tolist() == [5, 2**31]
    assert np.array_equal(fingerprints_of(words), fps)
    assert fingerprints_of(np.empty((0, 2), np.uint32)).shape == (0,)


def _planted_fingerprints(rng: np.random.Generator, n: int, max_flip: int) -> np.ndarray:
    """n random fingerprints, a third of them copies of another with up to max_flip + 2 bits flipped."""
    fps = rng.integers(0, 2**64, size=n, dtype=np.uint64)
    for i in range(0, n, 3):
        j = int(rng.integers(0, n))
        flips = rng.choice(64, size=int(rng.integers(0, max_flip + 3)), replace=False)
        fps[i] = fps[j] ^ np.uint64(sum(1 << int(b) for b in flips))
    return fps


def _pairs_from_keys(blocks: SimHashBlocks, fps: np.ndarray, k: int) -> set[tuple[int, int]]:
    docs, keys = blocks.shared_keys(np.arange(len(fps)), fps)
    found = set()
    for key in np.unique(keys):
        members = sorted(docs[keys == key].tolist())
        for a, b in combinations(members, 2):
            if hamming(fps[a], fps[b]) <= k:
                found.add((a, b))
    return found


@pytest.mark.parametrize("k, blocks", [(0, None), (3, None), (3, 4), (3, 5), (3, 6), (5, 7), (8, 9)])
def test_block_tables_find_every_pair_within_the_distance(k, blocks):
    rng = np.random.default_rng(k * 10 + (blocks or 0))
    fps = _planted_fingerprints(rng, 400, k)
    brute = {(a, b) for a, b in combinations(range(len(fps)), 2) if hamming(fps[a], fps[b]) <= k}
    assert len(brute) > 20  # the planted copies within k, far more than chance would give
    tables = SimHashBlocks(k, blocks, len(fps))
    assert tables.blocks == (blocks or k + choose_key_blocks(len(fps), k))
    assert len(tables.tables) == math.comb(tables.blocks, k)
    assert _pairs_from_keys(tables, fps, k) == brute


def test_automatic_blocks_grow_with_the_corpus_and_stay_within_the_table_bound():
    chosen = [choose_key_blocks(n, 3) for n in (1_000, 100_000, 10_000_000)]
    assert chosen == [1, 2, 3]  # 16-bit keys collide too often past a few thousand documents
    for k in range(17):
        for n in (10, 10_000, 10_000_000):
            r = choose_key_blocks(n, k)
            assert r >= 1 and math.comb(k + r, r) <= 1024


def _brute_greedy(fps: np.ndarray, order: list[int], rank: np.ndarray, k: int) -> np.ndarray:
    target = np.full(len(fps), -1, np.int64)
    accepted: list[int] = []
    for row in order:
        near = [(int(hamming(fps[row], fps[a])), rank[a], a) for a in accepted]
        near = [x for x in near if x[0] <= k]
        if near:
            target[row] = min(near)[2]
        else:
            accepted.append(row)
    return target


@pytest.mark.parametrize("blocks", [None, 5])
def test_greedy_pass_equals_brute_force(blocks):
    """Nearest accepted document within k (ties: better rank), in keep-policy order, for any blocks."""
    k = 3
    rng = np.random.default_rng(5)
    fps = _planted_fingerprints(rng, 300, k)
    fps[10:20] = fps[9]  # ten identical fingerprints
    order = rng.permutation(len(fps))
    rank = np.empty(len(fps), np.int64)
    rank[order] = np.arange(len(fps))
    settings = NearSettings(method="simhash", verify="none", simhash={"max_distance": k, "blocks": blocks})
    tables = SimHashBlocks(k, blocks, len(fps))
    greedy = GreedySimHashDedup(settings, np.empty(0, np.uint64), np.empty(0, bool),
                                tables.shared_keys(np.arange(len(fps)), fps))
    ids = [f"d{i}" for i in range(len(fps))]
    out: NearOutcome = greedy.run(order, ids, fps, rank)
    expected = _brute_greedy(fps, order.tolist(), rank, k)
    assert np.array_equal(out.target, expected)
    removed = np.flatnonzero(expected >= 0)
    assert len(removed) > 30
    assert np.allclose(out.similarity[removed], 1 - hamming(fps[removed], fps[expected[removed]]) / 64)


def test_settings_validation():
    assert NearSettings(method="simhash").simhash.max_distance == 3
    with pytest.raises(ValidationError, match="must exceed max_distance"):
        NearSettings(method="simhash", simhash={"max_distance": 3, "blocks": 3})
    with pytest.raises(ValidationError, match="max_distance"):
        NearSettings(simhash={"max_distance": 17})
    with pytest.raises(ValidationError, match="max_distance"):
        NearSettings(simhash={"max_distance": -1})
    with pytest.raises(ValidationError, match="tables"):
        NearSettings(simhash={"max_distance": 8, "blocks": 40})  # C(40, 8) = 76.9 M tables
    with pytest.raises(ValidationError, match="verify must be"):
        NearSettings(method="simhash", verify="estimated")
    with pytest.raises(ValidationError, match="storage.type"):
        NearSettings(method="simhash", storage={"type": "redis"})
    with pytest.raises(ValidationError, match="method"):
        DedupSettings(near={"method": "lsh"})
    assert NearSettings(method="simhash").signature_width() == 2 and NearSettings().signature_width() == 128


def test_pipeline_config_takes_the_method_and_names_the_key_of_a_bad_value(tmp_path):
    from platform_assets.config import ConfigError, parse_config

    source = [{"name": "web", "format": "jsonl", "path": "web"}]
    cfg = parse_config({"sources": source, "dedup": {"near": {"method": "simhash", "simhash": {"max_distance": 4}}}},
                       tmp_path)
    assert cfg.dedup.near.method == "simhash" and cfg.dedup.near.simhash.max_distance == 4
    with pytest.raises(ConfigError, match=r"dedup\.near\.simhash\.max_distance"):
        parse_config({"sources": source, "dedup": {"near": {"simhash": {"max_distance": 40}}}}, tmp_path)
    with pytest.raises(ConfigError, match=r"dedup\.near\.simhash: .*must exceed max_distance"):
        parse_config({"sources": source, "dedup": {"near": {"simhash": {"max_distance": 3, "blocks": 2}}}}, tmp_path)
