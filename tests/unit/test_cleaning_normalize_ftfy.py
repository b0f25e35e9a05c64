"""normalize_ftfy.fix_text copies the segments ftfy cannot change and hands the rest to ftfy's
fix_and_explain: it must give ftfy.fix_text's output on every text, under the normaliser's config and
with segments cut at a small max_decode_length, and fall back to ftfy.fix_text under a config whose
other fixers act on plain text."""

from __future__ import annotations

from collections import Counter

import ftfy
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from platform_assets.cleaning import normalize, normalize_ftfy
from platform_assets.cleaning.normalize import _FTFY_CONFIG, _is_bad

SMALL_SEGMENTS = _FTFY_CONFIG._replace(max_decode_length=24)

CASES = [
    "",
    "plain ascii\nand more\n",
    "no trailing newline",
    "caf\u00c3\u00a9 and na\u00c3\u00afve\nthe next line is fine: caf\u00e9\n",  # mojibake, then clean accents
    "it\u00e2\u20ac\u2122s mojibake\r\nwith CRLF\r\n\u00e2\u20ac\u0153quoted\u00e2\u20ac\x9d\n",
    "C1 control here: \x85 and \x96 dash\nplain line\n",
    "\x1b[31mred\x1b[0m terminal escapes in ASCII\n\x1b[1mbold\n",
    "a lone surrogate \ud800 in a line\nand \udfff at the end",
    "\u0420\u00b0\u0420\u00b1\u0420\u0406 cp1251 mojibake\n"
    "\u0440\u0443\u0441\u0441\u043a\u0438\u0439 \u0442\u0435\u043a\u0441\u0442\n",
    "\u4e2d\u6587\u6587\u672c\n\n\n\u00a0non-breaking\u00a0spaces\n",
    "lossy \u00c3\ufffd sequence\nand \u00c3 at a line's end\n",
    "x" * 60 + "\u00c3\u00a9" + "y" * 30 + "\n" + "\u00c3" + "\u00a9" * 3,  # mojibake astride a cut at 24
]


def test_the_normalisers_config_takes_the_fast_path():
    assert normalize_ftfy.skips_plain_segments(_FTFY_CONFIG)


@pytest.mark.parametrize("text", CASES)
@pytest.mark.parametrize("config", [_FTFY_CONFIG, SMALL_SEGMENTS], ids=["default-segments", "24-code-points"])
def test_same_output_as_ftfy_fix_text(text: str, config):
    assert normalize_ftfy.fix_text(text, config, _is_bad) == ftfy.fix_text(text, config)


def test_the_cases_exercise_both_paths():
    """Some segments are copied and some fixed: the mojibake cases change, the plain ones do not."""
    changed = [t for t in CASES if ftfy.fix_text(t, _FTFY_CONFIG) != t]
    assert len(changed) >= 5 and "plain ascii\nand more\n" not in changed


def test_plain_segments_are_not_handed_to_ftfy(monkeypatch: pytest.MonkeyPatch):
    text = "plain\ncaf\u00e9 clean\nit\u00e2\u20ac\u2122s bad\n\x1b[0mescape\n\x85 C1\n"
    expected = ftfy.fix_text(text, _FTFY_CONFIG)  # before the spy: fix_text calls fix_and_explain too
    calls: list[str] = []
    real = ftfy.fix_and_explain

    def spy(segment, config):
        calls.append(segment)
        return real(segment, config)

    monkeypatch.setattr(normalize_ftfy.ftfy, "fix_and_explain", spy)
    assert normalize_ftfy.fix_text(text, _FTFY_CONFIG, _is_bad) == expected
    assert calls == ["it\u00e2\u20ac\u2122s bad\n", "\x1b[0mescape\n", "\x85 C1\n"]


@pytest.mark.parametrize("field, value", [("uncurl_quotes", True), ("fix_line_breaks", True),
                                          ("unescape_html", "auto"), ("normalization", "NFC"),
                                          ("remove_control_chars", True)])
def test_other_fixers_fall_back_to_ftfy(field: str, value):
    config = _FTFY_CONFIG._replace(**{field: value})
    assert not normalize_ftfy.skips_plain_segments(config)
    text = "\u201ccurly\u201d &amp; \r\n e\u0301 \x07 caf\u00c3\u00a9\n"
    assert normalize_ftfy.fix_text(text, config, _is_bad) == ftfy.fix_text(text, config)


_PIECES = st.sampled_from(["a", "word ", "\n", "\r\n", "\u00e9", "\u00c3\u00a9", "\u00c3", "\u00a9",
                           "\u00e2\u20ac\u2122", "\u00e2\u20ac", "\x85", "\x96", "\x1b[31m", "\ud83d", "\u4e2d",
                           "\u0420\u00b0", "\ufffd", "\u00a0", "\t", "'"])


@settings(max_examples=300, deadline=None)
@given(st.lists(_PIECES, max_size=60))
def test_property_same_output_as_ftfy_fix_text(pieces: list[str]):
    text = "".join(pieces)
    for config in (_FTFY_CONFIG, SMALL_SEGMENTS):
        assert normalize_ftfy.fix_text(text, config, _is_bad) == ftfy.fix_text(text, config)


def test_the_normaliser_repairs_through_it():
    counters: Counter[str] = Counter()
    out = normalize.normalize_text("it\u00e2\u20ac\u2122s\nplain\n", normalize.NormalizeSettings(), counters)
    assert out == "it\u2019s\nplain"  # the trailing newline goes in the whitespace pass
    assert counters["mojibake_fixed"] == 1
