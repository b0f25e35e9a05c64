"""Near-duplicate images: pairs of 64-bit perceptual hashes within a Hamming distance, and the greedy
decision of which images a cluster keeps.

The hash is the one ingest stores in each media item (`media[i].phash`, imagehash.phash: the signs of
the 8 x 8 lowest DCT coefficients of the 32 x 32 grey image against their median). A resized,
recompressed or slightly brightened copy lands within a few bits of the original; two different
images land ~32 bits apart. A phash has 32 bits set (a median split of 64 values; all 3,786 emoji
of /work/mm do, only ties such as a blank image's differ), so distances are even: `max_distance` 4
and 5 find the same pairs.

Pair search is a pigeonhole band index (Manku et al., "Detecting near-duplicates for web crawling",
2007): cut the 64 bits into m = d + r contiguous bands; two hashes within distance d differ in at
most d bands, so they agree exactly on at least r of them. One table per combination of r bands:
the hashes sorted by those bands' bits, the hashes of one bucket paired, each candidate verified
with an exact popcount of the XOR. A pair is kept only by the table of its first r agreeing bands
(no duplicates, no set of seen pairs). Recall is exact by construction (tests compare with brute
force); the cost is C(m, r) sorted passes plus the candidates, ~C(m, r) x n^2/2 / 2^(64 r / m) for
uniform hashes. r = 1 is the plain scheme (d + 1 bands, one table each); at d = 4 its 13-bit keys
give 3.7e8 candidates at 1M hashes (3.6 s measured, 62 s at 4M: quadratic), where r = 2 (6 bands,
15 tables of ~21-bit keys) gives 3.1e6 (1.2-1.6 s at 1M, 7.6 s at 4M, 25 s at 10M, on a loaded
2-core machine). `choose_key_bands` picks r from n with a cost model fitted to those runs: r = 1
below ~250k hashes at d = 4.

Memory: the hashes (8 B each) and a row index (8 B) per image, plus ~43 B per hash of transients
while one table is built (key and position packed in one uint64, the sorted hashes, int32 positions;
measured peak 431 MB at 10M); candidates are enumerated by offset inside the sorted buckets, at most
one per hash per step, so nothing grows with a bucket's size squared except the verified pairs.

Deciding: identical hashes are one value (an image re-encoded 10,000 times is one value, not 5e7
pairs), and values are decided greedily in keep-policy order, as near_dedup.py does for text: a
value is removed when a better value within d is kept (linked to the nearest, ties to the better
one), so every removed image is within d of the image kept for it (no chaining A~B~C with A and C
2d apart).
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations
from math import comb

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from platform_assets.schema import Modality

PHASH_BITS = 64


def image_phashes(batch: pa.RecordBatch | pa.Table) -> tuple[np.ndarray, np.ndarray]:
    """(rows, phashes): the rows of `batch` that are image documents with one media item carrying a
    phash, and that hash (uint64). A row with several images is left to exact dedup (its key is all
    its items' bytes); v1/v2 data read as v3 has null phashes and gives no rows."""
    none = np.empty(0, np.int64), np.empty(0, np.uint64)
    names = batch.schema.names
    if "media" not in names or "modality" not in names or batch.num_rows == 0:
        return none
    is_image = pc.equal(batch.column("modality"), Modality.IMAGE.value)
    if not pc.any(is_image).as_py():
        return none  # a text batch: nothing else is computed
    media = batch.column("media")
    one = pc.and_(is_image, pc.equal(pc.list_value_length(media), 1)).fill_null(False)
    rows = np.flatnonzero(one.to_numpy(zero_copy_only=False))
    if len(rows) == 0:
        return none
    items = pc.list_flatten(pc.filter(media, one))  # exactly one item per selected row
    phash = pc.struct_field(items, "phash")
    valid = phash.is_valid().to_numpy(zero_copy_only=False)
    values = phash.fill_null(0).to_numpy(zero_copy_only=False).astype(np.uint64)
    return rows[valid], values[valid]


def band_bounds(max_distance: int, key_bands: int = 1) -> list[tuple[int, int]]:
    """(shift, width) of the max_distance + key_bands bands, contiguous, widths differing by at most
    one bit (d = 4, one key band: 13, 13, 13, 13, 12; d = 0: one band of 64 bits, equal hashes)."""
    m = max_distance + key_bands
    if max_distance < 0 or key_bands < 1 or m > PHASH_BITS:
        raise ValueError(f"need max_distance >= 0, key_bands >= 1 and their sum <= 64, got {max_distance}, {key_bands}")
    out, shift = [], 0
    for b in range(m):
        width = PHASH_BITS // m + (1 if b < PHASH_BITS % m else 0)
        out.append((shift, width))
        shift += width
    return out


# Cost of one table per hash (key, sort, gathers, bucket ends) and of one candidate (gathers, XOR,
# popcount, compare), in ns, measured at 1M random hashes on a 2-core machine (76-80 ns with 35 and
# 15 tables; 3.7e8 candidates in ~3.5 s). Used only to choose the number of key bands: a 2x error
# moves the crossover by a factor of 2 in n, where both choices cost about the same.
_SORT_NS_PER_HASH = 78.0
_NS_PER_CANDIDATE = 10.0


def expected_cost_ns(n: int, max_distance: int, key_bands: int) -> float:
    """Cost model of `near_pairs` for n uniformly random hashes: C(m, r) sorted passes, each with
    n^2/2 / 2^(key bits) candidates (key bits = 64 r / m)."""
    m = max_distance + key_bands
    tables = comb(m, key_bands)
    return tables * (n * _SORT_NS_PER_HASH + n * n / 2 * 2.0 ** (-PHASH_BITS * key_bands / m) * _NS_PER_CANDIDATE)


def choose_key_bands(n: int, max_distance: int) -> int:
    """1 (the plain pigeonhole: d + 1 bands, one table each) up to ~0.4M hashes at d = 4; 2 above
    (d + 2 bands, a table per pair of bands, 15 at d = 4): candidates then fall from n^2 x 3e-4 to
    n^2 x 3e-6, so 10M hashes cost ~15 sorted passes instead of 3e10 candidates."""
    options = [r for r in (1, 2, 3) if max_distance + r <= PHASH_BITS]
    return min(options, key=lambda r: (expected_cost_ns(n, max_distance, r), r))


def _band(hashes: np.ndarray, shift: int, width: int) -> np.ndarray:
    return (hashes >> np.uint64(shift)) & np.uint64((1 << width) - 1)


@dataclass
class PhashPairs:
    """Pairs of positions (left < right) whose hashes are within the distance, each pair once."""

    left: np.ndarray  # int64
    right: np.ndarray  # int64
    distance: np.ndarray  # int8
    candidates: int  # candidate pairs the tables produced (before verification), for metadata
    bands: int
    tables: int  # sorted passes: one per combination of key_bands bands


def near_pairs(hashes: np.ndarray, max_distance: int, key_bands: int | None = None) -> PhashPairs:
    """Every pair of positions of `hashes` (uint64) within Hamming distance `max_distance`.

    With m = max_distance + key_bands bands, two hashes within the distance differ in at most
    max_distance bands, so they agree exactly on at least key_bands of them: one table per
    combination of key_bands bands (the key: those bands' bits) finds every such pair. A pair is
    reported by the table of its first key_bands agreeing bands only. key_bands None: the cheapest
    for len(hashes) (choose_key_bands)."""
    hashes = np.ascontiguousarray(hashes, dtype=np.uint64)
    n = len(hashes)
    r = choose_key_bands(n, max_distance) if key_bands is None else key_bands
    bounds = band_bounds(max_distance, r)
    tables = list(combinations(range(len(bounds)), r))
    lefts: list[np.ndarray] = []
    rights: list[np.ndarray] = []
    dists: list[np.ndarray] = []
    candidates = 0
    index_bits = max(1, (n - 1).bit_length())
    # int32 positions when they fit: less memory, and the loop below is memory-bound (~10% faster)
    pos = np.int32 if n < 2**31 - 1 else np.int64
    for combo in tables:
        if n < 2:
            break
        keys = _band(hashes, *bounds[combo[0]])  # updated in place below: the peak is ~40 B per hash
        for b in combo[1:]:  # the key: the combination's bands side by side (at most 64 bits)
            shift, width = bounds[b]
            keys <<= np.uint64(width)
            keys |= _band(hashes, shift, width)
        key_bits = sum(bounds[b][1] for b in combo)
        if key_bits + index_bits <= PHASH_BITS:
            # key and position in one uint64: a plain sort is ~2x faster than argsort (51 vs 109 ms
            # at 1M) and ties come out in position order, as a stable argsort would give them
            keys <<= np.uint64(index_bits)
            keys |= np.arange(n, dtype=np.uint64)
            keys.sort()
            order = (keys & np.uint64((1 << index_bits) - 1)).astype(pos)
            keys >>= np.uint64(index_bits)
        else:
            by_key = np.argsort(keys, kind="stable")
            keys = keys[by_key]
            order = by_key.astype(pos)
            del by_key
        sorted_h = hashes[order]  # contiguous reads in the loop below, not gathers through `order`
        same = keys[1:] == keys[:-1]  # position i and i + 1 share a bucket
        del keys
        active = np.flatnonzero(same).astype(pos)  # positions with a later member in their bucket
        bucket_last = np.append(np.flatnonzero(~same), n - 1).astype(pos)
        del same
        last = bucket_last[np.searchsorted(bucket_last, active)]  # last position of each one's bucket
        del bucket_last
        # bands before the combination's last that are not in it: agreeing on one of them means an
        # earlier table had this pair
        earlier = [bounds[b] for b in range(combo[-1]) if b not in combo]
        k = 1
        while len(active):
            partner = active + k
            x = sorted_h[active] ^ sorted_h[partner]
            dist = np.bitwise_count(x)
            candidates += len(active)
            hit = np.flatnonzero(dist <= max_distance)
            if len(hit):
                x = x[hit]
                first = np.ones(len(hit), dtype=bool)
                for shift, width in earlier:
                    first &= _band(x, shift, width) != 0
                hit = hit[first]
                i, j = order[active[hit]].astype(np.int64), order[partner[hit]].astype(np.int64)
                lefts.append(np.minimum(i, j))
                rights.append(np.maximum(i, j))
                dists.append(dist[hit].astype(np.int8))
            k += 1
            still = partner < last
            active, last = active[still], last[still]
    if not lefts:
        e = np.empty(0, np.int64)
        return PhashPairs(e, e.copy(), np.empty(0, np.int8), candidates, len(bounds), len(tables))
    return PhashPairs(np.concatenate(lefts), np.concatenate(rights), np.concatenate(dists), candidates,
                      len(bounds), len(tables))


@dataclass
class ImageLinks:
    target: np.ndarray  # int64 per item: -1 (kept), or the index of the kept item it duplicates
    distance: np.ndarray  # int8 per item: Hamming distance to the target; -1 where kept
    distinct: int  # distinct hash values
    candidates: int
    pairs: int  # verified pairs between distinct values
    bands: int
    tables: int


def near_duplicate_links(
    hashes: np.ndarray, priority: np.ndarray, max_distance: int, fixed: np.ndarray | None = None
) -> ImageLinks:
    """Which items are near duplicates of a better one, greedily in `priority` order (lower first,
    all distinct). `fixed` items (earlier runs' accepted images) must rank before every other item;
    they stay kept whatever their neighbours, and an item sharing a fixed item's hash is linked to it."""
    n = len(hashes)
    priority = np.asarray(priority, dtype=np.int64)
    fixed = np.zeros(n, dtype=bool) if fixed is None else np.asarray(fixed, dtype=bool)
    if fixed.any() and (~fixed).any() and priority[fixed].max() > priority[~fixed].min():
        raise ValueError("fixed items must have lower priorities than all other items")
    target = np.full(n, -1, np.int64)
    distance = np.full(n, -1, np.int8)
    if n == 0:
        return ImageLinks(target, distance, 0, 0, 0, 0, 0)
    values, inverse = np.unique(np.asarray(hashes, dtype=np.uint64), return_inverse=True)
    inverse = inverse.reshape(-1)
    # representative of a value: its best member (earlier runs' items have the lowest priorities)
    by_value = np.lexsort((priority, inverse))
    head = np.flatnonzero(np.concatenate(([True], inverse[by_value][1:] != inverse[by_value][:-1])))
    rep = by_value[head]  # item index per value
    value_prio = priority[rep]
    value_fixed = np.zeros(len(values), dtype=bool)
    value_fixed[inverse[fixed]] = True

    pairs = near_pairs(values, max_distance)
    value_target = np.full(len(values), -1, np.int64)
    value_dist = np.zeros(len(values), np.int8)
    if len(pairs.left):
        a, c = pairs.left, pairs.right
        swap = value_prio[a] > value_prio[c]
        better, worse = np.where(swap, c, a), np.where(swap, a, c)
        # per worse value, its better neighbours nearest first, ties to the better one
        o = np.lexsort((value_prio[better], pairs.distance, value_prio[worse]))
        better, worse, dist = better[o], worse[o], pairs.distance[o]
        cut = np.flatnonzero(np.concatenate(([True], worse[1:] != worse[:-1]), dtype=bool))
        bounds = np.append(cut, len(worse))
        kept = np.ones(len(values), dtype=bool)  # decided in priority order: better values come first
        for s, e in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
            v = int(worse[s])
            if value_fixed[v]:
                continue
            ok = np.flatnonzero(kept[better[s:e]])
            if len(ok):
                kept[v] = False
                value_target[v] = better[s + ok[0]]
                value_dist[v] = dist[s + ok[0]]
    removed_value = value_target >= 0
    members = ~fixed
    # members of a removed value go to the kept neighbour's representative
    gone = members & removed_value[inverse]
    target[gone] = rep[value_target[inverse[gone]]]
    distance[gone] = value_dist[inverse[gone]]
    # other members of a kept value are copies of its representative (distance 0)
    same = members & ~removed_value[inverse] & (np.arange(n) != rep[inverse])
    target[same] = rep[inverse[same]]
    distance[same] = 0
    return ImageLinks(target, distance, len(values), pairs.candidates, len(pairs.left), pairs.bands, pairs.tables)


def similarity(distance: np.ndarray) -> np.ndarray:
    """1 - distance / 64 as float32 (exact: k/64 is a dyadic fraction)."""
    return (1.0 - distance.astype(np.float32) / PHASH_BITS).astype(np.float32)
