"""Language step, issue #17: BCP-47 allow-lists, script check, short-text thresholds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from document_batches import documents_batch
from pydantic import ValidationError

from platform_assets.cleaning.language_bands import band_min_score, count_words
from platform_assets.cleaning.language_id import LanguageFilter, LanguageIdentifier
from platform_assets.cleaning.language_script import (
    LANGUAGE_SCRIPTS,
    han_variant,
    reported_script,
    script_counts,
    script_share,
)
from platform_assets.cleaning.language_tags import (
    MACROLANGUAGE_OF,
    PY3LANGID_LABELS,
    REPORTED_LANGUAGES,
    AllowList,
    canonical_language,
    parse_tag,
    reported_label,
)
from platform_assets.cleaning.settings import LanguageSettings

# 20 "words" of Canadian syllabics (U+1400..U+167F), built from code points: Cree/Inuktitut letters,
# a script py3langid has no label for
SYLLABICS = " ".join(
    "".join(chr(0x1401 + (7 * w + 11 * k) % 0x26A) for k in range(2 + w % 5)) for w in range(20)
)
SIMPLIFIED = "列出目录内容，并将结果写入标准输出"  # zh_CN man page wording
TRADITIONAL = "列出目錄內容，並將結果寫入標準輸出"  # the same in zh_TW
BOKMAL = "Biblioteket åpner klokken ni om morgenen og stenger sent på torsdager, når frivillige " \
         "holder lesegrupper for barn."
NYNORSK = "Biblioteket opnar klokka ni om morgonen og stengjer seint på torsdagar, når frivillige " \
          "held lesegrupper for born."


def step_over(settings: LanguageSettings, texts: list[str], modalities: list[str] | None = None):
    return LanguageFilter(settings)(documents_batch(texts, modalities=modalities))


# -- tags ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("tag", "language", "script", "region"), [
    ("de", "de", None, None), ("deu", "de", None, None), ("ger", "de", None, None),
    ("pt-BR", "pt", None, "BR"), ("pt_br", "pt", None, "BR"), ("zh-Hant", "zh", "Hant", None),
    ("ZH_hans_CN", "zh", "Hans", "CN"), ("sr-Latn", "sr", "Latn", None), ("fuv", "ff", None, None),
    ("arb", "ar", None, None), ("cmn", "zh", None, None), ("iw", "he", None, None),
    ("nob", "nb", None, None), ("no", "no", None, None), ("bcl", "bcl", None, None),
])
def test_tags_parse_to_the_reported_form(tag, language, script, region):
    parsed = parse_tag(tag)
    assert (parsed.language, parsed.script, parsed.region) == (language, script, region)


def test_allow_list_matching_rules():
    norwegian = AllowList(["no"])
    assert norwegian.allows("nb", "Latn") and norwegian.allows("nn", "Latn")
    assert not norwegian.allows("da", "Latn") and not norwegian.allows("sv", "Latn")
    bokmal = AllowList(["nb"])
    assert bokmal.allows("nb", "Latn") and not bokmal.allows("nn", "Latn")
    traditional = AllowList(["zh-Hant"])
    assert traditional.allows("zh", "Hant") and not traditional.allows("zh", "Hans")
    assert traditional.allows("zh", "Hani")  # only characters both forms share: valid in either
    assert not traditional.allows("ja", "Jpan")
    assert AllowList(["zh"]).allows("zh", "Hans") and AllowList(["zh"]).allows("zh", "Hant")
    assert AllowList(["pt-BR"]).allows("pt", "Latn")  # regions are ignored: the model has none
    assert AllowList(["ff"]).allows("ff", "Latn") and AllowList(["ar"]).allows("ar", "Arab")
    assert AllowList(["sr-Latn"]).allows("sr", "Latn") and not AllowList(["sr-Latn"]).allows("sr", "Cyrl")
    assert AllowList(["kok"]).allows("gom", "Deva")  # a macrolanguage without a 639-1 code


def test_scripts_within_japanese_and_korean_writing_match_it():
    """py3langid labels ja / ko; their texts are reported in the composite scripts Jpan (Hani + Hira +
    Kana) and Kore (Hang + Hani): an entry naming one of the parts keeps them."""
    for entry in ("ko-Hang", "ko-Kore", "ko-Hani", "KO_hang_KR"):
        assert AllowList([entry]).allows("ko", "Kore"), entry
    for entry in ("ja-Hira", "ja-Kana", "ja-Jpan", "ja-Hani"):
        assert AllowList([entry]).allows("ja", "Jpan"), entry
    assert not AllowList(["ko-Hang"]).allows("ja", "Jpan") and not AllowList(["ja-Hira"]).allows("ko", "Kore")
    assert not AllowList(["ko-Hang"]).allows("ko", "Latn")  # romanised Korean is not in Hangul
    assert not AllowList(["ja-Hira"]).allows("zh", "Hani") and not AllowList(["ko-Hang"]).allows("zh", "Hans")
    assert AllowList(["zh-Hani"]).allows("zh", "Hans") and AllowList(["zh-Hani"]).allows("zh", "Hant")


def test_japanese_and_korean_script_entries_through_the_step():
    texts = ["디렉터리의 내용을 나열하고 결과를 표준 출력에 씁니다.",
             "ディレクトリの内容を一覧表示して、結果を標準出力に書き出す。", SIMPLIFIED]
    r = step_over(LanguageSettings(allow=("ko-Hang", "ja-Hira")), texts)
    assert r.kept.column("lang").to_pylist() == ["ko", "ja"]
    assert r.kept.column("lang_script").to_pylist() == ["Kore", "Jpan"]
    assert [row["id"] for row in r.exclusions.to_pylist()] == ["d2"]


@pytest.mark.parametrize(("entry", "model_says"), [
    ("arz", "ar"), ("ary", "ar"), ("arb", "ar"), ("fuv", "ff"), ("cmn", "zh"), ("yue", "zh"), ("sdh", "ku"),
    ("gug", "gn"), ("uzs", "uz"), ("ltg", "lv"), ("zsm", "ms"), ("ARZ_Arab", "ar"),
])
def test_an_entry_the_macrolanguage_fold_would_widen_is_refused(entry, model_says):
    with pytest.raises(ValidationError) as err:
        LanguageSettings(allow=("en", entry))
    assert f"{entry} is identified as {model_says} by the language-ID model; write {model_says}" in str(err.value)


def test_entries_that_name_the_same_language_are_not_widened():
    # 639-2/3 spellings of a 639-1 language, deprecated subtags and individual languages without a
    # macrolanguage code users could write stay allowed
    for entry, language in (("deu", "de"), ("nob", "nb"), ("nb", "nb"), ("iw", "he"), ("gom", "gom"),
                            ("kok", "kok"), ("no", "no"), ("bs", "bs"), ("ar", "ar"), ("zh-Hant", "zh")):
        assert AllowList([entry]).tags[0].language == language


@pytest.mark.parametrize(("key", "normalised"), [
    ("NB", "nb"), ("no", "no"), ("zh_hans", "zh-Hans"), ("ZH-Hant-TW", "zh-Hant"), ("deu", "de"),
    ("pt-BR", "pt"), ("iw", "he"), ("ko-Hang", "ko-Hang"),
])
def test_share_keys_are_normalised_like_the_allow_list(key, normalised):
    from platform_assets.config import CleaningGates

    assert list(CleaningGates(language_shares={key: (0.1, 0.9)}).language_shares) == [normalised]


@pytest.mark.parametrize(("shares", "message"), [
    ({"xx": (0, 1)}, "name no language the identifier reports"),
    ({"arz": (0, 1)}, "arz is identified as ar by the language-ID model; write ar"),
    ({"nb": (0, 1), "NB": (0.5, 1)}, "'nb' and 'NB' are the same language tag"),
    ({"en": (0.8, 0.2)}, "min 0.8 is above max 0.2"),
    ({"en": (-0.1, 1.0)}, "shares are between 0 and 1"),
])
def test_bad_share_keys_and_bounds_are_configuration_errors(shares, message):
    from platform_assets.config import CleaningGates

    with pytest.raises(ValidationError) as err:
        CleaningGates(language_shares=shares)
    assert message in str(err.value)


def test_share_key_counts_every_language_and_script_it_covers():
    from platform_assets.cleaning.language_tags import tag_count

    counts = {("nb", "Latn"): 5, ("nn", "Latn"): 2, ("zh", "Hans"): 3, ("zh", "Hani"): 1, ("zh", "Hant"): 4,
              ("ko", "Kore"): 6, ("da", "Latn"): 9}
    assert tag_count("no", counts) == 7 and tag_count("nb", counts) == 5 and tag_count("nn", counts) == 2
    assert tag_count("zh", counts) == 8 and tag_count("zh-Hans", counts) == 4 and tag_count("zh-Hant", counts) == 5
    assert tag_count("ko-Hang", counts) == 6 and tag_count("sv", counts) == 0


@pytest.mark.parametrize("bad", [["xx"], ["iu"], ["en", "und"], ["en-US-x-private"], ["english"], [""]])
def test_unknown_or_malformed_tags_are_configuration_errors(bad):
    with pytest.raises(ValidationError) as err:
        LanguageSettings(allow=tuple(bad))
    assert "language tag" in str(err.value)


def test_band_keys_must_be_positive():
    with pytest.raises(ValidationError, match="positive"):
        LanguageSettings(min_score_by_words={0: 0.1})


def test_every_model_label_has_a_reported_form_and_a_script_table_entry():
    from py3langid.langid import MODEL_FILE
    from py3langid.langid import LanguageIdentifier as Py3LangId

    model = Py3LangId.from_model_file(MODEL_FILE, norm_probs=True)
    assert set(model.nb_classes) == set(PY3LANGID_LABELS)
    assert reported_label("fuv") == "ff" and reported_label("no") == "nb" and reported_label("yue") == "zh"
    assert REPORTED_LANGUAGES - {"zxx"} <= set(LANGUAGE_SCRIPTS)


ISO_639_3 = Path("/usr/share/iso-codes/json/iso_639-3.json")


@pytest.mark.skipif(not ISO_639_3.is_file(), reason="Debian's iso-codes is not installed")
def test_macrolanguage_table_agrees_with_iso_639_3():
    entries = json.loads(ISO_639_3.read_text())["639-3"]
    by_code = {e.get("alpha_2", e["alpha_3"]): e for e in entries} | {e["alpha_3"]: e for e in entries}
    for member, macro in MACROLANGUAGE_OF.items():
        assert by_code[macro]["scope"] == "M", macro
        assert by_code[member]["scope"] == "I", member
    for e in entries:  # the 3-letter code of every 639-1 language canonicalises to its 639-1 code
        if "alpha_2" in e:
            assert canonical_language(e["alpha_3"]) in (e["alpha_2"], MACROLANGUAGE_OF.get(e["alpha_2"]))


# -- scripts -------------------------------------------------------------------------------------------


def test_canadian_syllabics_are_not_amharic():
    lang, score = LanguageIdentifier().predict(SYLLABICS)
    assert (lang, score > 0.9) == ("am", True)  # the model's answer: why the check exists
    assert script_share("am", script_counts(SYLLABICS)) == 0.0
    r = step_over(LanguageSettings(), [SYLLABICS, "ሰላም ለዓለም፤ ይህ በአማርኛ የተጻፈ አጭር ጽሑፍ ነው።"])
    assert r.kept.column("id").to_pylist() == ["d1"]  # real Amharic (Ethiopic) passes
    assert r.kept.column("lang_script").to_pylist() == ["Ethi"]
    (row,) = r.exclusions.to_pylist()
    assert row["rule"] == "language.script_mismatch" and row["value"].startswith("am:")
    assert row["value"].endswith("(Cans)")


def test_refused_label_of_a_caption_is_undetermined_not_removed():
    r = step_over(LanguageSettings(), [SYLLABICS], modalities=["image"])
    assert r.kept.column("lang").to_pylist() == ["und"] and r.kept.column("lang_score").to_pylist() == [0.0]


def test_han_variants_and_reported_scripts():
    assert han_variant(SIMPLIFIED) == "Hans" and han_variant(TRADITIONAL) == "Hant"
    assert han_variant("文件") == "Hani"  # the same in both forms
    assert reported_script("zh", script_counts(TRADITIONAL)) == "Hant"
    assert reported_script("ja", script_counts("ディレクトリの内容を表示する")) == "Jpan"
    assert reported_script("ru", script_counts("Показать содержимое каталога (ls)")) == "Cyrl"
    assert script_counts("") == {} and reported_script("en", script_counts("42")) is None


def test_script_share_weighs_letters_by_their_bytes():
    counts = script_counts("PostgreSQL TCLshell 客户端")
    assert counts == {"Latn": 18, "Hans": 9}  # 18 ASCII letters; 3 Han characters, 3 bytes each
    assert script_share("zh", counts) == pytest.approx(9 / 27)  # by letters: 3 / 21


def test_allow_list_of_scripts_through_the_step():
    texts = [SIMPLIFIED, TRADITIONAL, BOKMAL, NYNORSK, "Ett kort svenskt stycke om biblioteket i staden."]
    r = step_over(LanguageSettings(allow=("zh-Hant", "no")), texts)
    assert r.kept.column("id").to_pylist() == ["d1", "d2", "d3"]
    assert r.kept.column("lang").to_pylist() == ["zh", "nb", "nn"]
    assert r.kept.column("lang_script").to_pylist() == ["Hant", "Latn", "Latn"]
    rules = {row["id"]: row["value"] for row in r.exclusions.to_pylist()}
    assert rules["d0"].startswith("zh-Hans:")  # the allow-list names a script: the value shows it
    r = step_over(LanguageSettings(allow=("zh-Hans",)), texts[:2])
    assert r.kept.column("id").to_pylist() == ["d0"]


# -- short texts -----------------------------------------------------------------------------------


def test_word_counts_and_bands():
    assert count_words("Verzeichnisinhalte auflisten") == 2
    assert count_words("列出目录内容") == 3  # 2 Han characters a word
    assert count_words("ps2pdf12 - convert 1.2") == 2  # "1.2" holds no letter
    assert count_words("") == 0
    bands = {3: 0.25, 10: 0.3}
    assert [band_min_score(n, bands, 0.5) for n in (0, 1, 3, 4, 10, 11)] == [0.25, 0.25, 0.25, 0.3, 0.3, 0.5]
    assert band_min_score(2, {}, 0.5) == 0.5


# NAME lines of translated man pages (Debian bookworm) that py3langid labels correctly with a score
# between the band threshold and the former single threshold of 0.5
SHORT_CORRECT = {
    "de": "Debian-.buildinfo-Dateien erstellen",  # dpkg-genbuildinfo(1), 0.38
    "fr": "Effacer la console",  # clear_console(1), 0.32
    "nl": "toon map inhoud",  # dir(1), 0.40
    "pl": "konwertuje i kopiuje plik",  # dd(1), 0.37
    "ru": "учебник по Vim",  # vimtutor(1), 0.27
    "zh": "恢复 IP Tables",  # iptables-restore(8), 0.34
}


def test_short_texts_of_a_correctly_identified_language_are_kept():
    ident = LanguageIdentifier()
    texts = list(SHORT_CORRECT.values())
    predicted = ident.predict_many(texts)
    assert [lang for lang, _ in predicted] == list(SHORT_CORRECT)
    low = [t for t, (_, score) in zip(texts, predicted, strict=True) if score < 0.5]
    assert low, "the sample must hold texts the former single threshold removed"
    before = step_over(LanguageSettings(min_score_by_words={}), texts)
    after = step_over(LanguageSettings(), texts)
    assert before.kept.num_rows == len(texts) - len(low)
    assert after.kept.column("lang").to_pylist() == list(SHORT_CORRECT)


def test_long_documents_keep_the_single_threshold():
    long_text = "Der Bericht beschreibt die Ergebnisse der Umfrage und die nächsten Schritte " * 3
    settings = LanguageSettings(min_score=0.999999, min_score_by_words={10: 0.0})
    r = step_over(settings, [long_text, "Verzeichnisinhalte auflisten"])
    assert r.kept.column("id").to_pylist() == ["d1"]  # > 10 words: min_score; 2 words: its band
    assert r.exclusions.to_pylist()[0]["value"].endswith("< 1")


def test_shortset_builder_reads_name_lines(tmp_path: Path):
    import gzip

    from benchmarks.langid_shortset import build

    def page(path: Path, name_line: str) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(gzip.compress(f'.TH LS 1\n.SH NAME\n{name_line}\n.SH SYNOPSIS\n\\fBls\\fP\n'.encode()))

    page(tmp_path / "man1/ls.1.gz", r"ls \- list directory contents")
    page(tmp_path / "man1/cp.1.gz", r"cp \- copy files and directories")
    page(tmp_path / "de/man1/ls.1.gz", r"ls \- Verzeichnisinhalte \fBauflisten\fR")
    page(tmp_path / "de/man1/cp.1.gz", r"cp \- copy files and directories")  # untranslated
    page(tmp_path / "ja/man1/ls.1.gz", r"ls \- list directory contents")
    (tmp_path / "de/man1/mv.1").write_text(".Dd 2024\n.Nm mv\n.Nd Dateien verschieben\n")
    rows, stats = build(tmp_path, per_locale=10, min_per_locale=1)
    assert [(r["lang"], r["text"], r["words"]) for r in rows] == [
        ("de", "Verzeichnisinhalte auflisten", 2), ("de", "Dateien verschieben", 2)]
    assert stats["de.identical_to_english"] == 1 and stats["ja.identical_to_english"] == 1


def test_short_text_report_compares_before_and_after():
    from benchmarks.langid_accuracy import format_short_report, short_text_report

    rows = [{"text": t, "lang": lang} for lang, t in SHORT_CORRECT.items()]
    rows.append({"text": SYLLABICS, "lang": "iu"})
    report = short_text_report(rows)
    assert (report["bands"]["1-3"]["lines"], report["bands"]["4-10"]["lines"]) == (4, 2)
    for name in ("1-3", "4-10"):
        band = report["bands"][name]
        assert band["before"]["accuracy"] == band["after"]["accuracy"] == 1.0
        # every one scores under 0.5: the single threshold removed them all, the bands keep them all
        assert band["before"]["correct_kept"] == 0.0 and band["after"]["correct_kept"] == 1.0
    assert report["languages"]["iu"]["before"]["kept"] == 1.0 and report["languages"]["iu"]["after"]["kept"] == 0.0
    assert "| 1-3 | 4 |" in format_short_report(report)


def test_word_count_stops_past_its_limit():
    text = "eins zwei drei vier fünf sechs sieben acht neun zehn elf zwölf"
    assert count_words(text) == 12 and count_words(text, limit=10) == 11 and count_words(text, limit=3) == 4
