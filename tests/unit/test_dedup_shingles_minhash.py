"""Shingling matches the ground-truth definition; signatures estimate Jaccard and are reproducible."""

import random
import re

import numpy as np
import pyarrow as pa
import pytest
from datasketch import LeanMinHash

from platform_assets.dedup.minhash import EMPTY, MinHasher, estimated_jaccard, exact_jaccard
from platform_assets.dedup.settings import ShingleSettings
from platform_assets.dedup.shingles import prepare_word_text, shingle_hashes, word_spans

TRICKY = [
    "Hello, World! héllo wörld_x 123 -- 4.5e10",
    "",
    "   \n\t  ",
    "a b",
    "naïve café — “quoted” नमस्ते 中文字符 done",
    "x" * 100 + " yy " + "z" * 9 + " " + "é" * 40,
    "snake_case_identifier = other.attr(arg1, arg2)  # comment",
    "ends with word",
    "starts-with-punct...",
    "\x00nul\x00inside",
]


def _truth_tokens(text: str) -> list[str]:
    # shared/data/scripts/dedup_truth.py
    return re.findall(r"\w+", text.lower())


def _truth_shingles(text: str, k: int = 5) -> set[tuple[str, ...]]:
    toks = _truth_tokens(text)
    if len(toks) >= k:
        return {tuple(toks[j : j + k]) for j in range(len(toks) - k + 1)}
    return {tuple(toks)} if toks else set()


def _jaccard(a: set, b: set) -> float:
    return len(a & b) / len(a | b) if a | b else 1.0


def _random_docs(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    vocab = [f"w{i}" for i in range(300)] + ["Über", "ça", "naïve", "x_y", "_", "42", "ÉTÉ"]
    seps = [" ", "  ", ", ", ".\n", " - ", "\t", "(", ")"]
    return [
        "".join(rng.choice(vocab) + rng.choice(seps) for _ in range(rng.randint(0, 60))) for _ in range(n)
    ]


def test_tokens_are_exactly_python_word_runs_of_the_lowercased_text():
    docs = TRICKY + _random_docs(200)
    text_buf = prepare_word_text(docs, ShingleSettings())
    starts, ends, offsets = word_spans(text_buf)
    for i, text in enumerate(docs):
        got = [
            text_buf.data[a:b].tobytes().decode()
            for a, b in zip(
                starts[offsets[i] : offsets[i + 1]], ends[offsets[i] : offsets[i + 1]], strict=True
            )
        ]
        assert got == _truth_tokens(text), text


def test_shingle_jaccard_equals_ground_truth_jaccard():
    rng = random.Random(1)
    base = _random_docs(40, seed=2)
    docs = []
    for d in base:  # pairs with a range of similarities: the doc and an edited copy
        words = d.split(" ")
        for _ in range(rng.randint(0, 6)):
            words[rng.randrange(len(words))] = "EDIT" if words else ""
        docs += [d, " ".join(words)]
    sets = shingle_hashes(docs, ShingleSettings()).sets()
    for i in range(0, len(docs), 2):
        expected = _jaccard(_truth_shingles(docs[i]), _truth_shingles(docs[i + 1]))
        if not (_truth_shingles(docs[i]) or _truth_shingles(docs[i + 1])):
            continue
        assert exact_jaccard(sets[i], sets[i + 1]) == pytest.approx(expected, abs=1e-12)
        assert len(sets[i]) == len(_truth_shingles(docs[i]))


def test_short_and_empty_documents():
    sb = shingle_hashes(
        ["", "one", "one two three four", "one two three four five", "   "], ShingleSettings(size=5)
    )
    assert sb.counts.tolist() == [0, 1, 1, 1, 0]  # fewer than k tokens: one shingle of all of them
    one, four, five = sb.doc(1)[0], sb.doc(2)[0], sb.doc(3)[0]
    assert len({one, four, five}) == 3  # a 4-token tuple is not the 5-gram that extends it


def test_hashes_do_not_depend_on_batch_composition_or_slicing():
    docs = _random_docs(50, seed=3) + TRICKY
    whole = shingle_hashes(docs, ShingleSettings())
    arr = pa.array(["padding doc"] * 3 + docs, pa.large_string()).slice(3)  # non-zero array offset
    sliced = shingle_hashes(arr, ShingleSettings())
    single = [shingle_hashes([d], ShingleSettings()).hashes for d in docs]
    assert np.array_equal(whole.hashes, sliced.hashes)
    assert np.array_equal(whole.hashes, np.concatenate(single))


def test_long_tokens_hash_by_content():
    a = "prefix " + "a" * 70 + " " + "b" * 20 + " tail end here"
    b = "prefix " + "a" * 69 + "c " + "b" * 19 + "d tail end here"
    sa, sb2 = shingle_hashes([a, a, b], ShingleSettings(size=1)).sets()[0:3:2]
    again = shingle_hashes([a], ShingleSettings(size=1)).sets()[0]
    assert np.array_equal(sa, again)
    assert len(np.intersect1d(sa, sb2)) == 4  # prefix, tail, end, here: the long tokens differ


def test_max_chars_bounds_the_work_on_huge_documents():
    huge = " ".join(f"t{i}" for i in range(200_000))  # ~1.3 MB
    sb = shingle_hashes([huge, "small doc here"], ShingleSettings(max_chars=10_000))
    assert sb.counts[0] <= 10_000 // 2
    assert sb.counts[1] == 1


def test_char_shingles_collapse_whitespace():
    sb = shingle_hashes(["ab  c", "ab c", "AB\n\tc", "ab"], ShingleSettings(unit="char", size=3))
    sets = sb.sets()
    assert np.array_equal(sets[0], sets[1]) and np.array_equal(sets[1], sets[2])
    assert sb.counts.tolist() == [2, 2, 2, 1]  # "ab c": "ab ", "b c"; "ab": one short shingle


@pytest.mark.parametrize("algorithm", ["one_permutation", "permutations"])
def test_signatures_estimate_jaccard(algorithm):
    rng = np.random.default_rng(5)
    mh = MinHasher(128, seed=7, algorithm=algorithm)
    errors = []
    for target_shared in (0, 100, 300, 500, 800, 1000):
        common = rng.integers(0, 2**63, target_shared, dtype=np.uint64)
        a = np.concatenate([common, rng.integers(0, 2**63, 1000 - target_shared, dtype=np.uint64)])
        b = np.concatenate([common, rng.integers(0, 2**63, 1000 - target_shared, dtype=np.uint64)])
        from platform_assets.dedup.shingles import ShingleBatch

        sig = mh.signatures(ShingleBatch(np.concatenate([a, b]), np.array([0, 1000, 2000])))
        true_j = target_shared / (2000 - target_shared)
        errors.append(abs(estimated_jaccard(sig[0], sig[1:])[0] - true_j))
    # std of the estimate is sqrt(J(1-J)/128) <= 0.044; 4 sigma
    assert max(errors) < 0.18 and np.mean(errors) < 0.06


def test_signatures_of_empty_and_identical_documents():
    mh = MinHasher(64, seed=1)
    docs = [
        "",
        "the same text with enough words to shingle",
        "THE SAME   text, with enough words to shingle!",
        "one",
    ]
    sig = mh.signatures(shingle_hashes(docs, ShingleSettings()))
    assert sig.shape == (4, 64) and sig.dtype == np.uint32
    assert (sig[0] == EMPTY).all()
    assert np.array_equal(sig[1], sig[2])  # same tokens after normalisation
    assert len(set(sig[3].tolist())) == 1  # one shingle fills every slot through densification
    assert not np.array_equal(sig[1], sig[3])


def test_signatures_reproducible_and_seeded():
    docs = _random_docs(20, seed=9)
    sh = shingle_hashes(docs, ShingleSettings())
    assert np.array_equal(MinHasher(128, 3).signatures(sh), MinHasher(128, 3).signatures(sh))
    assert not np.array_equal(MinHasher(128, 3).signatures(sh), MinHasher(128, 4).signatures(sh))


def test_datasketch_leanminhash_agrees_with_our_estimate():
    mh = MinHasher(128, seed=1)
    docs = _random_docs(2, seed=11)
    docs.append(docs[0] + " extra words appended at the very end of it")
    sig = mh.signatures(shingle_hashes(docs, ShingleSettings()))
    a, c = mh.lean_minhash(sig[0]), mh.lean_minhash(sig[2])
    assert isinstance(a, LeanMinHash)
    assert a.jaccard(c) == pytest.approx(estimated_jaccard(sig[0], sig[2:])[0])
