"""Gopher repetition's n-gram checks as one compiled call per document (issue #13): the levels, bounds
and duplicate walks of ngrams.py (the reference form, which the tests compare these with), over the
token ids of text_view.Vocab.

Level n holds the n-grams at the positions where level n - 1 repeats, numbered through a hash table of
(prefix id, last token) pairs. Two things skip levels: a top check whose value cannot pass its limit
(`top_bound`, from the vocabulary alone) needs no level, and a level that no remaining check reads is
not built: the next needed one is made from the last one built (`_jump_level`, a hash of the prefix id
and the tokens after it). On the benchmark's English documents (cleaning_stage: 1,850 documents, 5.2M
tokens) the tops are ruled out for 1,728 (n = 2), 1,453 (3) and 933 (4) of them, and the positions
the levels take in fall from 12.9M to ~7.1M (counted from ngrams.py's levels); ngram_check_values
0.217 -> 0.161 CPU-s, 0.128 with _jump_level's hash count.
"""

from __future__ import annotations

import numpy as np

from platform_assets.cleaning.quality.kernels import _table_bits, compiled

# ngram_check_values: a check whose value is None (nothing repeats, or a bound rules it out), and one
# not computed because an earlier check fired
NO_VALUE, NOT_REACHED = -1, -2
_FIB = np.uint64(0x9E3779B97F4A7C15)  # 2^64 / golden ratio: Fibonacci hashing of int64 keys
_MIX = np.uint64(0xFF51AFD7ED558CCD)  # murmur3's finaliser constant


def load() -> None:
    """Compile or load from the cache every kernel here, with the argument types the rules pass, once
    per process (the quality step's load calls it)."""
    ids = np.array([0, 1, 0, 1, 0, 1], dtype=np.int64)
    counts = np.array([3, 3], dtype=np.int64)
    first = np.array([0, 1], dtype=np.int64)
    lengths = np.ones(2, dtype=np.int64)
    ngram_check_values(ids, counts, first, lengths, np.array([0, 1], dtype=np.int64),
                       np.array([3, 5], dtype=np.int64), np.array([1.0, 1.0]), 11)


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
def top_bound(n, counts, lengths):
    """An upper bound of ngrams.top_ngram_chars at level n from the vocabulary alone: each of the top
    n-gram's c occurrences holds each of its tokens, so each of them occurs c times or more and is at
    most as long as the longest token that does; its value c * (sum of lengths + n - 1) is therefore at
    most max over tokens t occurring twice or more of counts[t] * (n * lengths[t] + n - 1) (0 when
    nothing repeats, where the value is None)."""
    bound = 0
    for t in range(counts.size):
        if counts[t] >= 2:
            bound = max(bound, counts[t] * (n * lengths[t] + n - 1))
    return bound


@compiled
def _jump_level(k, n, pos, gram_ids, counts, word_ids, word_counts):
    """Level n from level k < n - 1 (the levels between are read by no check): the n-grams at the
    positions where level k repeats, an n-gram fits, each of the n - k tokens after the k-gram occurs
    twice or more and the n-gram's hash is seen twice or more, numbered by a hash table over (k-gram
    id, those tokens) in order of first appearance. Every occurrence of an n-gram that occurs twice is
    there (its k-gram, tokens and hash repeat), so the values read from it equal those of the levels
    stepped through (the other positions are n-grams seen once: no top, never a later occurrence).

    The hashes are first counted in a table of one byte per slot, >= 8 slots per position: most
    positions of prose hold an n-gram seen once, which then never reaches the exact table (16 bytes
    a slot, a comparison of n - k tokens per probe): level 5 from level 1 on cleaning_stage's English
    documents takes 4.70M positions, of which 1.49M reach the exact table (ngram_check_values 0.115 ->
    0.101 CPU-s there)."""
    n_tokens = word_ids.size
    hashes = np.zeros(pos.size, dtype=np.uint64)
    keep = np.zeros(pos.size, dtype=np.bool_)
    m = 0
    for i in range(pos.size):
        p = pos[i]
        if p > n_tokens - n:
            break
        if counts[gram_ids[i]] < 2:
            continue
        ok = True
        h = np.uint64(gram_ids[i])
        for q in range(p + k, p + n):
            if word_counts[word_ids[q]] < 2:
                ok = False
                break
            h = (h ^ (h >> np.uint64(31))) * _MIX ^ np.uint64(word_ids[q])
        if ok:
            hashes[i] = (h ^ (h >> np.uint64(29))) * _FIB
            keep[i] = True
            m += 1
    if m >= 2:  # hashes seen once cannot be an n-gram seen twice
        seen_shift = np.uint64(64 - _table_bits(4 * m))
        seen = np.zeros(1 << _table_bits(4 * m), dtype=np.uint8)
        for i in range(pos.size):
            if keep[i]:
                b = hashes[i] >> seen_shift
                if seen[b] < 2:
                    seen[b] += 1
        m = 0
        for i in range(pos.size):
            if keep[i]:
                if seen[hashes[i] >> seen_shift] < 2:
                    keep[i] = False
                else:
                    m += 1
    new_pos = np.empty(m, dtype=np.int64)
    new_ids = np.empty(m, dtype=np.int64)
    new_counts = np.zeros(m, dtype=np.int64)
    new_first = np.empty(m, dtype=np.int64)
    if m < 2:
        return new_pos, new_ids, new_counts, new_first
    bits = _table_bits(m)
    shift = np.uint64(64 - bits)
    mask = np.uint64((1 << bits) - 1)
    slot_hashes = np.empty(1 << bits, dtype=np.uint64)
    slot_ids = np.full(1 << bits, -1, dtype=np.int64)
    prefixes = np.empty(m, dtype=np.int64)  # each n-gram's k-gram id
    n_grams = 0
    j = 0
    for i in range(pos.size):
        if j == m:
            break
        if not keep[i]:
            continue
        p, prefix, h = pos[i], gram_ids[i], hashes[i]
        slot = h >> shift
        while True:
            g = slot_ids[slot]
            if g < 0:
                g = n_grams
                n_grams += 1
                slot_ids[slot], slot_hashes[slot] = g, h
                new_first[g], prefixes[g] = j, prefix
                break
            if slot_hashes[slot] == h and prefixes[g] == prefix:
                r = new_pos[new_first[g]]
                same = True
                for q in range(k, n):
                    if word_ids[r + q] != word_ids[p + q]:
                        same = False
                        break
                if same:
                    break
            slot = (slot + np.uint64(1)) & mask
        new_pos[j], new_ids[j] = p, g
        new_counts[g] += 1
        j += 1
    return new_pos, new_ids, new_counts[:n_grams], new_first[:n_grams]


@compiled
def _needed(m, is_top, top_values, dup_limits, dup_values):
    """Does a check still need level m?"""
    return (is_top[m] and top_values[m] == NOT_REACHED) or (
        not np.isnan(dup_limits[m]) and dup_values[m] == NOT_REACHED)


@compiled
def ngram_check_values(word_ids, counts, first, lengths, kinds, ns, limits, n_chars):
    """GopherRepetition's n-gram checks on one document, in their order (`kinds` 0 top, 1 dup; `ns`;
    `limits`): each check's value in characters (int64), NO_VALUE where it has none (as ngrams' None),
    NOT_REACHED after the first that fires (value / n_chars > limit). As gopher_repetition.py ran
    them: a top check whose top_bound cannot pass its limit has no value (it cannot fire); levels
    computed as long as a check needs one and something repeats; a dup check whose level has no later
    occurrence, or whose bounds rule out every dup check from its n on, has no value for all of those;
    otherwise its walk stops once past its limit (that partial total is its value)."""
    n_checks = kinds.size
    max_n = 0
    for n in ns:
        max_n = max(max_n, n)
    is_top = np.zeros(max_n + 1, dtype=np.bool_)
    dup_limits = np.full(max_n + 1, np.nan)
    top_values = np.full(max_n + 1, NOT_REACHED, dtype=np.int64)
    for c in range(n_checks):
        if kinds[c] == 0:
            is_top[ns[c]] = True
            # the same comparison as the check's, on a value at least as large: if it does not fire
            # on the bound, it cannot fire on the value
            if not top_bound(ns[c], counts, lengths) / n_chars > limits[c]:
                top_values[ns[c]] = NO_VALUE
        else:
            dup_limits[ns[c]] = limits[c]
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
        if is_top[n] and top_values[n] == NOT_REACHED:
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
        following = n + 1  # the next level a check still reads (one exists: some check is unresolved)
        while following < max_n and not _needed(following, is_top, top_values, dup_limits, dup_values):
            following += 1
        if following == n + 1:
            pos, gram_ids, gram_counts, gram_first = _next_level(following, pos, gram_ids, gram_counts, word_ids,
                                                                 n_distinct)
        else:
            pos, gram_ids, gram_counts, gram_first = _jump_level(n, following, pos, gram_ids, gram_counts, word_ids,
                                                                 counts)
        n = following
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
