"""Vectorised 64-bit hashing primitives (numpy, wrap-around uint64 arithmetic).

Everything here is a pure function of its input bytes and fixed constants, so hashes are the same on
every machine and run; signatures persisted by one run are valid in the next. Bump
`HASH_SCHEME_VERSION` whenever an output of this module (or of shingles.py) changes.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
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
    t = x >> _S33
    t ^= x
    return _fmix64_tail(t)


def fmix64_inplace(x: np.ndarray) -> np.ndarray:
    """`fmix64` computed in `x` itself (one temporary instead of four): returns `x`."""
    t = x >> _S33
    x ^= t
    return _fmix64_tail(x, t)


def _fmix64_tail(x: np.ndarray, t: np.ndarray | None = None) -> np.ndarray:
    # x already holds x ^ (x >> 33); t: a scratch array of x's shape
    x *= _M1
    t = np.right_shift(x, _S33, out=t)
    x ^= t
    x *= _M2
    np.right_shift(x, _S33, out=t)
    x ^= t
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
    first = words[starts]
    first &= _BYTE_MASKS[np.minimum(lengths, 8)]
    out = first * GOLDEN
    out ^= out >> _S29
    longer = np.flatnonzero(lengths > 8)
    if len(longer) == 0:
        return out
    ln = lengths[longer]
    vec = ln <= vector_max_bytes
    if vec.all():
        vec, tail = longer, longer[:0]
    else:
        vec, tail, ln = longer[vec], longer[~vec], ln[vec]
    if len(vec):
        _fold_words(words, starts, first, vec, ln, out)
    for i in tail:
        a = int(starts[i])
        out[i] = xxhash.xxh3_64_intdigest(data[a : a + int(lengths[i])].tobytes())
    return out


def string_hashes(strings: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """A 64-bit hash of each string of an Arrow string array (hash_byte_spans of its bytes, nulls as
    empty): equal strings hash equal; unequal ones may collide (a NUL byte, or chance), so an equal hash
    is only a candidate. Costs one copy of the character data (the 8 bytes of padding it needs)."""
    strings = strings.cast(pa.string())
    if isinstance(strings, pa.ChunkedArray):
        strings = strings.combine_chunks()
    if not len(strings):
        return np.empty(0, np.uint64)
    offsets = np.frombuffer(strings.buffers()[1], np.int32, len(strings) + 1, 4 * strings.offset).astype(np.int64)
    raw = strings.buffers()[2]
    data = np.zeros(int(offsets[-1] - offsets[0]) + 8, np.uint8)  # read 8 bytes past a string's start
    if raw is not None:
        data[: int(offsets[-1] - offsets[0])] = np.frombuffer(raw, np.uint8, int(offsets[-1] - offsets[0]),
                                                               int(offsets[0]))
    return hash_byte_spans(data, offsets[:-1] - offsets[0], np.diff(offsets))


def _fold_words(
    words: np.ndarray, starts: np.ndarray, first: np.ndarray, idx: np.ndarray, ln: np.ndarray, out: np.ndarray
) -> None:
    """out[idx] = hashes of the strings of 9+ bytes at starts[idx] (lengths `ln`): the first 8-byte
    word and the length, then every further (partial) word folded in order,
    h = fmix64((h ^ w) * K_COMBINE)."""
    s = starts[idx]
    h = first[idx]
    h ^= ln.astype(np.uint64) * K_COMBINE
    h *= GOLDEN
    fmix64_inplace(h)
    _fold_from(words, s, ln, h, 1)
    out[idx] = h


def _fold_from(words: np.ndarray, s: np.ndarray, ln: np.ndarray, h: np.ndarray, c: int) -> None:
    """Fold words c, c + 1, ... of strings that all have more than 8 c bytes into `h`, in place.

    Word c goes over all of them as contiguous arrays; only the strings with more words (~15 % of
    the 9+ byte tokens have 17+) go on, as a gathered subset."""
    while True:
        w = words[s + 8 * c]
        w &= _BYTE_MASKS[np.minimum(ln - 8 * c, 8)]
        h ^= w
        h *= K_COMBINE
        fmix64_inplace(h)
        more = np.flatnonzero(ln > 8 * (c + 1))
        if len(more) == 0:
            return
        if len(more) < len(ln):
            sub = h[more]
            _fold_from(words, s[more], ln[more], sub, c + 1)
            h[more] = sub
            return
        c += 1


def _window_inside(
    seg_starts: np.ndarray, seg_ends: np.ndarray, full: np.ndarray, m: int, n: int, n_values: int
) -> np.ndarray:
    """Mask of the m window starts whose n values lie inside one segment."""
    tiling = n_values and seg_starts[0] == 0 and seg_ends[-1] == n_values
    if tiling and np.array_equal(seg_starts[1:], seg_ends[:-1]):
        # the segments tile the values (word shingles): every window is inside but the last
        # min(length, n - 1) starts of each segment, ~1 % of them
        inside = np.ones(m, dtype=bool)
        last = seg_ends[:, None] - np.arange(1, n, dtype=np.int64)[None, :]
        out = last[(last >= seg_starts[:, None]) & (last < m)]
        inside[out] = False
        return inside
    inside = np.zeros(m + 1, dtype=np.int8)
    ok = full > 0
    np.add.at(inside, seg_starts[ok], 1)
    np.add.at(inside, seg_ends[ok] - n + 1, -1)
    return np.cumsum(inside[:m]) > 0


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
        acc = values[:m] * K_COMBINE if n > 1 else values[:m].copy()
        for j in range(1, n):
            acc += values[j : m + j]
            if j < n - 1:
                acc *= K_COMBINE
        acc = acc[_window_inside(seg_starts, seg_ends, full, m, n, len(values))]
    else:
        acc = np.empty(0, dtype=np.uint64)
    acc += _U64(n)
    fmix64_inplace(acc)
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


def id_hashes(ids: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """A 64-bit hash of each string (uint64): the ids' in dedup's write pass (keep_lookup.py) and in the
    id-uniqueness checks, each confirming equal hashes on the strings."""
    return fmix64_inplace(string_hashes(ids))
