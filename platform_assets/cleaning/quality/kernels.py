"""Compiled kernels (numba) for the quality rules' per-token loops, one call per document (issue #13).

With numpy, a document's vocabulary took ~25 array calls (character kinds, run edges, packed keys, an
argsort, a dict for tokens longer than 7 characters) and its n-gram repetition checks ~10 calls per
level (a packed sort per level, bounds, a Python loop per duplicate walk): ~0.4 ms of fixed cost per
document plus ~30 MB/s. Here each is one pass in compiled code: tokens as runs of character kinds,
numbered through an open-addressing hash table over their characters (no string per token, no sort);
the n-gram levels, walks and bounds in ngram_kernels.py. Same tokens, ids, counts and check values as
text_view/array_vocab/ngrams define them (those stay as the reference:
tests/unit/test_cleaning_quality_numba.py compares them on adversarial input).

`cache=True` keeps the machine code in a folder of the platform's cache named for the kernels'
sources (cache_dir.kernel_cache_dir: numba's own default, beside the sources, can keep a stale callee
of another module; NUMBA_CACHE_DIR, where set, is used as it is): a cold process compiles once (~7
CPU-s with line_stats.py's and ngram_kernels.py's), later ones load it (~0.4 s). Where no cache
location is writable, numba refuses `cache=True` at decoration; the kernels are then compiled in each
process instead (the same ~7 CPU-s per process: give such a deployment a NUMBA_CACHE_DIR).
"""

from __future__ import annotations

from pathlib import Path

import numba
import numpy as np

from platform_assets.cache_dir import kernel_cache_dir

# Before the first @compiled below: numba picks a function's cache folder when it is decorated
_KERNEL_CACHE = kernel_cache_dir(Path(__file__).resolve().parents[1])  # every kernel is under cleaning/
if _KERNEL_CACHE is not None:
    numba.config.CACHE_DIR = str(_KERNEL_CACHE)

# Character kinds (array_vocab's tables): 0 space, 1 word character, 2 joiner [-'’.], 3 anything else
SPACE, WORD, JOINER, OTHER = 0, 1, 2, 3
NOT_ASCII_LOWER = 255  # lowered_present's table value for a character str.lower makes no ASCII character of
_FNV_OFFSET = np.uint64(0xCBF29CE484222325)
_FNV_PRIME = np.uint64(0x100000001B3)
_FIB = np.uint64(0x9E3779B97F4A7C15)  # 2^64 / golden ratio: Fibonacci hashing of int64 keys


_loaded = False


def load() -> None:
    """Compile or load from the cache every kernel, with the argument types the rules pass, once per
    process: the quality step calls it before its first batch (Step.load), so that its first document
    does not pay for it (loading ~0.3 s, most of it initialising LLVM; compiling, with a cold cache, ~6
    CPU-s)."""
    global _loaded
    if _loaded:
        return
    from platform_assets.cleaning.quality.array_vocab import lower_to_ascii

    kinds = np.zeros(256, dtype=np.uint8)
    letters = np.zeros(256, dtype=np.int32)
    ascii_chars = np.frombuffer(b"ab", dtype=np.uint8)  # read-only, as array_vocab's buffers
    for chars in (ascii_chars, np.frombuffer("ab".encode("utf-32-le"), dtype=np.uint32)):
        _, _, _, starts, ends = token_vocab(chars, kinds)
        ranges_with_flag(chars, letters, starts, ends)
        token_count(chars, kinds)
        lowered_present(chars, starts, ends, np.zeros(1, dtype=np.uint64), lower_to_ascii(chars.itemsize))
    _loaded = True


def compiled(func):
    """numba.njit with the machine code cached on disk, without the GIL (a kernel only reads and
    writes its own arrays)."""
    try:
        return numba.njit(cache=True, nogil=True)(func)
    except RuntimeError:  # "no locator available": nowhere writable to cache, compile in each process
        return numba.njit(nogil=True)(func)


@compiled
def _table_bits(m):
    """log2 of a hash table with at least 2 slots per key (load <= 0.5: short probe runs)."""
    bits = 1
    while (1 << bits) < 2 * m:
        bits += 1
    return bits


@compiled
def token_vocab(chars, kind_table):
    """The vocabulary of a text given as code points (`chars`, uint8 for ASCII, else uint32 below
    0x10000) and a kind per code point: (ids, counts, first, starts, ends) with text_view.Vocab's
    ids/counts/first (distinct tokens numbered in order of first appearance) and each distinct token's
    character range.

    A token is a maximal run of word characters (with a joiner between two word characters) or of
    other non-space characters: exactly the matches of text_view's `\\w+(?:[-'’.]\\w+)*|[^\\w\\s]+`.
    """
    # Token ranges in arrays of 1 slot per 4 characters (English has ~1 token per 5.5; 16 bytes per
    # character for a 100 MB document would be 1.6 GB of address space), one per character only for
    # text denser than that (a second pass)
    size = chars.size
    tok_starts = np.empty(size // 4 + 16, dtype=np.int64)
    tok_ends = np.empty(size // 4 + 16, dtype=np.int64)
    tok_hashes = np.empty(size // 4 + 16, dtype=np.uint64)
    tok_keys = np.empty(size // 4 + 16, dtype=np.uint64)
    n = _token_runs(chars, kind_table, tok_starts, tok_ends, tok_hashes, tok_keys)
    if n < 0:
        tok_starts = np.empty(size, dtype=np.int64)
        tok_ends = np.empty(size, dtype=np.int64)
        tok_hashes = np.empty(size, dtype=np.uint64)
        tok_keys = np.empty(size, dtype=np.uint64)
        n = _token_runs(chars, kind_table, tok_starts, tok_ends, tok_hashes, tok_keys)
    # a token of up to this many characters is its packed key (_token_runs; 16 bits a character hold
    # only code points below 0x10000, which array_vocab guarantees and this checks)
    exact_len = 8 if chars.itemsize == 1 else (4 if size == 0 or chars.max() < 0x10000 else 0)
    ids, first, n_distinct = _number_keyed_ranges(chars, tok_starts, tok_ends, tok_hashes, tok_keys, n, exact_len)
    counts = np.zeros(n_distinct, dtype=np.int64)
    for t in range(n):
        counts[ids[t]] += 1
    first = first[:n_distinct].copy()
    return ids, counts, first, tok_starts[first], tok_ends[first]


@compiled
def _run_class(prev_kind, kind, next_kind):
    """A character's run class from its kind and its neighbours': 0 space, 1 part of a word (a joiner
    such as an apostrophe between two word characters too), 2 other."""
    if kind == SPACE:
        return 0
    if kind == WORD or (kind == JOINER and prev_kind == WORD and next_kind == WORD):
        return 1
    return 2


@compiled
def _token_runs(chars, kind_table, tok_starts, tok_ends, tok_hashes, tok_keys):
    """Fills the token ranges (token_vocab's runs), their FNV-1a hashes (number_ranges') and their
    packed keys (the last characters that fit in 64 bits: 8 bits each for ASCII text, 16 for the BMP),
    and returns how many, or -1 if they do not fit. Hashing here, while each character is read anyway,
    rather than in a second pass over each token: token_vocab 0.160 -> 0.135 CPU-s on cleaning_stage's
    English documents; the key is a second shift-or chain beside the hash's multiply chain."""
    size = chars.size
    unit = np.uint64(8 * min(chars.itemsize, 2))
    n = 0
    prev_run = 0  # run class per character: 0 space, 1 part of a word, 2 other
    prev_kind = SPACE
    kind = kind_table[chars[0]] if size else SPACE
    h = _FNV_OFFSET
    key = np.uint64(0)
    for i in range(size):
        next_kind = kind_table[chars[i + 1]] if i + 1 < size else SPACE
        run = _run_class(prev_kind, kind, next_kind)
        if run != prev_run:
            if prev_run != 0:
                tok_ends[n - 1], tok_hashes[n - 1], tok_keys[n - 1] = i, h, key
            if run != 0:
                if n == tok_starts.size:
                    return -1
                tok_starts[n] = i
                n += 1
            h = _FNV_OFFSET
            key = np.uint64(0)
        c = np.uint64(chars[i])
        h = (h ^ c) * _FNV_PRIME  # of the run so far (a space run's is never read)
        key = (key << unit) | c
        prev_run, prev_kind, kind = run, kind, next_kind
    if prev_run != 0:
        tok_ends[n - 1], tok_hashes[n - 1], tok_keys[n - 1] = size, h, key
    return n


@compiled
def token_count(chars, kind_table):
    """How many tokens token_vocab finds (its runs, counted: no range, hash or number kept)."""
    size = chars.size
    n = 0
    prev_run = 0
    prev_kind = SPACE
    kind = kind_table[chars[0]] if size else SPACE
    for i in range(size):
        next_kind = kind_table[chars[i + 1]] if i + 1 < size else SPACE
        run = _run_class(prev_kind, kind, next_kind)
        n += run != prev_run and run != 0
        prev_run, prev_kind, kind = run, kind, next_kind
    return n


@compiled
def _number_keyed_ranges(chars, starts, ends, hashes, keys, n, exact_len):
    """number_hashed_ranges given also each range's packed key (_token_runs): a range of at most
    `exact_len` characters is its key and its length, so equal keys and lengths settle equality
    without comparing characters (89% of cleaning_stage's English tokens), and the hash, key and length
    of each number sit side by side rather than behind `first` and the ranges; longer ranges compare
    characters. Probed from the FNV-1a hash as number_hashed_ranges is: the same numbers, in the same
    order. token_vocab 0.151 -> 0.142 CPU-s on cleaning_stage's English documents (same process, 6
    alternating rounds)."""
    bits = _table_bits(n)
    mask = np.uint64((1 << bits) - 1)
    slots = np.full(1 << bits, -1, dtype=np.int64)  # number per slot
    ids = np.empty(n, dtype=np.int64)
    first = np.empty(n, dtype=np.int64)
    d_hash = np.empty(n, dtype=np.uint64)  # per number
    d_key = np.empty(n, dtype=np.uint64)
    d_len = np.empty(n, dtype=np.int64)
    n_distinct = 0
    for t in range(n):
        length = ends[t] - starts[t]
        h, key = hashes[t], keys[t]
        slot = h & mask
        while True:
            d = slots[slot]
            if d < 0:
                d = n_distinct
                n_distinct += 1
                slots[slot] = d
                first[d] = t
                d_hash[d], d_key[d], d_len[d] = h, key, length
                break
            if d_hash[d] == h and d_key[d] == key and d_len[d] == length:
                if length <= exact_len:
                    break
                if same_run(chars, starts[first[d]], chars, starts[t], length):
                    break
            slot = (slot + np.uint64(1)) & mask
        ids[t] = d
    return ids, first, n_distinct


@compiled
def same_run(x, x_start, y, y_start, n):
    """x[x_start:x_start + n] equals y[y_start:y_start + n], element by element (no slices made)."""
    for k in range(n):
        if x[x_start + k] != y[y_start + k]:
            return False
    return True


@compiled
def number_ranges(chars, starts, ends, n):
    """Ranges [starts[i], ends[i]) of `chars` (i < n) numbered by content in order of first appearance,
    through an open-addressing table hashed by FNV-1a over their characters: (ids, first range of
    each number, how many numbers)."""
    hashes = np.empty(n, dtype=np.uint64)
    for t in range(n):
        h = _FNV_OFFSET
        for i in range(starts[t], ends[t]):
            h = (h ^ np.uint64(chars[i])) * _FNV_PRIME
        hashes[t] = h
    return number_hashed_ranges(chars, starts, ends, hashes, n)


@compiled
def number_hashed_ranges(chars, starts, ends, hashes, n):
    """number_ranges given each range's hash (equal ranges, equal hashes)."""
    bits = _table_bits(n)
    mask = np.uint64((1 << bits) - 1)
    slots = np.full(1 << bits, -1, dtype=np.int64)  # number per slot
    ids = np.empty(n, dtype=np.int64)
    first = np.empty(n, dtype=np.int64)
    n_distinct = 0
    for t in range(n):
        a, b = starts[t], ends[t]
        slot = hashes[t] & mask
        while True:
            d = slots[slot]
            if d < 0:
                d = n_distinct
                n_distinct += 1
                slots[slot] = d
                first[d] = t
                break
            da = starts[first[d]]
            if ends[first[d]] - da == b - a and same_run(chars, da, chars, a, b - a):
                break
            slot = (slot + np.uint64(1)) & mask
        ids[t] = d
    return ids, first, n_distinct


@compiled
def _edge_key(chars, a, b):
    """The first and the last (up to) 4 code points of chars[a:b], 16 bits each (the BMP's width)."""
    head = tail = np.uint64(0)
    for k in range(min(4, b - a)):
        head |= np.uint64(chars[a + k]) << np.uint64(16 * k)
        tail |= np.uint64(chars[b - 1 - k]) << np.uint64(16 * k)
    return head, tail


@compiled
def repeated_ranges(chars, starts, ends, n):
    """(ranges equal to an earlier one, characters in them) among [starts[i], ends[i]) of `chars`, i < n:
    what number_ranges and the first range of each number give (text_view.duplicates), hashing all the
    characters only of the ranges that share their length and first and last 4 characters with another
    (lines and paragraphs of prose rarely do; 30% of the line characters of cleaning_stage's English
    documents, most of them code's repeated lines, are hashed): Gopher's paragraphs 0.054 -> 0.033
    CPU-s there, its lines 0.058 -> 0.051."""
    bits = _table_bits(n)
    shift = np.uint64(64 - bits)
    mask = np.uint64((1 << bits) - 1)
    slot_range = np.full(1 << bits, -1, dtype=np.int64)  # the first range with the slot's key
    slot_count = np.zeros(1 << bits, dtype=np.int64)
    range_slot = np.empty(n, dtype=np.int64)
    for t in range(n):
        a, b = starts[t], ends[t]
        head, tail = _edge_key(chars, a, b)
        slot = (((np.uint64(b - a) * _FIB ^ head) * _FIB ^ tail) * _FIB) >> shift
        while True:
            r = slot_range[slot]
            if r < 0:
                slot_range[slot] = t
                break
            if ends[r] - starts[r] == b - a:
                r_head, r_tail = _edge_key(chars, starts[r], ends[r])
                if r_head == head and r_tail == tail:
                    break
            slot = (slot + np.uint64(1)) & mask
        slot_count[slot] += 1
        range_slot[t] = slot
    m = 0
    for t in range(n):
        m += slot_count[range_slot[t]] >= 2
    shared_starts = np.empty(m, dtype=np.int64)
    shared_ends = np.empty(m, dtype=np.int64)
    j = 0
    for t in range(n):
        if slot_count[range_slot[t]] >= 2:
            shared_starts[j], shared_ends[j] = starts[t], ends[t]
            j += 1
    _, first, n_distinct = number_ranges(chars, shared_starts, shared_ends, m)
    repeated_chars = 0
    for t in range(m):
        repeated_chars += shared_ends[t] - shared_starts[t]
    for d in range(n_distinct):
        repeated_chars -= shared_ends[first[d]] - shared_starts[first[d]]
    return m - n_distinct, repeated_chars


@compiled
def lowered_present(chars, starts, ends, targets, lower):
    """Per packed word in `targets` (sorted; array_vocab._pack: ASCII bytes little-endian, length in
    the top byte): is it some range of `chars` once lower-cased? `lower` maps a code point to the one
    ASCII character str.lower makes of it, or to NOT_ASCII_LOWER (array_vocab.lower_to_ascii)."""
    found = np.zeros(targets.size, dtype=np.bool_)
    for r in range(starts.size):
        a, b = starts[r], ends[r]
        if b - a > 7:
            continue
        key = np.uint64(b - a) << np.uint64(56)
        for k in range(b - a):
            c = lower[chars[a + k]]
            if c == NOT_ASCII_LOWER:
                break
            key |= np.uint64(c) << np.uint64(8 * k)
        else:
            i = np.searchsorted(targets, key)
            if i < targets.size and targets[i] == key:
                found[i] = True
    return found


@compiled
def ranges_with_flag(chars, flag_table, starts, ends):
    """Per range [starts[i], ends[i]): does it hold a character whose flag is set?"""
    out = np.zeros(starts.size, dtype=np.bool_)
    for r in range(starts.size):
        for i in range(starts[r], ends[r]):
            if flag_table[chars[i]]:
                out[r] = True
                break
    return out
