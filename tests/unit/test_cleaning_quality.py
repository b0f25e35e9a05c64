"""Quality rule sets: every rule on a document that passes and one that fails, the published thresholds,
and the repetition arithmetic against a direct port of datatrove's."""

from __future__ import annotations

import random
import time
from collections import Counter

import numpy as np
import pyarrow as pa
import pytest
from document_batches import documents_batch

from platform_assets.cleaning import presets
from platform_assets.cleaning.quality.c4 import C4, count_sentences
from platform_assets.cleaning.quality.code_ratio import CodeRatio
from platform_assets.cleaning.quality.custom import Custom
from platform_assets.cleaning.quality.fineweb import FineWeb
from platform_assets.cleaning.quality.gopher_quality import GopherQuality
from platform_assets.cleaning.quality.gopher_repetition import GopherRepetition
from platform_assets.cleaning.quality.length import Length
from platform_assets.cleaning.quality.ngrams import dup_ngram_chars as _dup_ngram_chars
from platform_assets.cleaning.quality.ngrams import group as _group
from platform_assets.cleaning.quality.ngrams import ngram_levels as _ngram_levels
from platform_assets.cleaning.quality.ngrams import top_ngram_chars as _top_ngram_chars
from platform_assets.cleaning.quality.step import QualityStep
from platform_assets.cleaning.quality.symbol_ratio import SymbolRatio
from platform_assets.cleaning.quality.text_view import TextView, split_words
from platform_assets.cleaning.settings import (
    C4Settings,
    CleaningSettings,
    CodeRatioSettings,
    CustomSettings,
    FineWebSettings,
    GopherQualitySettings,
    GopherRepetitionSettings,
    LengthSettings,
    preset,
)

SENTENCES = [
    "The committee met on Tuesday to discuss the new budget for the regional library network.",
    "Members agreed that funding for rural branches should increase by twelve percent next year.",
    "They noted that demand for digital lending has doubled since the service was launched.",
    "The chair said that the vote was unanimous and that the plan will be published next month.",
    "Residents will have six weeks to comment on the proposal before the final decision is taken.",
    "Several speakers asked whether the mobile library would return to the villages in the north.",
    "The treasurer explained that a new van would cost less to run than repairing the old one.",
    "A local author offered to donate signed copies of her novels to every branch in the county.",
    "Staff will receive training on the new catalogue system during the quiet summer months.",
    "The meeting closed with thanks to the volunteers who run the reading groups for children.",
]
GOOD = "\n".join(SENTENCES[:5]) + "\n\n" + "\n".join(SENTENCES[5:])


def check(rule_set, text: str):
    return rule_set.check(TextView(text), Counter())


def rule_of(outcome) -> str | None:
    return outcome.rule if outcome is not None and not isinstance(outcome, str) else None


# -- the presets reproduce the published numbers ------------------------------------------------------


def test_gopher_quality_preset_is_the_papers():
    s = GopherQualitySettings()
    assert (s.min_doc_words, s.max_doc_words) == (50, 100_000)
    assert (s.min_avg_word_length, s.max_avg_word_length) == (3, 10)
    assert s.max_symbol_word_ratio == 0.1
    assert (s.max_bullet_lines_ratio, s.max_ellipsis_lines_ratio) == (0.9, 0.3)
    assert s.min_alpha_words_ratio == 0.8
    assert s.min_stop_words == 2
    assert s.stop_words == ("the", "be", "to", "of", "and", "that", "have", "with")


def test_gopher_repetition_preset_is_table_a1():
    s = GopherRepetitionSettings()
    assert (s.dup_line_frac, s.dup_para_frac, s.dup_line_char_frac, s.dup_para_char_frac) == (
        0.3,
        0.3,
        0.2,
        0.2,
    )
    assert s.top_n_grams == {2: 0.20, 3: 0.18, 4: 0.16}
    assert s.dup_n_grams == {5: 0.15, 6: 0.14, 7: 0.13, 8: 0.12, 9: 0.11, 10: 0.10}


def test_c4_and_fineweb_presets_are_the_published_ones():
    c4 = C4Settings()
    assert (c4.min_num_sentences, c4.min_words_per_line, c4.max_word_length) == (5, 3, 1000)
    assert c4.filter_no_terminal_punct and c4.filter_lorem_ipsum and c4.filter_javascript
    assert c4.filter_curly_bracket and c4.filter_policy and c4.remove_citations
    fw = FineWebSettings()
    assert (fw.line_punct_thr, fw.short_line_thr, fw.short_line_length) == (0.12, 0.67, 30)
    assert (fw.char_duplicates_ratio, fw.new_line_ratio, fw.line_punct_exclude_zero) == (0.01, 0.3, False)
    assert presets.FINEWEB_LANGUAGE_THRESHOLD == 0.65
    assert (
        len(presets.TERMINAL_PUNCTUATION) == 159
        and {".", "!", "?", "。", "।", "؟"} <= presets.TERMINAL_PUNCTUATION
    )


def test_default_quality_list_is_the_fineweb_recipe_for_english():
    q = CleaningSettings().quality
    assert [p.preset for p in q] == ["gopher_repetition", "gopher_quality", "c4", "fineweb"]
    assert q[2].filter_no_terminal_punct is False  # FineWeb turned C4's punctuation line filter off
    assert all(p.languages == ("en",) for p in q)


def test_every_threshold_is_configurable_and_validated():
    assert preset("gopher_quality", min_doc_words=10).min_doc_words == 10
    assert preset("gopher_quality", min_stop_words=None).min_stop_words is None
    with pytest.raises(ValueError):
        preset("gopher_quality", min_alpha_words_ratio=1.5)
    with pytest.raises(ValueError):
        preset("fineweb", no_such_threshold=1)
    with pytest.raises(ValueError):
        preset("no_such_preset")


# -- tokenisation ------------------------------------------------------------------------------------


def test_words_split_punctuation_off_and_keep_combining_marks():
    assert split_words("Hello, world... e.g. don't 3.14 #tag ===== (see).") == [
        "Hello",
        ",",
        "world",
        "...",
        "e.g",
        ".",
        "don't",
        "3.14",
        "#",
        "tag",
        "=====",
        "(",
        "see",
        ").",
    ]
    assert split_words("नमस्ते दुनिया") == ["नमस्ते", "दुनिया"]  # virama and vowel signs stay in the word
    view = TextView("One, two... three!")
    assert view.words == ["One", "two", "three"] and len(view.tokens) == 6


def test_sentences_are_counted_per_line():
    assert count_sentences("One. Two! Three? Four") == 4
    assert count_sentences("No boundary e.g.here") == 1
    assert count_sentences("   ") == 0
    start = time.process_time()
    count_sentences("." * 1_000_000)  # a run of dots is one boundary candidate, not a million
    assert time.process_time() - start < 1.0


# -- Gopher quality -----------------------------------------------------------------------------------


def test_gopher_quality_passes_prose():
    assert check(GopherQuality(), GOOD) is None


@pytest.mark.parametrize(
    ("text", "rule", "value"),
    [
        ("Just a few words here, nothing more.", "too_few_words", "7 < 50"),
        (" ".join(["to be or not to be is a it"] * 10), "mean_word_length_low", "2 < 3"),
        (
            " ".join(["internationalization characterization telecommunications the"] * 15),
            "mean_word_length_high",
            "14.25 > 10",
        ),  # (20 + 16 + 18 + 3) / 4
        (GOOD + " #x" * 20, "hash_word_ratio", "0.1149 > 0.1"),  # 20 hashes / (154 + 20) words
        (GOOD + " ..." * 20, "ellipsis_word_ratio", "0.1299 > 0.1"),  # 20 ellipses / 154 words
        ("\n".join("- " + s for s in SENTENCES), "bullet_lines_ratio", "1 > 0.9"),
        (
            "\n".join(s[:-1] + "..." for s in SENTENCES[:4]) + "\n" + "\n".join(SENTENCES[4:]),
            "ellipsis_lines_ratio",
            "0.4 > 0.3",
        ),
        (GOOD + " " + " ".join(str(i) for i in range(40)), "alpha_words_ratio", "0.7938 < 0.8"),  # 154 / 194
        (
            "Die Bibliothek öffnet morgens und schließt abends, wenn Freiwillige Lesegruppen anbieten. " * 6,
            "stop_words",
            "0 < 2",
        ),
    ],
)
def test_gopher_quality_rules(text, rule, value):
    outcome = check(GopherQuality(), text)
    assert outcome.rule == f"gopher_quality.{rule}"
    assert outcome.value == value


def test_gopher_quality_too_many_words_at_the_papers_limit():
    words = ["the", "cat", "and", "dog", "with", "that"] * 16_667  # 100,002 words
    assert check(GopherQuality(), " ".join(words)).rule == "gopher_quality.too_many_words"
    assert check(GopherQuality(), " ".join(words[:100_000])) is None


def test_gopher_quality_checks_can_be_turned_off():
    s = GopherQualitySettings(min_doc_words=None, min_stop_words=None)
    assert check(GopherQuality(s), "Short but fine words here.") is None


# -- Gopher repetition --------------------------------------------------------------------------------


def test_gopher_repetition_passes_prose():
    assert check(GopherRepetition(), GOOD) is None


def test_gopher_repetition_rules():
    rep = GopherRepetition()
    a, b, c = SENTENCES[0], SENTENCES[1], SENTENCES[2]
    assert check(rep, f"{a}\n\n{a}\n\n{b}").rule == "gopher_repetition.dup_para_frac"  # 1 of 3 > 0.3
    long_para = " ".join(SENTENCES[:4])
    text = f"{long_para}\n\n{c}\n\n{long_para}\n\n{b}"  # 1 of 4 paragraphs, 40% of the characters
    out = check(rep, text)
    assert (out.rule, out.value) == (
        "gopher_repetition.dup_para_char_frac",
        f"{len(long_para) / len(text):.4g} > 0.2",
    )
    lines = SENTENCES[:6] + SENTENCES[:3]
    assert check(rep, "\n".join(lines)).rule == "gopher_repetition.dup_line_frac"  # 3 of 9
    lines = SENTENCES[:7] + SENTENCES[:3]  # 3 of 10 lines (not > 0.3) holding 30% of the characters
    out = check(rep, "\n".join(lines))
    dup_chars = sum(map(len, SENTENCES[:3]))
    assert (out.rule, out.value) == (
        "gopher_repetition.dup_line_char_frac",
        f"{dup_chars / len(chr(10).join(lines)):.4g} > 0.2",
    )
    text = " ".join(f"w{i} of course" for i in range(40))
    out = check(rep, text)
    assert out.rule == "gopher_repetition.top_2_gram_char_frac"
    assert out.value == f"{(9 * 40) / len(text):.4g} > 0.2"
    filler = " ".join(f"filler{i}" for i in range(30))
    sentence = "the quick brown fox jumps over the lazy dog near the river bank"
    out = check(rep, f"{sentence} {filler} {sentence} {sentence}")
    assert out.rule == "gopher_repetition.dup_5_gram_char_frac"


def test_a_unique_top_ngram_is_not_repetition():
    # datatrove would report top_2_gram for any 3-word text; one occurrence is not a repeat
    assert check(GopherRepetition(), "three short words") is None


def _datatrove_find_all_duplicate(words: list[str], n: int) -> int:
    """Direct port of datatrove.pipeline.filters.gopher_repetition_filter.find_all_duplicate."""
    unique, repeated, idx = set(), 0, 0
    while idx < len(words) - n + 1:
        gram = "".join(words[idx : idx + n])
        if gram in unique:
            repeated += len(gram)
            idx += n
        else:
            unique.add(gram)
            idx += 1
    return repeated


def _datatrove_top_chars(words: list[str], n: int) -> int | None:
    """datatrove's find_top_duplicate (n-grams joined with spaces), None where nothing repeats."""
    grams = [" ".join(words[i : i + n]) for i in range(len(words) - n + 1)]
    if not grams:
        return None
    gram, count = Counter(grams).most_common(1)[0]
    return len(gram) * count if count > 1 else None


def test_ngram_levels_equal_datatrove_on_random_texts():
    rng = random.Random(3)
    for _ in range(1500):
        vocab = ["a", "bb", "ccc", "dddd", "eeeee"][: rng.randint(1, 5)]
        words = [rng.choice(vocab) for _ in range(rng.randint(1, 50))]
        max_n = rng.randint(1, 8)
        view = TextView(" ".join(words))
        assert view.tokens == words
        cum = np.concatenate(([0], np.cumsum([len(w) for w in words])))
        levels = {level.n: level for level in _ngram_levels(view.vocab, max_n)}
        for n in range(1, max_n + 1):
            level = levels.get(n)  # absent: the levels stopped, no n-gram of this size repeats
            dup = _dup_ngram_chars(level, cum, float("inf")) if level else None
            assert (dup or 0) == _datatrove_find_all_duplicate(words, n), (words, n)
            top = _top_ngram_chars(level, cum) if level else None
            assert top == _datatrove_top_chars(words, n), (words, n)


def _reference_ngram_rule(words: list[str], n_chars: int, settings: GopherRepetitionSettings) -> str | None:
    """datatrove's n-gram checks, in its order, on our tokens (a unique top n-gram is not repetition)."""
    for n, limit in sorted(settings.top_n_grams.items()):
        chars = _datatrove_top_chars(words, n)
        if chars is not None and chars / n_chars > limit:
            return f"gopher_repetition.top_{n}_gram_char_frac"
    for n, limit in sorted(settings.dup_n_grams.items()):
        if len(words) >= n and _datatrove_find_all_duplicate(words, n) / n_chars > limit:
            return f"gopher_repetition.dup_{n}_gram_char_frac"
    return None


def test_repetition_decisions_equal_datatrove_on_random_texts():
    # one line, so that only the n-gram checks can fire; phrases repeated at random, so that every
    # check (and the bounds that skip the walk) is exercised
    rng = random.Random(11)
    vocab = [f"w{i}" for i in range(60)] + ["the", "of", "a"]
    settings_list = [
        GopherRepetitionSettings(),
        GopherRepetitionSettings(top_n_grams={3: 0.1, 6: 0.05}, dup_n_grams={2: 0.3, 4: 0.2, 7: 0.1}),
        GopherRepetitionSettings(top_n_grams={1: 0.3}, dup_n_grams={1: 0.5, 3: 0.25}),
    ]
    fired = Counter()
    for _ in range(600):
        words: list[str] = []
        while len(words) < rng.randint(5, 300):
            if words and rng.random() < 0.15:
                start = rng.randrange(len(words))
                words += words[start : start + rng.randint(1, 12)]  # repeat an earlier phrase
            else:
                words.append(rng.choice(vocab))
        text = " ".join(words)
        for settings in settings_list:
            out = check(GopherRepetition(settings), text)
            expected = _reference_ngram_rule(words, len(text), settings)
            assert (out.rule if out else None) == expected, (text, settings)
            fired[expected] += 1
    assert len(fired) >= 8  # most checks fired at least once


def test_grouping_by_sort_equals_the_stable_argsort():
    rng = np.random.default_rng(5)
    for size in (1, 2, 7, 100, 5000):
        keys = rng.integers(0, max(1, size // 3), size)
        packed = _group(keys, int(keys.max()) + 1)
        wide = _group(keys, 2**62)  # too wide to pack: the argsort path
        for a, b in zip(packed, wide, strict=True):
            assert np.array_equal(a, b)
        ids, counts, first = packed
        assert counts.sum() == size and np.array_equal(counts, np.bincount(ids))
        assert np.array_equal(keys[first], np.unique(keys))  # one per key, in key order
        assert all(keys[: first[g]].tolist().count(keys[first[g]]) == 0 for g in range(min(len(first), 20)))


def test_word_figures_are_counted_over_distinct_tokens():
    view = TextView("The cat, the Cat and 42 cats... 3.14 e.g. x_y naïve cat!")
    stats = view.word_stats
    assert stats.count == len(view.words) == 12
    assert stats.chars == sum(map(len, view.words))
    assert stats.distinct == list(dict.fromkeys(view.words))
    counts = dict(zip(stats.distinct, stats.distinct_counts.tolist(), strict=True))
    assert counts["cat"] == 2 and counts["the"] == counts["The"] == 1


# -- C4 ---------------------------------------------------------------------------------------------


def test_c4_keeps_sentences_and_rewrites_lines():
    text = "\n".join(
        [
            "Navigation Home About",  # no terminal punctuation
            SENTENCES[0] + "[1]",  # citation removed, then kept
            "Too short.",  # < 3 words
            "Enable JavaScript to view this page properly.",
            "This site uses cookies to improve your experience.",
            "x" * 1001 + " is a very long word.",
            *SENTENCES[1:5],
        ]
    )
    counters: Counter[str] = Counter()
    out = C4().check(TextView(text), counters)
    assert out == "\n".join(SENTENCES[:5])
    assert counters == {
        "c4.lines_removed.no_terminal_punct": 1,
        "c4.lines_removed.too_few_words": 1,
        "c4.lines_removed.javascript": 1,
        "c4.lines_removed.policy": 1,
        "c4.lines_removed.too_long_word": 1,
    }


def test_c4_page_rules():
    assert check(C4(), GOOD.replace("\n\n", "\n")) is None  # nothing to remove: kept as is
    out = check(C4(), GOOD + "\nLorem ipsum dolor sit amet, consectetur adipiscing.")
    assert out.rule == "c4.lorem_ipsum"
    out = check(C4(), GOOD + "\nUse a function like f(x) { return x; } here.")
    assert out.rule == "c4.curly_bracket"
    out = check(C4(), "\n".join(SENTENCES[:4]))
    assert (out.rule, out.value) == ("c4.too_few_sentences", "4 < 5")


def test_c4_without_the_punctuation_filter_keeps_unpunctuated_lines():
    text = "A heading with words\n" + "\n".join(SENTENCES[:5])
    assert check(C4(C4Settings(filter_no_terminal_punct=False)), text) is None
    assert check(C4(), text) == "\n".join(SENTENCES[:5])


# -- FineWeb ------------------------------------------------------------------------------------------


def test_fineweb_passes_prose():
    assert check(FineWeb(), GOOD) is None


def test_fineweb_rules():
    fw = FineWeb()
    lines = [f"Menu entry number {i} of the site" for i in range(10)]
    out = check(fw, "\n".join(lines))
    assert (out.rule, out.value) == ("fineweb.line_punct_ratio", "0 < 0.12")
    assert check(FineWeb(FineWebSettings(line_punct_exclude_zero=True)), "\n".join(lines)) is None
    short = [f"Item {i} is in stock." for i in range(10)] + SENTENCES[:3]
    out = check(fw, "\n".join(short))
    assert (out.rule, out.value) == ("fineweb.short_line_ratio", "0.7692 > 0.67")
    out = check(fw, GOOD + "\n" + SENTENCES[0])
    assert out.rule == "fineweb.char_dup_ratio"
    listy = [f"Supercalifragilisticexpialidocious{i} extraordinarily." for i in range(20)]
    out = check(fw, "\n".join(listy))  # 19 newlines / 60 tokens ("word", "word", ".")
    assert (out.rule, out.value) == ("fineweb.list_ratio", "0.3167 > 0.3")


def test_fineweb_counts_punctuation_of_any_script():
    lines = [
        f"这是第{i}行的内容，它以中文句号结束，并且这一行足够长，长到可以通过短行比例的检查。"
        for i in range(6)
    ]
    assert check(FineWeb(FineWebSettings(new_line_ratio=None)), "\n".join(lines)) is None


# -- our own rule sets -------------------------------------------------------------------------------


def test_length_bounds():
    assert check(Length(), GOOD) is None
    assert check(Length(), "Too short.").rule == "length.too_few_chars"
    out = check(Length(), "Pneumonoultramicroscopicsilicovolcanoconiosis and floccinaucinihilipilification.")
    assert (out.rule, out.value) == ("length.too_few_words", "3 < 10")
    s = LengthSettings(min_chars=None, min_words=None, max_chars=100, min_lines=2, max_lines=3)
    assert check(Length(s), "x" * 101).rule == "length.too_many_chars"
    assert check(Length(s), "one line").rule == "length.too_few_lines"
    assert check(Length(s), "a\nb\nc\nd").rule == "length.too_many_lines"


def test_symbol_word_ratio():
    assert check(SymbolRatio(), GOOD) is None
    out = check(SymbolRatio(), "#### Title ### with ## many # hashes and words")
    assert out.rule == "symbol_ratio.symbol_word_ratio"


def test_code_ratio():
    code = "int main(void) {\n    int x = 1;\n    return x;\n}\n"
    assert check(CodeRatio(), GOOD + "\nSee the example: f(x) returns 1.") is None
    assert check(CodeRatio(), code * 3).rule == "code_ratio.code_line_ratio"
    assert (
        check(CodeRatio(), "import os\nfrom x import y\ndef f():\n  pass\n").rule
        == "code_ratio.code_line_ratio"
    )
    assert check(CodeRatio(CodeRatioSettings(min_lines=10)), code) is None  # too few lines to judge
    assert check(CodeRatio(), "Example::\n\n  some literal\nMore prose here.") is None  # reST is not code


def test_custom_rules():
    assert check(Custom(), GOOD) is None
    out = check(Custom(), "BUY NOW CHEAP WATCHES FREE SHIPPING TODAY ONLY ORDER YOUR WATCH NOW " * 2)
    assert out.rule == "custom.uppercase_ratio"
    assert check(Custom(), "NASA and ESA") is None  # too few letters to call it shouting
    assert check(Custom(), "0x1f 0x2e 0x3d 1234 5678 9012 3456 7890 value").rule == "custom.digit_ratio"
    links = " ".join(f"https://example.com/{i}" for i in range(10)) + " visit these"
    assert check(Custom(), links).rule == "custom.url_word_ratio"
    assert check(Custom(), "text with \ufffd\ufffd replacement").rule == "custom.replacement_char_ratio"
    assert check(Custom(CustomSettings(max_uppercase_ratio=None)), "ALL CAPS " * 20) is None


# -- the quality step --------------------------------------------------------------------------------


def batch(texts, langs, modalities=None) -> pa.RecordBatch:
    b = documents_batch(texts, modalities=modalities)
    return b.append_column("lang", pa.array(langs, pa.string()))


def test_quality_step_runs_the_recipe_in_order_and_gates_by_language():
    step = QualityStep(CleaningSettings().quality)
    german_short = "Kurzer Text."
    texts = [GOOD, "Just a few words.", german_short, GOOD + "\nCode { here } too, sadly."]
    r = step(batch(texts, ["en", "en", "de", "en"]))
    assert r.kept.column("id").to_pylist() == ["d0", "d2"]
    assert r.kept.column("text").to_pylist()[0] == GOOD.replace("\n\n", "\n")  # C4 dropped the blank line
    assert r.kept.column("text").to_pylist()[1] == german_short  # English presets skip German documents
    assert r.stats.skipped == 1
    rules = dict(
        zip(r.exclusions.column("id").to_pylist(), r.exclusions.column("rule").to_pylist(), strict=True)
    )
    assert rules == {"d1": "gopher_quality.too_few_words", "d3": "c4.curly_bracket"}
    assert r.stats.counters["c4.docs_rewritten"] == 1


def test_quality_step_reports_the_first_failing_rule_set():
    step = QualityStep([GopherQualitySettings(languages=None), FineWebSettings(languages=None)])
    menu = "\n".join(f"Menu entry number {i} of the site" for i in range(10))  # 70 words: Gopher passes it
    r = step(batch(["Few words only.", menu], [None, None]))
    assert r.exclusions.column("rule").to_pylist() == [
        "gopher_quality.too_few_words",
        "fineweb.line_punct_ratio",
    ]


def test_a_rewrite_that_leaves_nothing_is_a_removal():
    step = QualityStep([C4Settings(languages=None, min_num_sentences=None)])
    r = step(batch(["no punctuation anywhere\nnone here either"], [None]))
    assert r.exclusions.column("rule").to_pylist() == ["c4.empty_after_rewrite"]


def test_quality_is_bounded_on_pathological_documents():
    step = QualityStep([p.model_copy(update={"languages": None}) for p in CleaningSettings().quality])
    rng = random.Random(1)
    junk = "".join(rng.choices("ab .\n{}#", k=1_000_000))
    docs = [
        "a" * 1_000_000,
        "1 " * 500_000,
        "a@" * 500_000,
        "." * 1_000_000,
        "\n" * 1_000_000 + "x",
        "word " * 200_000,
        junk,
    ]
    start = time.process_time()
    r = step(batch(docs, [None] * len(docs)))
    assert time.process_time() - start < 15.0
    assert r.stats.docs_in == len(docs) and r.stats.docs_removed == len(docs)
    assert "quality.error" not in r.stats.removed_docs


def test_every_registered_preset_is_a_config_key_with_its_own_module():
    """The registry is the one list of presets: each is accepted by the `cleaning:` config under its
    name, builds its rule set, and lives in the module of the same name."""
    import importlib

    from platform_assets.cleaning.quality import REGISTRY, rule_set

    assert list(REGISTRY) == ["gopher_quality", "gopher_repetition", "c4", "fineweb", "length", "symbol_ratio",
                              "code_ratio", "custom", "seed_filters"]
    for name, entry in REGISTRY.items():
        settings = CleaningSettings(quality=[{"preset": name}]).quality[0]
        assert type(settings) is entry.settings and rule_set(settings).preset == name
        assert importlib.import_module(f"platform_assets.cleaning.quality.{name}").PRESET is entry
    with pytest.raises(ValueError, match="does not match any of the expected tags"):
        CleaningSettings(quality=[{"preset": "toxicity"}])


def test_a_views_properties_are_computed_once_and_can_be_given(monkeypatch):
    """TextView's once-computed properties (text_view._computed_once, cached_property without its
    lock): the first access computes and stores in the instance, later ones read it back; a value put
    in the instance's __dict__ first is what every access reads (the tests hand over vocabularies so)."""
    from platform_assets.cleaning.quality import text_view

    calls = Counter()
    real = text_view.split_words

    def counted(text):
        calls["split"] += 1
        return real(text)

    monkeypatch.setattr(text_view, "split_words", counted)
    view = text_view.TextView("one two two three")
    assert view.tokens == ["one", "two", "two", "three"] and view.tokens is view.tokens
    assert calls["split"] == 1 and view.__dict__["tokens"] is view.tokens
    given = text_view.TextView("anything")
    given.__dict__["tokens"] = ["handed"]
    assert given.tokens == ["handed"] and calls["split"] == 1
    assert isinstance(text_view.TextView.__dict__["tokens"], text_view._computed_once)
