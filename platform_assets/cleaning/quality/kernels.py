"""Compiled kernels (numba) for the quality rules' per-token loops, one call per document (issue #13).

With numpy, a document's vocabulary took ~25 array calls (character kinds, run edges, packed keys, an
argsort, a dict for tokens longer than 7 characters) and its n-gram repetition checks ~10 calls per
level (a packed sort per level, bounds, a Python loop per duplicate walk): ~0.4 ms of fixed cost per
document plus ~30 MB/s. Here each is one pass in compiled code: tokens as runs of character kinds,
numbered through an open-addressing hash table over their characters (no string per token, no sort);
the n-gram levels through a hash table of (prefix id, last token) pairs; the walks and bounds as
loops. Same tokens, ids, counts and check values as text_view/array_vocab/ngrams define them (those
stay as the reference: tests/unit/test_cleaning_quality_numba.py compares them on adversarial input).

`cache=True` keeps the machine code next to this file (or in NUMBA_CACHE_DIR / the user's cache dir):
a cold process compiles once (~7 CPU-s with line_stats.py's), later ones load it (~0.4 s). Where no
cache location is writable, numba refuses `cache=True` at decoration; the kernels are then compiled in
each process instead (the same ~7 CPU-s per process: give such a deployment a NUMBA_CACHE_DIR).
"""

from __future__ import annotations

import numba
import numpy as np

# Character kinds (array_vocab's tables): 0 space, 1 word character, 2 joiner [-'’.], 3 anything else
SPACE, WORD, JOINER, OTHER = 0, 1, 2, 3
# ngram_check_values: a check whose value is None (nothing repeats, or a bound rules it out), and one
# not computed because an earlier check fired
NO_VALUE, NOT_REACHED = -1, -2
_FNV_OFFSET = np.uint64(0xCBF29CE484222325)
_FNV_PRIME = np.uint64(0x100000001B3)
_FIB = np.uint64(0x9E3779B97F4A7C15)  # 2^64 / golden ratio: Fibonacci hashing of int64 keys


_loaded = False


def load() -> None:
    """Compile or load from the cache every kernel, with the argument types the rules pass, once per
    process: the quality step calls it when built, so that its first document does not pay for it
    (loading ~0.3 s, most of it initialising LLVM; compiling, with a cold cache, ~6 CPU-s)."""
    global _loaded
    if _loaded:
        return
    kinds = np.zeros(256, dtype=np.uint8)
    letters = np.zeros(256, dtype=np.int32)
    ascii_chars = np.frombuffer(b"ab", dtype=np.uint8)  # read-only, as array_vocab's buffers
    for chars in (ascii_chars, np.frombuffer("ab".encode("utf-32-le"), dtype=np.uint32)):
        ids, counts, first, starts, ends = token_vocab(chars, kinds)
        ranges_with_flag(chars, letters, starts, ends)
    lowered_present(ascii_chars, starts, ends, np.zeros(1, dtype=np.uint64))
    ngram_check_values(ids, counts, first, ends - starts, np.zeros(1, dtype=np.int64), np.ones(1, dtype=np.int64),
                       np.zeros(1), 2)
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
    n = _token_runs(chars, kind_table, tok_starts, tok_ends)
    if n < 0:
        tok_starts = np.empty(size, dtype=np.int64)
        tok_ends = np.empty(size, dtype=np.int64)
        n = _token_runs(chars, kind_table, tok_starts, tok_ends)
    ids, first, n_distinct = number_ranges(chars, tok_starts, tok_ends, n)
    counts = np.zeros(n_distinct, dtype=np.int64)
    for t in range(n):
        counts[ids[t]] += 1
    first = first[:n_distinct].copy()
    return ids, counts, first, tok_starts[first], tok_ends[first]


@compiled
def _token_runs(chars, kind_table, tok_starts, tok_ends):
    """Fills the token ranges (token_vocab's runs) and returns how many, or -1 if they do not fit."""
    size = chars.size
    n = 0
    prev_run = 0  # run class per character: 0 space, 1 part of a word, 2 other
    prev_kind = SPACE
    kind = kind_table[chars[0]] if size else SPACE
    for i in range(size):
        next_kind = kind_table[chars[i + 1]] if i + 1 < size else SPACE
        if kind == SPACE:
            run = 0
        elif kind == WORD or (kind == JOINER and prev_kind == WORD and next_kind == WORD):
            run = 1
        else:
            run = 2
        if run != prev_run:
            if prev_run != 0:
                tok_ends[n - 1] = i
            if run != 0:
                if n == tok_starts.size:
                    return -1
                tok_starts[n] = i
                n += 1
        prev_run, prev_kind, kind = run, kind, next_kind
    if prev_run != 0:
        tok_ends[n - 1] = size
    return n


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
    bits = _table_bits(n)
    mask = np.uint64((1 << bits) - 1)
    slots = np.full(1 << bits, -1, dtype=np.int64)  # number per slot
    ids = np.empty(n, dtype=np.int64)
    first = np.empty(n, dtype=np.int64)
    n_distinct = 0
    for t in range(n):
        a, b = starts[t], ends[t]
        h = _FNV_OFFSET
        for i in range(a, b):
            h = (h ^ np.uint64(chars[i])) * _FNV_PRIME
        slot = h & mask
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
def lowered_present(chars, starts, ends, targets):
    """Per packed word in `targets` (sorted; array_vocab._pack: ASCII bytes little-endian, length in
    the top byte): is it some range of the ASCII `chars` once A-Z are lower-cased (str.lower)?"""
    found = np.zeros(targets.size, dtype=np.bool_)
    for r in range(starts.size):
        a, b = starts[r], ends[r]
        if b - a > 7:
            continue
        key = np.uint64(b - a) << np.uint64(56)
        for k in range(b - a):
            c = chars[a + k]
            if 65 <= c <= 90:
                c += 32
            key |= np.uint64(c) << np.uint64(8 * k)
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


@compiled
def _top_chars(n, pos, counts, first, cum):
    """ngrams.top_ngram_chars: characters in the most frequent n-gram's occurrences, or NO_VALUE."""
    top = 0
    for c in counts:
        top = max(top, c)
    if top < 2:
        return NO_VALUE
    at = pos.size
    for g in range(counts.size):
        if counts[g] == top:
            at = min(at, first[g])
    i = pos[at]
    return (cum[i + n] - cum[i] + n - 1) * top


@compiled
def _bounds_rule_out(n, starts, cum, dup_limits, n_chars):
    """True when, for every dup check m >= n, ngrams.repeat_bound or ngrams.union_bound of the
    m-grams at `starts` (the later occurrences at level n) is within its limit: none can fire."""
    n_tokens = cum.size - 1
    for m in range(n, dup_limits.size):
        if np.isnan(dup_limits[m]):
            continue
        limit = dup_limits[m] * n_chars
        total = 0
        union = 0
        run_start = -1
        run_end = -1
        for p in starts:
            if p > n_tokens - m:
                break  # starts increase: no later one fits either
            total += cum[p + m] - cum[p]
            if p >= run_end:  # disjoint from the current run of overlapping m-grams
                if run_start >= 0:
                    union += cum[run_end] - cum[run_start]
                run_start = p
            run_end = p + m
        if total <= limit:
            continue
        if run_start >= 0:
            union += cum[run_end] - cum[run_start]
        if union > limit:
            return False
    return True


@compiled
def _dup_walk(n, pos, gram_ids, first, cum, candidates, stop_above):
    """ngrams.dup_ngram_chars: datatrove's find_all_duplicate, visiting only the later occurrences."""
    jumped = np.empty(candidates.size, dtype=np.int64)  # starts of jumped-over ranges, increasing
    n_jumped = 0
    visited = np.zeros(first.size, dtype=np.bool_)
    next_visited = 0
    repeated = 0
    for c in candidates:
        p = pos[c]
        if p < next_visited:
            continue
        g = gram_ids[c]
        f = pos[first[g]]
        i = np.searchsorted(jumped[:n_jumped], f, side="right") - 1
        first_jumped = i >= 0 and f <= jumped[i] + n - 2
        if not first_jumped or visited[g]:
            repeated += cum[p + n] - cum[p]
            if repeated > stop_above:
                return repeated
            jumped[n_jumped] = p + 1
            n_jumped += 1
            next_visited = p + n
        else:
            visited[g] = True
    return repeated


@compiled
def _next_level(n, pos, gram_ids, counts, word_ids, n_distinct):
    """ngrams.ngram_levels' step to level n: the n-grams at the positions where level n - 1 repeats
    (and an n-gram fits), numbered by a hash table of (prefix id, last token) in order of first
    appearance (ngrams numbers them by sorted key; only equality matters to the checks)."""
    n_tokens = word_ids.size
    m = 0
    for i in range(pos.size):
        if pos[i] > n_tokens - n:
            break
        if counts[gram_ids[i]] >= 2:
            m += 1
    new_pos = np.empty(m, dtype=np.int64)
    new_ids = np.empty(m, dtype=np.int64)
    new_counts = np.zeros(m, dtype=np.int64)
    new_first = np.empty(m, dtype=np.int64)
    if m < 2:
        return new_pos, new_ids, new_counts, new_first
    bits = _table_bits(m)
    shift = np.uint64(64 - bits)
    slot_keys = np.full(1 << bits, -1, dtype=np.int64)
    slot_ids = np.empty(1 << bits, dtype=np.int64)
    mask = np.uint64((1 << bits) - 1)
    n_grams = 0
    j = 0
    for i in range(pos.size):
        if j == m:
            break
        if counts[gram_ids[i]] < 2:
            continue
        p = pos[i]
        key = gram_ids[i] * n_distinct + word_ids[p + n - 1]
        slot = (np.uint64(key) * _FIB) >> shift
        while True:
            k = slot_keys[slot]
            if k == key:
                g = slot_ids[slot]
                break
            if k < 0:
                g = n_grams
                n_grams += 1
                slot_keys[slot], slot_ids[slot] = key, g
                new_first[g] = j
                break
            slot = (slot + np.uint64(1)) & mask
        new_pos[j], new_ids[j] = p, g
        new_counts[g] += 1
        j += 1
    return new_pos, new_ids, new_counts[:n_grams], new_first[:n_grams]


@compiled
def ngram_check_values(word_ids, counts, first, lengths, kinds, ns, limits, n_chars):
    """GopherRepetition's n-gram checks on one document, in their order (`kinds` 0 top, 1 dup; `ns`;
    `limits`): each check's value in characters (int64), NO_VALUE where it has none (as ngrams' None),
    NOT_REACHED after the first that fires (value / n_chars > limit). As gopher_repetition.py ran
    them: levels computed as long as a check needs one and something repeats; a dup check whose level
    has no later occurrence, or whose bounds rule out every dup check from its n on, has no value for
    all of those; otherwise its walk stops once past its limit (that partial total is its value)."""
    n_checks = kinds.size
    max_n = 0
    for n in ns:
        max_n = max(max_n, n)
    is_top = np.zeros(max_n + 1, dtype=np.bool_)
    dup_limits = np.full(max_n + 1, np.nan)
    for c in range(n_checks):
        if kinds[c] == 0:
            is_top[ns[c]] = True
        else:
            dup_limits[ns[c]] = limits[c]
    top_values = np.full(max_n + 1, NOT_REACHED, dtype=np.int64)
    dup_values = np.full(max_n + 1, NOT_REACHED, dtype=np.int64)
    values = np.full(n_checks, NOT_REACHED, dtype=np.int64)
    n_tokens = word_ids.size
    cum = np.zeros(n_tokens + 1, dtype=np.int64)  # characters before each token
    for t in range(n_tokens):
        cum[t + 1] = cum[t] + lengths[word_ids[t]]
    pos = np.arange(n_tokens)
    gram_ids, gram_counts, gram_first = word_ids, counts, first
    n_distinct = counts.size
    check = 0
    n = 1
    while True:
        if is_top[n]:
            top_values[n] = _top_chars(n, pos, gram_counts, gram_first, cum)
        if not np.isnan(dup_limits[n]) and dup_values[n] == NOT_REACHED:
            is_later = np.ones(pos.size, dtype=np.bool_)
            is_later[gram_first] = False
            later = np.flatnonzero(is_later)
            if later.size == 0 or _bounds_rule_out(n, pos[later], cum, dup_limits, n_chars):
                for m in range(n, max_n + 1):
                    if not np.isnan(dup_limits[m]):
                        dup_values[m] = NO_VALUE
            else:
                dup_values[n] = _dup_walk(n, pos, gram_ids, gram_first, cum, later, dup_limits[n] * n_chars)
        while check < n_checks:
            value = top_values[ns[check]] if kinds[check] == 0 else dup_values[ns[check]]
            if value == NOT_REACHED:
                break
            values[check] = value
            check += 1
            if value != NO_VALUE and value / n_chars > limits[check - 1]:
                return values
        if check == n_checks or n == max_n:
            break
        n += 1
        pos, gram_ids, gram_counts, gram_first = _next_level(n, pos, gram_ids, gram_counts, word_ids, n_distinct)
        if pos.size < 2:
            break
    # the levels stopped (nothing repeats at the sizes not measured): those checks have no value
    while check < n_checks:
        value = top_values[ns[check]] if kinds[check] == 0 else dup_values[ns[check]]
        values[check] = NO_VALUE if value == NOT_REACHED else value
        check += 1
        if values[check - 1] != NO_VALUE and values[check - 1] / n_chars > limits[check - 1]:
            return values
    return values
