"""Shingle hashes and MinHash signatures are pinned: persisted signatures stay valid across releases.

The expected digests below were computed with the implementation of 2026-11-22 *before* the
shingling speed-ups (one-pass token boundaries, no NUL-joined copy, ASCII lower-casing fast path).
Any change here means `hash64.HASH_SCHEME_VERSION` must be bumped and stored signatures rebuilt.
"""

from __future__ import annotations

import hashlib
import random

import numpy as np
import pyarrow as pa
import pytest

from platform_assets.dedup.minhash import MinHasher
from platform_assets.dedup.settings import ShingleSettings
from platform_assets.dedup.shingles import compute_in_slices, shingle_hashes, texts_to_array

EDGE = [
    "",
    " ",
    "   \n\t  ",
    "\u00a0",
    "\u00a0\u00a0word\u00a0NBSP\u00a0separated\u00a0tokens\u00a0here\u00a0",
    "word",
    "Word",
    "WORD",
    "a",
    "_",
    "__init__",
    "x" * 8,
    "y" * 9,
    "z" * 64,
    "w" * 65,
    "q" * 300,
    "é",
    "É",
    "Éé ÉTÉ été ÈRE",
    "日本語",
    "日本語のテキストです。 これは テスト 文章 です",
    "😀",
    "hello😀world 😀😀 emoji🎉party end",
    "e\u0301te\u0301 combining marks split tokens",
    "İstanbul İI ıi",
    "ΟΔΟΣ ὈΔΌΣ σοφός ΣΟΦΟΣ",
    "Straße STRASSE ß ẞ",
    "ﬁne ﬂow ligatures",
    "Ⅰ Ⅱ Ⅻ roman numerals Ⓐ ⓐ",
    "Ⱥ ⱥ Ȿ length-changing case",
    "\x00nul\x00inside\x00",
    "tab\tseparated\tvalues\there\tand\tmore",
    "MiXeD CaSe TeXt WiTh SeVeRaL WoRdS",
    "ends with é",
    "ending with word",
    "beginning",
    "joined",
    "...punctuation only!!! ???",
    "12345 67890 1.5e10 0x1F",
    "one two three four",
    "one two three four five",
    "One Two Three Four Five Six",
    "naïve café — “quoted” नमस्ते 中文字符 done",
    "ꙮ 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝐁𝐨𝐥𝐝 math letters",
    "\u2028line\u2029para\u3000ideographic\u3000space",
    "\ufeffbom at start",
    "a\u200bzero\u200bwidth",
    "ÀÁÂÃÄÅ àáâãäå ÆÇ æç ĀĂĄ āăą",
    "Кириллица ТЕКСТ текст Ёж",
    "العربية نص",
    "עברית",
    "한국어 텍스트",
]

_VOCAB = (
    [f"w{i}" for i in range(200)]
    + ["The", "QUICK", "brown", "Fox", "jumps", "over", "LAZY", "dog", "snake_case", "CamelCase"]
    + ["Über", "ça", "naïve", "x_y", "_", "42", "ÉTÉ", "日本", "語", "😀", "Ωmega", "straße", "İ", "ﬁ"]
    + ["a" * 12, "B" * 20, "Ü" * 5, "longerthan8bytes", "exactly8"]
)
_SEPS = [" ", "  ", ", ", ".\n", " - ", "\t", "(", ")", "\u00a0", "\u3000", "—", "\x00", ""]
_CODEPOINT_RANGES = [
    (0x20, 0x7E),
    (0xA0, 0x24F),
    (0x370, 0x3FF),
    (0x400, 0x4FF),
    (0x2000, 0x206F),
    (0x3040, 0x30FF),
    (0x4E00, 0x4E80),
    (0x1F600, 0x1F64F),
    (0x300, 0x36F),
]


def _generated(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        kind = i % 4
        if kind == 3:  # random code points from mixed scripts (cased, combining, symbols, emoji)
            chars = []
            for _ in range(rng.randint(0, 120)):
                lo, hi = _CODEPOINT_RANGES[rng.randrange(len(_CODEPOINT_RANGES))]
                chars.append(chr(rng.randint(lo, hi)))
            out.append("".join(chars))
        elif kind == 2:  # ASCII only, mixed case
            words = [rng.choice(_VOCAB[:210]) for _ in range(rng.randint(0, 80))]
            out.append(" ".join(w.upper() if rng.random() < 0.2 else w for w in words))
        else:
            out.append("".join(rng.choice(_VOCAB) + rng.choice(_SEPS) for _ in range(rng.randint(0, 120))))
    return out


TEXTS = EDGE + _generated(400, seed=20261122) + EDGE[::-1]


def _digest(*arrays: np.ndarray) -> str:
    h = hashlib.sha256()
    for a in arrays:
        a = np.ascontiguousarray(a)
        h.update(str((a.dtype.str, a.shape)).encode())
        h.update(a.tobytes())
    return h.hexdigest()


def _in_slices(texts: list[str], spec: ShingleSettings, slice_bytes: int):
    """Shingles and signatures computed slice by slice, as Deduplicator.add_batch does."""
    arr = texts_to_array(texts)
    mh = MinHasher(128, seed=1)
    hashes, counts, sigs = [], [], []
    for a, b in compute_in_slices(arr, slice_bytes):
        sh = shingle_hashes(arr[a:b], spec)
        hashes.append(sh.hashes)
        counts.append(sh.counts)
        sigs.append(mh.signatures(sh))
    return np.concatenate(hashes), np.concatenate(counts), np.concatenate(sigs)


# computed with the implementation before the 2026-11-22 speed-ups (see the module docstring)
EXPECTED = {
    "word5": "e14ee92e35bd97f7123d49c42a59c78b566018f006c47da508fcbd30ca905c80",
    "word5_sig_one_permutation": "a2bd899f02a7572abfb81409086460ba549fbb144d9e40cd0058bed4cc2306ec",
    "word5_sig_permutations": "80d15391a33a9c1c51eb095e3780f77178a12903963adcedef8bdfd48b330e9d",
    "word3_no_lowercase": "8063fa97841383b7deef7977f4bc29abc268d8df22cd890f698d2c173a7290cf",
    "word5_max_chars_40": "889db21c55a33a5c2ace39e0ed5e6451a368bd869bb86db00fb361927d7f281f",
    "char5": "e9c0fc6ed9ad5a09c3b8d15be5db554ec5115eea2979c46a3947b86dd22bce18",
}


def test_inputs_cover_the_edge_cases():
    assert len(TEXTS) > 400
    assert any(t.isascii() for t in TEXTS) and any(not t.isascii() for t in TEXTS)
    assert "" in TEXTS and "\u00a0" in TEXTS


def test_word_shingles_and_signatures_are_pinned():
    sh = shingle_hashes(TEXTS, ShingleSettings())
    assert _digest(sh.hashes, sh.offsets) == EXPECTED["word5"]
    sig = MinHasher(128, seed=1).signatures(sh)
    assert _digest(sig) == EXPECTED["word5_sig_one_permutation"]
    sig_p = MinHasher(128, seed=1, algorithm="permutations").signatures(sh)
    assert _digest(sig_p) == EXPECTED["word5_sig_permutations"]


@pytest.mark.parametrize("slice_bytes", [1, 200, 3000, 1 << 20])
def test_slicing_gives_the_pinned_results(slice_bytes):
    # small slices: many all-ASCII slices, single-document slices, slices starting with an empty doc
    hashes, counts, sigs = _in_slices(TEXTS, ShingleSettings(), slice_bytes)
    offsets = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
    assert _digest(hashes, offsets) == EXPECTED["word5"]
    assert _digest(sigs) == EXPECTED["word5_sig_one_permutation"]


def test_non_zero_array_offset_gives_the_pinned_results():
    arr = pa.array(["Padding DOC é"] * 3 + TEXTS + ["tail Ü"], pa.large_string()).slice(3, len(TEXTS))
    sh = shingle_hashes(arr, ShingleSettings())
    assert _digest(sh.hashes, sh.offsets) == EXPECTED["word5"]
    chunked = pa.chunked_array([pa.array(TEXTS[:7], pa.string()), pa.array(TEXTS[7:], pa.string())])
    sh = shingle_hashes(chunked, ShingleSettings())
    assert _digest(sh.hashes, sh.offsets) == EXPECTED["word5"]


def test_other_settings_are_pinned():
    sh = shingle_hashes(TEXTS, ShingleSettings(size=3, lowercase=False))
    assert _digest(sh.hashes, sh.offsets) == EXPECTED["word3_no_lowercase"]
    sh = shingle_hashes(TEXTS, ShingleSettings(max_chars=40))
    assert _digest(sh.hashes, sh.offsets) == EXPECTED["word5_max_chars_40"]
    sh = shingle_hashes(TEXTS, ShingleSettings(unit="char", size=5))
    assert _digest(sh.hashes, sh.offsets) == EXPECTED["char5"]


def test_nulls_count_as_empty_documents():
    arr = pa.array([None, "Some text here", None], pa.large_string())
    sh = shingle_hashes(arr, ShingleSettings())
    assert sh.counts.tolist() == [0, 1, 0]
    ref = shingle_hashes(["Some text here"], ShingleSettings())
    assert np.array_equal(sh.hashes, ref.hashes)


# -- the fast paths against plain reference implementations ----------------------------------------
def _reference_one_permutation(mh: MinHasher, sb) -> np.ndarray:
    """The one-permutation signature as first written (bin by bin, one probe at a time)."""
    from platform_assets.dedup.hash64 import MASK32, fmix64
    from platform_assets.dedup.minhash import EMPTY

    p = mh.num_perm
    sig = np.full((sb.n_docs, p), EMPTY, dtype=np.uint32)
    if len(sb.hashes) == 0:
        return sig
    h = fmix64(sb.hashes ^ mh._key)
    bins = (((h >> np.uint64(32)) * np.uint64(p)) >> np.uint64(32)).astype(np.intp)
    cells = sb.doc_index() * p + bins
    flat = sig.reshape(-1)
    np.minimum.at(flat, cells, (h & MASK32).astype(np.uint32))
    filled = np.zeros(flat.shape, dtype=bool)
    filled[cells] = True
    filled = filled.reshape(sig.shape)
    docs = np.flatnonzero(sb.counts > 0)
    rows, cols = np.nonzero(~filled[docs])
    rows = docs[rows]
    for t in range(len(mh._probes)):
        cand = mh._probes[t][cols]
        ok = filled[rows, cand]
        sig[rows[ok], cols[ok]] = sig[rows[ok], cand[ok]]
        rows, cols = rows[~ok], cols[~ok]
    for step in range(1, p):
        cand = (cols + step) % p
        ok = filled[rows, cand]
        sig[rows[ok], cols[ok]] = sig[rows[ok], cand[ok]]
        rows, cols = rows[~ok], cols[~ok]
    return sig


def _fmix64_inverse(y: np.ndarray) -> np.ndarray:
    from platform_assets.dedup.hash64 import _M1, _M2

    def unshift(x):  # x ^ (x >> 33) is its own inverse (33 >= 32)
        return x ^ (x >> np.uint64(33))

    inv1, inv2 = (np.uint64(pow(int(m), -1, 1 << 64)) for m in (_M1, _M2))
    return unshift(unshift(unshift(y) * inv2) * inv1)


@pytest.mark.parametrize("num_perm", [128, 100])
def test_one_permutation_matches_the_reference(num_perm):
    from platform_assets.dedup.hash64 import fmix64
    from platform_assets.dedup.minhash import EMPTY
    from platform_assets.dedup.shingles import ShingleBatch

    rng = np.random.default_rng(3)
    mh = MinHasher(num_perm, seed=5)
    counts = rng.choice([0, 1, 2, 3, 10, 60, 200, 1000], size=300)
    hashes = rng.integers(0, 2**64, int(counts.sum()), dtype=np.uint64, endpoint=False)
    sb = ShingleBatch(hashes, np.concatenate(([0], np.cumsum(counts))).astype(np.int64))
    assert np.array_equal(mh.signatures(sb), _reference_one_permutation(mh, sb))
    # shingles whose 32-bit value is EMPTY itself (the bin counts as filled): the exact marking path
    crafted = _fmix64_inverse(np.array([0xFFFFFFFF, 0x1234FFFFFFFF], dtype=np.uint64)) ^ mh._key
    assert ((fmix64(crafted ^ mh._key) & np.uint64(0xFFFFFFFF)) == np.uint64(EMPTY)).all()
    hashes = hashes.copy()
    hashes[[0, len(hashes) // 2]] = crafted
    sb = ShingleBatch(hashes, sb.offsets)
    assert np.array_equal(mh.signatures(sb), _reference_one_permutation(mh, sb))


def test_fast_utf8_decode_matches_the_reference_on_any_bytes():
    from platform_assets.dedup.shingles import _decode_leads, _decode_leads_u32

    rng = np.random.default_rng(0)
    data = np.concatenate([rng.integers(0, 256, 1 << 16, dtype=np.uint8), np.zeros(8, np.uint8)])
    lead = np.flatnonzero(data[:-8] >= 0xC0)
    cp, n = _decode_leads(data, lead)
    cp32, n32 = _decode_leads_u32(data, lead)
    assert np.array_equal(cp, cp32) and np.array_equal(n, n32)


def test_code_point_tables_match_python_and_arrow():
    import pyarrow.compute as pc

    from platform_assets.dedup.shingles import _unicode_lower_table, _unicode_word_table

    word = _unicode_word_table()
    python = np.fromiter((chr(c).isalnum() or c == 95 for c in range(0x110000)), bool, 0x110000)
    assert np.array_equal(word, python)
    lower = _unicode_lower_table()
    rng = np.random.default_rng(1)
    cps = np.concatenate([np.arange(0x3000), rng.integers(0x3000, 0x110000, 20_000)])
    cps = cps[(cps < 0xD800) | (cps > 0xDFFF)]
    chars = [chr(c) for c in cps]
    got = pc.utf8_lower(pa.array(chars, pa.large_string())).to_pylist()
    assert [ord(c) for c in got] == lower[cps].tolist()
