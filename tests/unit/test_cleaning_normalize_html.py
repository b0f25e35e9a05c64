"""Normalisation (Unicode form, mojibake, control characters, whitespace) and HTML main-text extraction."""

from __future__ import annotations

import time
from collections import Counter

import pyarrow as pa
import pytest
from document_batches import documents_batch

from platform_assets.cleaning.html_extract import HtmlExtract
from platform_assets.cleaning.normalize import Normalize, normalize_text
from platform_assets.cleaning.settings import HtmlSettings, NormalizeSettings


def batch(texts, modalities=None) -> pa.RecordBatch:
    return documents_batch(texts, modalities=modalities, source="src")


NFC = NormalizeSettings()
NFKC = NormalizeSettings(unicode_form="NFKC")


def test_unicode_form_is_configurable():
    decomposed = "e\u0301te\u0301"  # "été" with combining accents
    assert normalize_text(decomposed, NFC) == "\u00e9t\u00e9"
    compat = "ﬁne ① Ｆｕｌｌ x²"
    assert normalize_text(compat, NFC) == compat  # NFC keeps what the author typed
    assert normalize_text(compat, NFKC) == "fine 1 Full x2"
    assert normalize_text(decomposed, NormalizeSettings(unicode_form=None)) == decomposed


@pytest.mark.parametrize(
    ("broken", "fixed"),
    [
        ("cafÃ© dÃ©jÃ  vu", "café déjà vu"),  # UTF-8 read as Latin-1
        ("The Mona Lisa doesnâ€™t have eyebrows.", "The Mona Lisa doesn’t have eyebrows."),  # as cp1252
        ("Ð¿Ñ€Ð¸Ð²ÐµÑ‚ Ð¼Ð¸Ñ€", "привет мир"),
        ("РїСЂРёРІРµС‚ РјРёСЂ", "привет мир"),  # UTF-8 Cyrillic read as cp1251
        ("S√≥lo el administrador", "Sólo el administrador"),  # as MacRoman
    ],
)
def test_mojibake_is_repaired(broken, fixed):
    counters: Counter[str] = Counter()
    assert normalize_text(broken, NFC, counters) == fixed
    assert counters["mojibake_fixed"] == 1


def test_correct_text_is_left_alone_by_the_mojibake_repair():
    for text in ["naïve façade, Größe, ñandú", "Привет, мир! Её ещё нет.", "日本語とEnglish", "plain ascii"]:
        assert normalize_text(text, NFC) == text
    assert normalize_text("cafÃ©", NormalizeSettings(fix_mojibake=False)) == "cafÃ©"


def test_control_characters_removed_but_joiners_and_bidi_marks_kept():
    text = "a\x00b\x07c\x1bd\u200be\ufefff\u00adg\x7fh\ufffei"
    out = normalize_text(text, NormalizeSettings(normalize_whitespace=False))
    assert out == "abcdefghi"
    # a C1 character in text is a cp1252 byte decoded as Latin-1: ftfy restores it (0x85 is "…")
    assert normalize_text("wait\x85 what", NFC) == "wait… what"
    keep = "👩\u200d💻 می\u200cخواهم \u200fRTL"  # ZWJ emoji, Persian ZWNJ, right-to-left mark
    assert normalize_text(keep, NFC) == keep


def test_terminal_escape_sequences_removed():
    assert normalize_text("\x1b[31mred\x1b[0m alert", NFC) == "red alert"


def test_whitespace_normalisation():
    text = "  first line  \r\nsecond\u00a0line\u2003x\rthird\x0cfourth\n\n\n\n\n\nlast\t \n\n"
    assert normalize_text(text, NFC) == "  first line\nsecond line x\nthird\nfourth\n\n\nlast"
    assert normalize_text("a    b\t\tc", NormalizeSettings(collapse_spaces=True)) == "a b c"
    assert normalize_text("a\n\n\n\nb", NormalizeSettings(max_blank_lines=0)) == "a\nb"
    assert normalize_text("中文\u3000全角", NFC) == "中文\u3000全角"  # the ideographic space is a character


def test_code_indentation_survives():
    code = "def f():\n    if x:\n        return 1\n"
    assert normalize_text(code, NFC) == code.rstrip("\n")


def test_normalisation_is_idempotent():
    text = "cafÃ©  \r\n\n\n\n\u00a0x\x00 ﬁ"
    once = normalize_text(text, NFKC)
    assert normalize_text(once, NFKC) == once


def test_normalize_step_rewrites_and_removes_what_becomes_empty():
    r = Normalize()(batch(["ok\r\n", "\x00\x01\u200b", "fine"]))
    assert r.kept.column("text").to_pylist() == ["ok", "fine"]
    assert r.exclusions.column("rule").to_pylist() == ["normalize.empty"]
    assert r.stats.modified == 1 and r.stats.bytes_rewritten == 2


def test_normalize_is_linear_on_pathological_runs():
    for text in ["\n" * 1_000_000, " " * 1_000_000 + "x", "Ã" * 500_000, "\x00" * 1_000_000]:
        start = time.process_time()
        normalize_text(text, NFC)
        assert time.process_time() - start < 3.0


def _whitespace_line_by_line(text: str, s: NormalizeSettings) -> tuple[str, bool]:
    """The whitespace passes as first written (every line split off and stripped; control characters
    found?): the reference that the substring-test shortcuts in normalize.py must reproduce exactly."""
    from platform_assets.cleaning.normalize import _CONTROL_RE, _INNER_SPACES_RE, _LINE_BREAK_RE, _SPACES_RE

    if s.normalize_whitespace:
        text = _LINE_BREAK_RE.sub("\n", text)
        text = _SPACES_RE.sub(" ", text)
    controls = s.remove_control_chars and _CONTROL_RE.search(text) is not None
    if controls:
        text = _CONTROL_RE.sub("", text)
    if s.normalize_whitespace:
        if s.collapse_spaces:
            text = _INNER_SPACES_RE.sub(" ", text)
        out, blank = [], 0
        for line in text.split("\n"):
            line = line.rstrip(" \t")
            blank = 0 if line else blank + 1
            if blank <= s.max_blank_lines:
                out.append(line)
        text = "\n".join(out).strip("\n")
        text = text.strip() if "\n" not in text else text
    return text, controls


@pytest.mark.parametrize("settings", [
    NormalizeSettings(unicode_form=None, fix_mojibake=False),
    NormalizeSettings(unicode_form=None, fix_mojibake=False, collapse_spaces=True, max_blank_lines=0),
    NormalizeSettings(unicode_form=None, fix_mojibake=False, remove_control_chars=False, max_blank_lines=5),
    NormalizeSettings(unicode_form=None, fix_mojibake=False, normalize_whitespace=False),
])
def test_whitespace_shortcuts_equal_the_line_by_line_passes(settings):
    import random

    rng = random.Random(5)
    alphabet = [*"ab \t\n\r\x0b\x0c\x85\u2028\u2029\xa0\u3000\u2003\x1c\x1f\x00\x7f\ufeff\u200b\xadé",
                "\r\n", "\n\n\n\n", " \n", "\t\n", "    ", "ab cd"]
    for _ in range(4000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
        counters: Counter[str] = Counter()
        expected, controls = _whitespace_line_by_line(text, settings)
        assert normalize_text(text, settings, counters) == expected, repr(text)
        assert counters["control_chars_removed"] == int(controls), repr(text)


# -- HTML ------------------------------------------------------------------------------------------------

PAGE = """<!doctype html><html><head><title>City news</title>
<script>var tracking = 1;</script><style>p { color: red }</style></head>
<body>
<header><div class="logo">CityNews</div>
  <nav><ul><li><a href="/">Home</a></li><li><a href="/sport">Sport</a></li>
  <li><a href="/weather">Weather</a></li></ul></nav>
</header>
<aside class="sidebar"><h3>Trending now</h3><ul><li><a href="/a">Ten tricks doctors hate</a></li>
  <li><a href="/b">Celebrity gossip roundup</a></li></ul></aside>
<main><article>
<h1>Library budget rises</h1>
<p>The committee met on Tuesday to discuss the new budget for the regional library network
and its branches.</p>
<p>Members agreed that funding for rural branches should increase by twelve percent next year,
citing demand.</p>
<p>The chair said the vote was unanimous and that the plan would be published in full next month
for comment.</p>
</article></main>
<footer><p>Copyright 2024 CityNews. All rights reserved.</p><a href="/privacy">Privacy policy</a></footer>
</body></html>"""


def test_html_main_text_without_boilerplate():
    r = HtmlExtract()(batch([PAGE], modalities=["html"]))
    (text,) = r.kept.column("text").to_pylist()
    assert text.startswith("Library budget rises")
    assert "funding for rural branches" in text and "published in full next month" in text
    for boilerplate in [
        "Home",
        "Sport",
        "Trending now",
        "Ten tricks",
        "Copyright",
        "Privacy policy",
        "tracking",
        "color",
    ]:
        assert boilerplate not in text, boilerplate
    assert "\n\n" in text  # paragraphs stay paragraphs
    assert r.stats.counters["extracted"] == 1


def test_html_without_main_content_mode_keeps_navigation():
    r = HtmlExtract(HtmlSettings(main_content=False))(batch([PAGE], modalities=["html"]))
    assert "Trending now" in r.kept.column("text").to_pylist()[0]


def test_only_html_documents_are_extracted():
    r = HtmlExtract()(batch(["<b>literal markup in a text document</b>", PAGE], modalities=["text", "html"]))
    texts = r.kept.column("text").to_pylist()
    assert texts[0] == "<b>literal markup in a text document</b>" and r.stats.skipped == 1
    assert texts[1].startswith("Library budget rises")


def test_html_bad_pages_are_reported_not_crashed():
    deep = "<div>" * 20_000 + "deep text"  # Resiliparse's main-content pass would take ~13 s on it
    nav_only = "<html><body><nav><a href='/'>Home</a></nav></body></html>"
    start = time.process_time()
    r = HtmlExtract()(
        batch([deep, nav_only, "", "\x00\xff<<<>>>", "no tags at all here"], modalities=["html"] * 5)
    )
    assert time.process_time() - start < 2.0
    rules = {row["id"]: (row["rule"], row["value"]) for row in r.exclusions.to_pylist()}
    assert rules["d0"] == ("html.too_deep", "> 256")
    assert rules["d1"][0] == rules["d2"][0] == "html.no_text"
    assert r.kept.column("text").to_pylist()[-1] == "no tags at all here"


def test_html_depth_limit_is_configurable():
    page = "<html><body>" + "<div>" * 20 + "nested words" + "</div>" * 20 + "</body></html>"
    assert HtmlExtract(HtmlSettings(max_depth=30))(batch([page], ["html"])).kept.num_rows == 1
    assert HtmlExtract(HtmlSettings(max_depth=10))(batch([page], ["html"])).exclusions.num_rows == 1
