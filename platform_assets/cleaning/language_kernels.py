"""Compiled kernels (numba) for the language step's per-byte and per-character loops (issue #13).

- :func:`dfa_features`: py3langid's byte-level DFA walk (`visit_counts`: one table lookup per byte,
  a feature count per state that has one), every sample of a group in one call. numpy walked it in
  lockstep (one step per byte position for every sample at once, then a packed sort to recover each
  sample's features in order of first visit): 0.26 CPU-s under cProfile on the cleaning_stage
  benchmark's 2,172 samples, 0.06 as the loop py3langid runs, compiled, with a feature -> slot
  table for the order of first visit; 0.036 with 8 samples walked side by side.
- :func:`script_letter_bytes`: language_script.script_counts' regex runs over a text's letters, as one
  pass over its code points with a per-code-point script table (built from the same regex, so the
  scripts are the regex's) and the Han variant counts of language_script.han_variant (with ASCII
  letters counted by bytes.translate, script_counts went from 0.67 to 0.02 CPU-s under cProfile).
- :func:`word_count`: language_bands.count_words' regex (runs of letters, marks and digits that
  hold a letter; runs of unspaced scripts by characters) as one pass over the code points with a
  class per code point (built from the regex's own character classes). The `regex` module took
  ~58 us per 2,048-character sample even when it stopped after 11 words (3,000 samples of the real
  corpus: 0.17 CPU-s), ~5% of pipeline_end_to_end's CPU per additional MB.

Each is tested against the Python form it replaces (tests/unit/test_cleaning_language_kernels.py).
The cache and its fallback are the quality kernels' (quality/kernels.compiled).
"""

from __future__ import annotations

import numpy as np

from platform_assets.cleaning.quality.kernels import compiled

DFA_LANES = 8  # samples walked side by side (4: 0.040 CPU-s, 8: 0.036, 16 and 32: the same as 8)
NOT_LETTER = 255  # script_letter_bytes' table value for a code point that is not a letter (\P{L})
HAN_FIRST, HAN_END = 0x4E00, 0x9FA6  # the range language_script._han_forms classifies
SIMPLIFIED, TRADITIONAL = 1, 2  # han form table values (0: both or neither)
# word_count's class bits per code point (language_bands' character classes)
UNSPACED_CHAR = 1  # a script written without spaces: Han, Hiragana, Katakana, Thai, Lao, Khmer, Myanmar
LETTER_CHAR = 2  # \p{L}
WORD_CHAR = 4  # [\p{L}\p{M}\p{N}]
NO_LIMIT = -1  # word_count counts every word

_loaded = False


def load() -> None:
    """Compile or load from the cache both kernels, with the argument types the language step passes,
    once per process (LanguageFilter's load, as the quality step's loads its kernels)."""
    global _loaded
    if _loaded:
        return
    data = np.frombuffer(b"ab", dtype=np.uint8)
    # the model's arrays are read-only (mapped or not: language_model_cache), a type of their own to numba
    model = [np.zeros(512, dtype=np.uint32), np.zeros(1, dtype=np.int64), np.full(1, -1, dtype=np.int32)]
    for array in model:
        array.flags.writeable = False
    dfa_features(data, np.array([0, 2], dtype=np.int64), *model, 1)
    script_letter_bytes(np.frombuffer("ab".encode("utf-32-le"), dtype=np.uint32),
                        np.full(0x110000, NOT_LETTER, dtype=np.uint8), np.zeros(HAN_END - HAN_FIRST, dtype=np.uint8),
                        1)
    word_classes = np.zeros(0x110000, dtype=np.uint8)
    word_count(np.frombuffer(b"ab", dtype=np.uint8), word_classes, 2, NO_LIMIT)
    word_count(np.frombuffer("ab".encode("utf-32-le"), dtype=np.uint32), word_classes, 2, NO_LIMIT)
    _loaded = True


@compiled
def dfa_features(data, starts, nextmove, rowbase, output, n_features):
    """Per sample data[starts[j]:starts[j + 1]]: py3langid's visit_counts, as (features, counts, bounds):
    sample j's distinct features in order of first visit are features[bounds[j]:bounds[j + 1]], their
    counts the same slice of counts.

    The walk is a chain of dependent loads from a 39 MB table (9.8M uint32 transitions), each one
    waiting on the last: DFA_LANES samples are walked side by side, so that their loads overlap, and
    each byte's feature is recorded; the features are then counted sample by sample, in order
    (0.062 -> 0.036 CPU-s on cleaning_stage's 2,172 samples)."""
    n = starts.size - 1
    byte_feature = np.empty(data.size, dtype=np.int32)  # the feature of the state after each byte, or -1
    state = np.zeros(DFA_LANES, dtype=np.int64)
    begin = np.zeros(DFA_LANES, dtype=np.int64)
    end = np.zeros(DFA_LANES, dtype=np.int64)
    for group in range(0, n, DFA_LANES):
        lanes = min(DFA_LANES, n - group)
        longest = 0
        for lane in range(lanes):
            begin[lane], end[lane], state[lane] = starts[group + lane], starts[group + lane + 1], 0
            longest = max(longest, end[lane] - begin[lane])
        for step in range(longest):
            for lane in range(lanes):
                p = begin[lane] + step
                if p < end[lane]:
                    s = nextmove[rowbase[state[lane]] + data[p]]
                    state[lane] = s
                    byte_feature[p] = output[s]
    features = np.empty(data.size, dtype=np.int64)  # at most one feature per byte
    counts = np.empty(data.size, dtype=np.int64)
    bounds = np.zeros(n + 1, dtype=np.int64)
    slot = np.full(n_features, -1, dtype=np.int64)  # feature -> its index in `features`, this sample
    k = 0
    for j in range(n):
        first = k
        for p in range(starts[j], starts[j + 1]):
            feature = byte_feature[p]
            if feature >= 0:
                s = slot[feature]
                if s < 0:
                    slot[feature] = k
                    features[k] = feature
                    counts[k] = 1
                    k += 1
                else:
                    counts[s] += 1
        for t in range(first, k):
            slot[features[t]] = -1
        bounds[j + 1] = k
    return features[:k], counts[:k], bounds


@compiled
def script_letter_bytes(chars, script_of, han_form, n_scripts):
    """(UTF-8 bytes of letters per script index, each script's first letter position or -1, simplified-
    only and traditional-only Han characters) of a text given as code points. `script_of` maps a code
    point to its script index (NOT_LETTER for a non-letter), `han_form` U+4E00..U+9FA5 to SIMPLIFIED,
    TRADITIONAL or 0."""
    counts = np.zeros(n_scripts, dtype=np.int64)
    first = np.full(n_scripts, -1, dtype=np.int64)
    n_simplified = 0
    n_traditional = 0
    for i in range(chars.size):
        c = chars[i]
        script = script_of[c]
        if script != NOT_LETTER:
            if first[script] < 0:
                first[script] = i
            if c < 0x80:
                counts[script] += 1
            elif c < 0x800:
                counts[script] += 2
            elif c < 0x10000:
                counts[script] += 3
            else:
                counts[script] += 4
        if HAN_FIRST <= c < HAN_END:
            form = han_form[c - HAN_FIRST]
            if form == SIMPLIFIED:
                n_simplified += 1
            elif form == TRADITIONAL:
                n_traditional += 1
    return counts, first, n_simplified, n_traditional


@compiled
def word_count(chars, classes, unspaced_chars_per_word, limit):
    """The words of a text given as code points (uint8 for ASCII, else uint32), as language_bands'
    regex `(?P<unspaced>[U]+)|(?:(?![U])[LMN])*\p{L}[LMN]*` finds them, with `classes` the class bits
    of every code point: a run of UNSPACED characters counts ceil(run / unspaced_chars_per_word);
    elsewhere, a match is the run of WORD characters that are not UNSPACED from where it starts, on
    to the end of the WORD run (of any script) when that run holds a LETTER or is followed by an
    UNSPACED letter (the regex's backtracking takes its last letter, and the greedy tail then runs to
    the same end); a run without one matches nowhere inside it. Counting stops once past `limit`
    (NO_LIMIT: never), as the regex loop does."""
    n = chars.size
    words = 0
    pos = 0
    while pos < n:
        if classes[chars[pos]] & UNSPACED_CHAR:
            end = pos + 1
            while end < n and classes[chars[end]] & UNSPACED_CHAR:
                end += 1
            words += (end - pos + unspaced_chars_per_word - 1) // unspaced_chars_per_word
            pos = end
        else:
            run_end = pos  # the run of WORD characters that are not UNSPACED
            letter = False
            while run_end < n:
                kind = classes[chars[run_end]]
                if kind & UNSPACED_CHAR or not kind & WORD_CHAR:
                    break
                if kind & LETTER_CHAR:
                    letter = True
                run_end += 1
            if not letter and run_end < n and classes[chars[run_end]] & LETTER_CHAR:
                letter = True  # an UNSPACED letter right after the run: the regex's \p{L} takes it
            if letter:
                end = run_end
                while end < n and classes[chars[end]] & WORD_CHAR:
                    end += 1
                words += 1
                pos = end
            else:
                pos = run_end if run_end > pos else pos + 1  # no match starts inside the run
        if limit >= 0 and words > limit:
            break
    return words
