"""Vectorised 64-bit hashing primitives (numpy, wrap-around uint64 arithmetic).

Everything here is a pure function of its input bytes and fixed constants, so hashes are the same on
every machine and run; signatures persisted by one run are valid in the next. Bump
`HASH_SCHEME_VERSION` whenever an output of this module (or of shingles.py) changes.
"""

from __future__ import annotations

import numpy as np
import xxhash

HASH_SCHEME_VERSION = 1

_U64 = np.uint64
_M1 = _U64(0xFF51AFD7ED558CCD)  # murmur3 fmix64 constants
_M2 = _U64(0xC4CEB9FE1A85EC53)
GOLDEN = _U64(0x9E3779B97F4A7C15)  # 2^64 / phi: odd, so multiplication by it is a bijection
K_COMBINE = _U64(0x100000001B3 * 0x1F + 1)  # odd multiplier for polynomial combination
_S33 = _U64(33)
_S29 = _U64(29)
MASK32 = _U64(0xFFFFFFFF)


def fmix64(x: np.ndarray) -> np.ndarray:
    """murmur3's finaliser: a bijection on uint64 with full avalanche. Returns a new array."""
    x = x ^ (x >> _S33)
    x *= _M1
    x ^= x >> _S33
    x *= _M2
    x ^= x >> _S33
    return x


def seed_key(seed: int, salt: int = 0) -> np.uint64:
    """A well-mixed 64-bit key for an integer seed (distinct salts give unrelated keys)."""
    return _U64(xxhash.xxh3_64_intdigest(f"{seed}:{salt}".encode()))


# masks keeping the first n bytes of a little-endian 8-byte word, n = 0..8
_BYTE_MASKS = np.array([(1 << (8 * n)) - 1 for n in range(8)] + [(1 << 64) - 1], dtype=np.uint64)


def hash_byte_spans(
    data: np.ndarray, starts: np.ndarray, lengths: np.ndarray, vector_max_bytes: int = 64
) -> np.ndarray:
    """64-bit hashes of the byte strings ``data[starts[i] : starts[i] + lengths[i]]`` (no NUL bytes).

    Strings of at most 8 bytes (~85% of word tokens) are their own little-endian word, which is
    injective because they contain no NUL byte; one multiply and xor-shift spreads it. Longer ones up
    to `vector_max_bytes` are folded 8 bytes at a time over the whole array at once, the rare longer
    ones go through xxh3, one call each. `data` must be followed by 8 readable padding bytes.
    """
    n = len(starts)
    if n == 0:
        return np.empty(0, dtype=np.uint64)
    lengths = lengths.astype(np.int64, copy=False)
    # An unaligned little-endian uint64 view starting at every byte: one gather reads 8 bytes.
    words = np.ndarray(shape=(len(data) - 7,), dtype="<u8", buffer=data, offset=0, strides=(1,))
    first = words[starts] & _BYTE_MASKS[np.minimum(lengths, 8)]
    out = first * GOLDEN
    out ^= out >> _S29
    longer = np.flatnonzero(lengths > 8)
    if len(longer) == 0:
        return out
    vec = longer[lengths[longer] <= vector_max_bytes]
    s, ln = starts[vec], lengths[vec]
    h = fmix64((first[vec] ^ (ln.astype(np.uint64) * K_COMBINE)) * GOLDEN)
    active = np.arange(len(vec))
    for c in range(1, (int(ln.max()) + 7) // 8 if len(ln) else 0):
        active = active[ln[active] > 8 * c]
        rem = np.minimum(ln[active] - 8 * c, 8)
        w = words[s[active] + 8 * c] & _BYTE_MASKS[rem]
        h[active] = fmix64((h[active] ^ w) * K_COMBINE)
    out[vec] = h
    for i in longer[lengths[longer] > vector_max_bytes]:
        a = int(starts[i])
        out[i] = xxhash.xxh3_64_intdigest(data[a : a + int(lengths[i])].tobytes())
    return out


def combine_ngrams(
    values: np.ndarray, seg_starts: np.ndarray, seg_ends: np.ndarray, n: int
) -> tuple[np.ndarray, np.ndarray]:
    """Hashes of every run of `n` consecutive `values` inside each segment [start, end).

    Returns (hashes, per-segment counts), segment after segment. A non-empty segment shorter than
    `n` yields one hash of all its values (dedup_truth.py: "docs with fewer than k tokens get a
    single shingle"); the length is mixed in, so it never equals a full n-gram.
    """
    seg_len = (seg_ends - seg_starts).astype(np.int64)
    full = np.maximum(seg_len - n + 1, 0)
    short = (seg_len > 0) & (seg_len < n)
    counts = full + short
    if int(counts.sum()) == 0:
        return np.empty(0, dtype=np.uint64), counts
    m = len(values) - n + 1
    if m > 0:
        # fold contiguous slices (no gathers) at every position, then keep the windows that lie
        # inside one segment: segments are contiguous and in order, so those are exactly the
        # starts s .. e - n of each segment
        acc = values[:m].copy()
        for j in range(1, n):
            acc *= K_COMBINE
            acc += values[j : m + j]
        inside = np.zeros(m + 1, dtype=np.int8)
        ok = full > 0
        np.add.at(inside, seg_starts[ok], 1)
        np.add.at(inside, seg_ends[ok] - n + 1, -1)
        acc = acc[np.cumsum(inside[:m]) > 0]
    else:
        acc = np.empty(0, dtype=np.uint64)
    acc = fmix64(acc + _U64(n))
    if not short.any():
        return acc, counts
    # short segments: fold the fewer-than-n values they have
    sidx = np.flatnonzero(short)
    sstart, slen = seg_starts[sidx].astype(np.int64), seg_len[sidx]
    sacc = np.zeros(len(sidx), dtype=np.uint64)
    for j in range(n - 1):
        live = slen > j
        sacc = np.where(live, sacc * K_COMBINE + values[np.minimum(sstart + j, len(values) - 1)], sacc)
    sacc = fmix64(sacc + slen.astype(np.uint64))
    out = np.empty(int(counts.sum()), dtype=np.uint64)
    first_slot = np.concatenate(([0], np.cumsum(counts)[:-1]))
    is_short_slot = np.zeros(len(out), dtype=bool)
    is_short_slot[first_slot[sidx]] = True
    out[is_short_slot] = sacc
    out[~is_short_slot] = acc
    return out, counts
