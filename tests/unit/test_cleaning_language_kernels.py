"""The language step's compiled kernels (language_kernels.py) against the Python forms they replace:
the script pass against language_script.script_counts_by_regex (the `regex` Script property over the
letters, run by run), counts and their order, on empty text, one character, every script, beyond the
BMP, combining marks, lone surrogates and the Han variants; the word count against
language_bands.count_words_by_regex (its backtracking cases, every character class, limits); the DFA
walk against py3langid's own `visit_counts` on arbitrary bytes; and that building the language step
loads every kernel signature the step then uses (no compilation in the first batch). The cache
fallback is quality/kernels.compiled's, tested in test_cleaning_quality_numba.py."""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from platform_assets.cleaning import language_kernels
from platform_assets.cleaning.language_bands import _compiled_words, count_words, count_words_by_regex
from platform_assets.cleaning.language_script import (
    _SCRIPT_CODES,
    _compiled_scripts,
    script_counts,
    script_counts_by_regex,
)


def _letters_by_script() -> dict[str, list[str]]:
    _, script_of, _ = _compiled_scripts()
    by_script: dict[str, list[str]] = {}
    for cp in np.flatnonzero(script_of != language_kernels.NOT_LETTER).tolist():
        by_script.setdefault(_SCRIPT_CODES[script_of[cp]], []).append(chr(cp))
    return by_script


def _same(text: str) -> None:
    expected = script_counts_by_regex(text)
    got = script_counts(text)
    assert list(got.items()) == list(expected.items()), repr(text[:80])


ADVERSARIAL_SCRIPT_TEXTS = [
    "", "a", "é", " ", "1", "\n", "\ud800", "\ud800a\udfff", "e\u0301", "\u0301", "\u0301\u0301a",
    "ÉCRIT", "a" * 3000, "é" * 3000, "Ǆ ǅ ǆ", "ß ẞ", "\u00aa\u00ba",  # ordinal indicators: Latin letters
    "हिन्दी", "क्\u200dष", "ಕನ್ನಡ", "한국어 한국어", "\u1100\u1161\u11a8",  # virama, ZWJ, conjoining jamo
    "文件", "这个", "這個", "这這", "这這這", "文件 文件 text",  # Hani, Hans, Hant, ties
    "日本語のテキスト", "ㄅㄆㄇ", "𞤀𞤁𞤂 Adlam", "𠀀𠀁 𪜀", "𝐀𝐁𝐂 math", "a\U0001F600b", "𐐀𐐨 Deseret",
    "ᐃᓄᒃᑎᑐᑦ", "ⵜⴰⵎⴰⵣⵉⵖⵜ", "ߒߞߏ", "ꦗꦮ", "ᠮᠣᠩᠭᠣᠯ", "ދިވެހި", "ܣܘܪܝܝܐ", "ᏣᎳᎩ",
    "\u0640\u0640", "\u3005\u3005々", "ーー", "ｱｲｳ ＡＢＣ", "\ufeffa\u200bb", "\uffff\U0010ffff",
]


@pytest.mark.parametrize("text", ADVERSARIAL_SCRIPT_TEXTS)
def test_script_pass_matches_the_regex_runs(text):
    _same(text)


def test_script_pass_matches_on_one_letter_of_every_script_and_their_mixtures():
    by_script = _letters_by_script()
    assert set(by_script) == set(_SCRIPT_CODES)  # the table knows every script, and unlisted letters
    rng = random.Random(13)
    for letters in by_script.values():
        for letter in rng.sample(letters, min(len(letters), 40)):  # each alone: its script and its bytes
            _same(letter)
    every_letter = [c for letters in by_script.values() for c in letters]
    _same("".join(every_letter))
    fillers = [" ", "\u0301", "1", ".", "\n", "\u200d", "\U0001F600"]
    for _ in range(60):  # runs broken by non-letters, scripts in every order, all of the BMP and beyond
        pieces = [rng.choice(every_letter) if rng.random() < 0.8 else rng.choice(fillers)
                  for _ in range(rng.randint(1, 400))]
        _same("".join(pieces))


def test_script_pass_han_variant_follows_the_form_counts():
    assert script_counts("这个") == {"Hans": 6}
    assert script_counts("這個") == {"Hant": 6}
    assert script_counts("这這 abc") == {"Latn": 3, "Hani": 6}  # a tie: Han as Hani, each letter once (3 bytes)
    assert script_counts_by_regex("这這 abc") == {"Latn": 3, "Hani": 6}
    assert script_counts("文件") == script_counts_by_regex("文件") == {"Hani": 6}  # neither form: once too
    assert list(script_counts("文 abc")) == ["Latn", "Hani"]  # Han's entry last, as the regex form puts it


WORD_COUNT_CASES = [
    "", "a", "1", " ", "123", "12漢", "abc漢字", "漢字abc", "漢", "漢字漢", "a\u0e51b", "\u0e51\u0e51 x",
    "\u0e3f", "฿฿฿ a", "\u0e5a", "a\u0e5a\u0e5ab", "\u2e80\u2e80\u2e80",
    "1\u0301", "\u0301a", "a\u0301", "e\u0301\u0301x", "1\u0e51", "1\u0e01", "12 34 ab",
    "ps2pdf12 - convert 1.2", "Verzeichnisinhalte auflisten", "列出目录内容", "日本語のテキスト", "ｱｲｳ ＡＢＣ",
    "\u3005\u3007\u2e80", "a_b", "x2y2z2", "2x", "x2", "\ud800a\udfff", "a\U0001F600b", "𠀀𠀁 𪜀", "𝐀𝐁𝐂 1𝐀",
    "٣٤ عربى", "a" * 3000, "1" * 3000 + "a", "1" * 3000, "ก" * 7, "word " * 40,
]


@pytest.mark.parametrize("text", WORD_COUNT_CASES)
def test_word_count_matches_the_regex(text):
    assert count_words(text) == count_words_by_regex(text)
    for limit in (0, 1, 3, 10):
        assert count_words(text, limit) == count_words_by_regex(text, limit), limit


def _characters_of_each_word_class() -> list[str]:
    """A few characters of every combination of word_count's class bits (none, UNSPACED, LETTER,
    WORD, and each mixture the table holds), ASCII included."""
    _, classes, _ = _compiled_words()
    rng = random.Random(7)
    picked: list[str] = []
    for bits in np.unique(classes).tolist():
        points = np.flatnonzero(classes == bits).tolist()
        picked += [chr(cp) for cp in rng.sample(points, min(len(points), 12))]
    return picked + list(" \n\t.-'_0aZ")


def test_word_count_table_holds_every_class_mixture_the_regex_knows():
    _, classes, _ = _compiled_words()
    k = language_kernels
    assert classes[ord("a")] == k.LETTER_CHAR | k.WORD_CHAR and classes[ord("1")] == k.WORD_CHAR
    assert classes[ord("漢")] == k.UNSPACED_CHAR | k.LETTER_CHAR | k.WORD_CHAR
    assert classes[ord("\u0e51")] == k.UNSPACED_CHAR | k.WORD_CHAR  # a Thai digit: unspaced, not a letter
    assert classes[ord("\u0e5a")] == k.UNSPACED_CHAR  # Thai angkhankhu: Thai script, punctuation
    assert classes[ord("\u0e3f")] == 0  # the baht sign: Common script, a symbol
    assert classes[ord("\u0301")] == k.WORD_CHAR and classes[ord(" ")] == 0


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(_characters_of_each_word_class()), max_size=60), st.integers(-1, 12))
def test_word_count_matches_the_regex_on_mixtures_of_every_class(chars, limit):
    text = "".join(chars)
    limit_or_none = None if limit < 0 else limit
    assert count_words(text, limit_or_none) == count_words_by_regex(text, limit_or_none)


def _visit_counts_reference(model, sample: bytes) -> list[tuple[int, int]]:
    from py3langid.langid import visit_counts

    visits = visit_counts(model.tk_nextmove, model._rowbase, model.tk_output, sample) or {}
    return list(visits.items())


def test_dfa_walk_matches_py3langids_visit_counts():
    from py3langid.langid import MODEL_FILE
    from py3langid.langid import LanguageIdentifier as Py3LangId

    from platform_assets.cleaning.language_id import _load_model

    m = _load_model()  # mapped from the cache file where there is one: compared with py3langid's own load
    reference = Py3LangId.from_model_file(MODEL_FILE, norm_probs=True)
    rng = random.Random(5)
    samples = [b"", b"a", b"\xff", bytes(range(256)), bytes(range(255, -1, -1)) * 3, b"", b"the " * 500,
               "Библиотека 図書館 도서관 \U0001F600".encode(), "e\u0301".encode(), b"\x00" * 10]
    samples += [bytes(rng.randrange(256) for _ in range(rng.randint(0, 3000))) for _ in range(30)]
    samples += [rng.choice(samples[6:10]) * rng.randint(1, 5) for _ in range(20)]
    starts = np.zeros(len(samples) + 1, dtype=np.int64)
    np.cumsum([len(s) for s in samples], out=starts[1:])
    data = np.frombuffer(b"".join(samples), dtype=np.uint8)
    features, counts, bounds = language_kernels.dfa_features(data, starts, m.nextmove, m.rowbase, m.output,
                                                            m.weights.shape[0])
    assert bounds[0] == 0 and bounds[-1] == features.size == counts.size
    for j, sample in enumerate(samples):
        a, b = bounds[j], bounds[j + 1]
        got = list(zip(features[a:b].tolist(), counts[a:b].tolist(), strict=True))
        assert got == _visit_counts_reference(reference, sample), j
    assert any(bounds[j + 1] > bounds[j] for j in range(len(samples)))  # the walk found features at all


def test_loading_the_language_step_loads_every_kernel_signature():
    from platform_assets.cleaning.language_id import LanguageFilter

    step = LanguageFilter()
    step.load()  # what the pipeline calls before its first batch (building loads nothing)
    kernels = (language_kernels.dfa_features, language_kernels.script_letter_bytes, language_kernels.word_count)
    signatures = {k: len(k.signatures) for k in kernels}
    assert all(signatures.values())
    step.identifier.predict_many(["Die Bibliothek öffnet um neun Uhr.", "図書館は朝九時に開館し", "plain"] * 20)
    script_counts("Библиотека 図書館")
    step.prepare(["Die Bibliothek öffnet um neun Uhr.", "plain words"], [None, None], [None, None])
    assert {k: len(k.signatures) for k in signatures} == signatures  # nothing compiled after load()


def test_loading_the_conversation_step_loads_the_word_count():
    from platform_assets.cleaning.conversation_filter import ConversationFilter

    ConversationFilter().load()
    signatures = len(language_kernels.word_count.signatures)
    assert signatures and _compiled_words.cache_info().currsize == 1
    assert count_words("two words") == 2 and count_words("漢字 word") == 2
    assert len(language_kernels.word_count.signatures) == signatures  # nothing compiled after load()
