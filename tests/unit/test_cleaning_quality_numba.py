"""The compiled kernels of the quality rules (quality/kernels.py, line_stats.py) against the Python
forms that define them (text_view's regex + dict vocabulary and string splits, ngrams.py's levels,
bounds and walks in GopherRepetition's order, the rule sets' map() chains and C4's line loop), on
adversarial input: empty, one character, all whitespace, joiners at the edges, every str.splitlines
boundary, non-ASCII, beyond the BMP, long repeats, dense text; that building the step loads every
kernel signature the rules use; and the cache fallback where nothing is writable."""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np

from platform_assets.cleaning import presets
from platform_assets.cleaning.quality import kernels, line_stats, ngram_kernels, phrase_screen
from platform_assets.cleaning.quality.array_vocab import array_vocab
from platform_assets.cleaning.quality.c4 import C4, C4Settings
from platform_assets.cleaning.quality.ngrams import (
    dup_ngram_chars,
    later_occurrences,
    ngram_levels,
    repeat_bound,
    top_ngram_chars,
    union_bound,
)
from platform_assets.cleaning.quality.text_view import TextView, duplicates, split_lines, split_paragraphs
from platform_assets.cleaning.steps import Drop

ADVERSARIAL_TEXTS = [
    "", "a", " ", "é", "'", ".", "-", "\n", " \t\n\r\x0b\x0c " * 300, "\u3000\xa0 " * 400,
    "a'", "'a", "a'b", "a''b", "a.b.c", "a.-b", "x.", ".x", "...", "a" * 5000, "ab " * 3000, "é" * 2000,
    "abcdefgh abcdefgh abcdefghi", "don't don’t don’t", "e.g. e.g. 3.14", "\x1c\x1d\x1e\x1f a\x1cb",
    "e\u0301 e\u0301e\u0301", "\u212ahe khe KHE", "中文 中文中文", "a\U0001F600b", "\ud800 lone",
    "The cat. " * 700, "ZOO Zoo zoo AZ @ [ ` {",
    "a b c d e f g h i j " * 300, "x" * 3 + "\n" + "yy\n" * 900,
    "a," * 500, "x(y)" * 300,  # denser than token_vocab's first guess of 1 token per 4 characters
]

STOP_SETS = [frozenset(presets.GOPHER_STOP_WORDS), frozenset(["that", "a-b"]), frozenset(["naïve", "the"]),
             frozenset(["abcdefgh"]), frozenset(["khe", "ab", "x.y"]), frozenset(["zoo", "az", "@"]), frozenset()]


def _random_texts(rng: random.Random, count: int) -> list[str]:
    pieces = [*"ab_1 .-'\n\t,!\x1c\x00\x7f{}", "abcdefghij", "x.y", "don't", "...", "The", "THAT", "with",
              "ZOO", "Az", "@", "[", "`", "é", "’", "\u0301", "\u3000", "ж", "中", "\u212a", "naïve", "don’t"]
    return ["".join(rng.choice(pieces) for _ in range(rng.randint(0, 300))) for _ in range(count)]


def test_token_vocab_equals_the_regex_and_dict_vocabulary():
    rng = random.Random(5)
    for text in ADVERSARIAL_TEXTS + _random_texts(rng, 3000):
        ref = TextView(text)
        ref.tokens  # noqa: B018 - tokens first: the regex and dict path, whatever the length
        expected = ref.vocab
        fast = array_vocab(text)
        if any(c > "\uffff" or "\ud800" <= c <= "\udfff" for c in text):  # beyond the BMP, lone surrogates:
            # the regex path stays
            assert fast is None, repr(text)
            continue
        assert fast is not None
        assert list(fast.tokens) == list(expected.tokens), repr(text)
        for field in ("ids", "counts", "lengths", "first"):
            assert np.array_equal(getattr(fast, field), getattr(expected, field)), (field, repr(text))
        view = TextView(text)
        view.__dict__["vocab"] = fast
        ref_stats, stats = ref.word_stats, view.word_stats
        assert (stats.count, stats.chars, stats.distinct) == (ref_stats.count, ref_stats.chars, ref_stats.distinct)
        assert np.array_equal(stats.has_letter(), ref_stats.has_letter()), repr(text)
        for stop in STOP_SETS:
            assert stats.lowered_in(stop) == ref_stats.lowered_in(stop), (stop, repr(text))


def test_repeated_lines_and_paragraphs_equal_the_string_splits():
    rng = random.Random(8)
    pieces = ["a", "b", "ab", " ", "\n", "\n", "\n\n", "\n\n\n", "\t", "\r", "\x1c", "\x85", "\xa0", "\u2028",
              "\u3000", "é", "line one", "line one\n"]
    texts = ADVERSARIAL_TEXTS + ["\n" * k for k in range(6)] + ["\n\na\n\na\n\n", " \n a \n a \n ", "x\n\n\nx"]
    texts += ["".join(rng.choice(pieces) for _ in range(rng.randint(0, 60))) for _ in range(5000)]
    for text in texts:
        view = TextView(text)
        for paragraphs, split in ((True, split_paragraphs), (False, split_lines)):
            expected = split(text)
            assert view.repeated_pieces(paragraphs) == (len(expected), *duplicates(expected)), (paragraphs, repr(text))


def test_repeated_ranges_tell_apart_lines_with_the_same_length_and_edges():
    # kernels.repeated_ranges hashes whole lines only where the length and the first and last 4
    # characters are shared: lines that differ only inside (or are equal) must still be counted exactly
    rng = random.Random(12)
    middles = ["", "x", "y", "xy", "yx", "é", "ж", "中", "\u3000"]
    for _ in range(3000):
        edge = rng.choice(["abcd", "ab", "", "éééé", "中中"])
        lines = [edge + rng.choice(middles) * rng.randint(0, 3) + edge[::-1] for _ in range(rng.randint(1, 40))]
        text = "\n".join(lines)
        expected = split_lines(text)
        assert TextView(text).repeated_pieces(False) == (len(expected), *duplicates(expected)), repr(text)
    for lines in (["abcd1234wxyz", "abcd5678wxyz", "abcd1234wxyz"], ["abcdXwxyz"] * 3 + ["abcdYwxyz"]):
        text = "\n".join(lines)
        assert TextView(text).repeated_pieces(False) == (len(lines), len(lines) - 2,
                                                         sum(map(len, lines)) - sum(map(len, set(lines))))


def _reference_check_values(vocab, checks: list[tuple[str, int, float]], n_chars: int) -> list[int | None]:
    """GopherRepetition's n-gram checks as written over ngrams.py before the kernel: the value of each
    check in order, up to the first that fires; a top check whose vocabulary bound (below) cannot pass
    its limit has none, as a dup check whose bounds cannot."""
    top_n = {n for kind, n, _ in checks if kind == "top"}
    dup_limits = {n: limit for kind, n, limit in checks if kind == "dup"}
    cum = np.zeros(len(vocab.ids) + 1, dtype=np.int64)
    np.cumsum(vocab.lengths[vocab.ids], out=cum[1:])
    values: list[int | None] = []
    pending = iter(checks)
    measured: dict[tuple[str, int], int | None] = {
        ("top", n): None for kind, n, limit in checks
        if kind == "top" and not _top_bound(vocab, n) / n_chars > limit}
    check = next(pending)

    def fires(check, value) -> bool:
        values.append(value)
        return value is not None and value / n_chars > check[2]

    for level in ngram_levels(vocab, max(n for _, n, _ in checks)):
        n = level.n
        if n in top_n and ("top", n) not in measured:
            measured["top", n] = top_ngram_chars(level, cum)
        if n in dup_limits and ("dup", n) not in measured:
            later = later_occurrences(level)
            rest = [m for m in dup_limits if m >= n]
            starts = level.pos[later]
            if later.size == 0 or all(
                repeat_bound(starts, cum, m) <= dup_limits[m] * n_chars
                or union_bound(starts, cum, m) <= dup_limits[m] * n_chars
                for m in rest
            ):
                measured.update({("dup", m): None for m in rest})
            else:
                measured["dup", n] = dup_ngram_chars(level, cum, dup_limits[n] * n_chars, later)
        while check is not None and (check[0], check[1]) in measured:
            if fires(check, measured[check[0], check[1]]):
                return values
            check = next(pending, None)
        if check is None:
            return values
    while check is not None:
        if fires(check, measured.get((check[0], check[1]))):
            return values
        check = next(pending, None)
    return values


def _top_bound(vocab, n: int) -> int:
    """ngram_kernels.top_bound in numpy: max over tokens seen twice or more of count * (n * length + n - 1)."""
    repeated = vocab.counts >= 2
    return int((vocab.counts[repeated] * (n * vocab.lengths[repeated] + n - 1)).max(initial=0))


def _kernel_check_values(vocab, checks: list[tuple[str, int, float]], n_chars: int) -> list[int | None]:
    values = ngram_kernels.ngram_check_values(
        vocab.ids, vocab.counts, vocab.first, vocab.lengths,
        np.array([kind == "dup" for kind, _, _ in checks], dtype=np.int64),
        np.array([n for _, n, _ in checks], dtype=np.int64), np.array([lim for _, _, lim in checks]), n_chars)
    return [None if v == ngram_kernels.NO_VALUE else v for v in values.tolist() if v != ngram_kernels.NOT_REACHED]


def _repetitive_words(rng: random.Random) -> list[str]:
    shape = rng.random()
    if shape < 0.1:  # one token over and over, or a short period
        period = [rng.choice(["a", "bb", "ccc"]) for _ in range(rng.randint(1, 4))]
        return (period * 3000)[: rng.randint(2, 6000)]
    if shape < 0.15:  # nothing repeats
        return [f"w{i}" for i in range(rng.randint(2, 300))]
    words: list[str] = []
    while len(words) < rng.randint(2, 400):
        if words and rng.random() < 0.25:
            start = rng.randrange(len(words))
            words += words[start : start + rng.randint(1, 30)]
        else:
            words.append(rng.choice(["a", "bb", "ccc", "dd", "e", "fff", "the", "of", "x.y", "é"]))
    return words


def test_ngram_check_values_equal_the_ngrams_reference():
    rng = random.Random(11)
    default = [("top", n, lim) for n, lim in sorted(presets.GOPHER_REPETITION["top_n_grams"].items())] + [
        ("dup", n, lim) for n, lim in sorted(presets.GOPHER_REPETITION["dup_n_grams"].items())]
    limits = [0.0, 0.01, 0.05, 0.1, 0.15, 0.2, 0.3, 0.5, 0.9, 1.0]
    fired = unfired = 0
    for _ in range(2500):
        words = _repetitive_words(rng)
        text = rng.choice([" ", "\n", "  "]).join(words)
        vocab = TextView(text).vocab
        if len(vocab.ids) < 2:
            continue  # GopherRepetition measures no n-grams below 2 tokens
        if rng.random() < 0.3:
            checks = default
        else:
            tops = sorted(rng.sample(range(1, 8), rng.randint(0, 3)))
            dups = sorted(rng.sample(range(1, 12), rng.randint(0 if tops else 1, 6)))
            checks = [("top", n, rng.choice(limits)) for n in tops] + [("dup", n, rng.choice(limits)) for n in dups]
        expected = _reference_check_values(vocab, checks, len(text))
        assert _kernel_check_values(vocab, checks, len(text)) == expected, (words[:50], checks)
        last, limit = expected[-1], checks[len(expected) - 1][2]
        if last is not None and last / len(text) > limit:
            fired += 1
        else:
            assert len(expected) == len(checks)
            unfired += 1
    assert fired > 300 and unfired > 300  # both outcomes were exercised


def test_top_bound_is_at_least_every_top_ngram_value():
    # the bound that lets the kernel skip a top check (and the levels only it reads) must never be
    # below the value it stands for, or a check that should fire would not
    rng = random.Random(5)
    tight = 0
    for _ in range(600):
        vocab = TextView(rng.choice([" ", "\n"]).join(_repetitive_words(rng))).vocab
        if len(vocab.ids) < 2:
            continue
        cum = np.zeros(len(vocab.ids) + 1, dtype=np.int64)
        np.cumsum(vocab.lengths[vocab.ids], out=cum[1:])
        for level in ngram_levels(vocab, 8):
            value = top_ngram_chars(level, cum)
            bound = ngram_kernels.top_bound(level.n, vocab.counts, vocab.lengths)
            assert bound == _top_bound(vocab, level.n)
            assert (value or 0) <= bound, (level.n, value, bound)
            tight += value is not None and value == bound
    assert tight > 50  # one token over and over reaches the bound: it is not loose by construction


def test_c4_compiled_lines_equal_the_line_loop():
    # line_stats.py (where only the word count decides) against c4.py's loop over str.splitlines, with
    # every line boundary str.splitlines knows, stripping, sentence ends and closers around them
    rng = random.Random(17)
    pieces = ["The cat sat on the mat", "one two", "a", " ", "\t", "\n", "\n", "\r\n", "\r", "\x0b", "\x0c", "\x1c",
              "\x85", "\u2028", "\u2029", "\xa0", ".", "!", "?", "…", "...", ".)", "!\"", "’", "”", "]", "é",
              "x" * 30, "end. Next", "Hi! There? Yes… ok", "é. È", "\u3000", "a.b c",
              # citations (removed from kept lines, which may end or join sentences) and curly brackets
              # (the first kept line holding one drops the page), read off the compiled pass's lines
              "[1]", "[edit]", "[]", "[citation needed]", ".[2] Then", "[", "{", "f(x) { y", "a b {"]
    settings = [C4Settings(filter_no_terminal_punct=False, languages=None),
                C4Settings(filter_no_terminal_punct=False, max_word_length=20, languages=None),
                C4Settings(filter_no_terminal_punct=False, min_words_per_line=None, languages=None),
                C4Settings(filter_no_terminal_punct=False, min_num_sentences=1, min_words_per_line=1,
                           languages=None)]
    texts = ["", "\n", "a\n", "\r\n", "a b c.\r\nd e f. g", "a b c\n", "  a b c  \n\n d e f "]
    texts += ["".join(rng.choice(pieces) for _ in range(rng.randint(1, 25))) for _ in range(4000)]
    compiled_runs = compiled_marked = 0
    outcomes: Counter[str] = Counter()
    for text in texts:
        for s in settings:
            fast, slow = C4(s), C4(s)
            slow.fast_lines = False
            c1, c2 = Counter(), Counter()
            view = TextView(text)
            outcome = fast.check(view, c1)
            assert outcome == slow.check(TextView(text), c2), (repr(text), s)
            assert c1 == c2, repr(text)
            compiled = "code_points" in view.__dict__
            compiled_runs += compiled
            compiled_marked += compiled and ("[" in text or "{" in text)
            outcomes[type(outcome).__name__ if not isinstance(outcome, Drop) else outcome.rule] += compiled
    assert compiled_runs > 10000  # the compiled pass ran (texts without a C4 phrase)
    assert compiled_marked > 5000  # ... on texts with citations or curly brackets too
    assert outcomes["c4.curly_bracket"] > 500 and outcomes["str"] > 1000, outcomes  # drops and rewrites


def test_bullet_and_ellipsis_lines_equal_the_string_tests():
    from operator import methodcaller

    from platform_assets.cleaning.quality.gopher_quality import _ENDS_WITH_ELLIPSIS

    rng = random.Random(19)
    pieces = ["•", "-", "->", "* ", "a", "word", " ", "\t", "\xa0", "\u3000", "\n", "\r\n", "\r", "\x1c", "\u2028",
              "\x85", ".", "..", "...", "…", "é", "—"]
    bullet_sets = [tuple(presets.GOPHER_BULLETS), ("->", "* "), ("",), ()]
    texts = ["", "\n", "...\n", " - a\n\n…  ", "\r\n-"]
    texts += ["".join(rng.choice(pieces) for _ in range(rng.randint(1, 30))) for _ in range(4000)]
    for text in texts:
        points = TextView(text).code_points
        lines = text.splitlines()
        for bullets in bullet_sets:
            expected = (len(lines), sum(map(methodcaller("startswith", bullets), map(str.lstrip, lines))),
                        sum(map(_ENDS_WITH_ELLIPSIS, map(str.rstrip, lines))))
            assert line_stats.bullet_ellipsis_lines(points, bullets) == expected, (repr(text), bullets)


def test_fineweb_line_stats_equal_the_string_forms():
    from platform_assets.cleaning.quality.fineweb import FineWeb, FineWebSettings

    rng = random.Random(23)
    pieces = ["Short.", "a longer line of words here ends with a stop!", "no stop", "x" * 31, "x" * 30, " ", "\t",
              "\n", "\n", "\r", "\x1c", "\u2028", "\xa0", "。", "।", "?", "é", "dup line\n"]
    settings = [FineWebSettings(languages=None), FineWebSettings(languages=None, line_punct_exclude_zero=True,
                                                                 short_line_length=5, line_punct_thr=0.5)]
    texts = ["", "\n", " \n\t", "a\n", "a\na\na"]
    texts += ["".join(rng.choice(pieces) for _ in range(rng.randint(1, 30))) for _ in range(4000)]
    drops = 0
    for text in texts:
        lines = TextView(text).nonblank_lines
        expected = (len(lines), sum(line[-1] in presets.TERMINAL_PUNCTUATION for line in lines),
                    sum(len(line) <= 30 for line in lines), duplicates(lines)[1])
        points = TextView(text).code_points
        assert line_stats.nonblank_line_stats(points, presets.TERMINAL_PUNCTUATION, 30) == expected, repr(text)
        for s in settings:
            compiled_view, string_view = TextView(text), TextView(text)
            string_view.__dict__["code_points"] = None  # as for text beyond the BMP
            outcome = FineWeb(s).check(compiled_view, Counter())
            assert outcome == FineWeb(s).check(string_view, Counter()), (repr(text), s)
            drops += outcome is not None
    assert drops > 1000


def test_load_covers_every_signature_the_quality_step_uses():
    from platform_assets.cleaning.quality.step import QualityStep
    from platform_assets.cleaning.settings import CleaningSettings

    step = QualityStep(CleaningSettings().quality)
    step.load()  # what the pipeline calls before its first batch (building loads nothing)
    dispatchers = [kernels.token_vocab, kernels.ranges_with_flag, ngram_kernels.ngram_check_values,
                   line_stats.newline_positions, line_stats.piece_duplicates_at, kernels.lowered_present,
                   line_stats._kept_lines_at, line_stats._bullet_ellipsis_lines_at, line_stats._nonblank_line_stats_at,
                   line_stats.other_line_breaks, line_stats.line_break_positions, kernels.token_count,
                   phrase_screen._holds_phrase]
    before = [len(d.signatures) for d in dispatchers]
    assert all(before)
    rng = random.Random(3)
    texts = [" ".join(rng.choice(["the", "cat", "sat", "on", "a", "mat."]) for _ in range(400)) + end
             for end in ("", " naïve café", " ж" * 50)]
    for text in texts:
        view = TextView(text)
        for rules in step.rule_sets:
            rules.check(view, Counter())
        assert view.vocab.spans is not None
    assert [len(d.signatures) for d in dispatchers] == before  # nothing compiled or loaded after load()


def test_kernels_work_where_no_cache_location_is_writable(tmp_path: Path):
    # numba refuses cache=True when no cache directory can be written; the kernels then compile in
    # the process instead of failing the import. A copy of the module sits beside a `__pycache__`
    # that is a file, with NUMBA_CACHE_DIR and the user cache dir under a file (unwritable even as root).
    blocker = tmp_path / "blocker"
    blocker.write_text("not a directory")
    module_dir = tmp_path / "mod"
    module_dir.mkdir()
    (module_dir / "__pycache__").write_text("not a directory")
    shutil.copy(kernels.__file__, module_dir / "kernels_copy.py")
    script = (
        "import numpy as np, kernels_copy as k\n"
        "chars, kinds = np.frombuffer(b'ab cd ab', np.uint8), np.ones(256, np.uint8)\n"
        "ids, counts, first, starts, ends = k.token_vocab(chars, kinds)\n"
        "print(ids.tolist(), counts.tolist(), k.token_vocab._cache.__class__.__name__)\n"
    )
    env = {**os.environ, "NUMBA_CACHE_DIR": str(blocker / "numba"), "XDG_CACHE_HOME": str(blocker / "xdg"),
           "HOME": str(blocker / "home"), "PYTHONPATH": str(module_dir)}
    run = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    # the whole text is one token of kind 1 (every code point a word character here)
    assert run.stdout.split("\n")[0] == "[0] [1] NullCache", run.stdout
