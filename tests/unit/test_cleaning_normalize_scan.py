"""normalize_scan's one compiled pass against the regex searches it replaces in normalize.py (C1/ESC,
the mojibake bigram, space separators, control characters, line breaks), flag by flag, on adversarial
text: empty, one character, every flagged character alone and next to others, bigrams split across
the end, beyond the BMP, combining marks, lone surrogates; and the step's outputs and counters against
the regex-driven form on random mixtures of those characters."""

from __future__ import annotations

import random
from collections import Counter

import numpy as np
import pytest

from platform_assets.cleaning import normalize, normalize_scan
from platform_assets.cleaning.settings import NormalizeSettings


def _regex_flags(text: str) -> dict[int, bool]:
    return {
        normalize_scan.NEEDS_FTFY: normalize._NEEDS_FTFY_RE.search(text) is not None,
        normalize_scan.MOJIBAKE: normalize._MAYBE_MOJIBAKE_RE.search(text) is not None,
        normalize_scan.SPACE: normalize._SPACES_RE.search(text) is not None,
        normalize_scan.CONTROL: normalize._CONTROL_RE.search(text.replace("\x85", "")) is not None,
        normalize_scan.NEL: "\x85" in text,
        normalize_scan.LINE_BREAK: normalize._LINE_BREAK_RE.search(text) is not None,
    }


def _flagged_chars() -> list[str]:
    _, table = normalize._scanner()
    return [chr(cp) for cp in range(0x10000) if table[cp]]


def _check(text: str) -> None:
    scan, table = normalize._scanner()
    flags = scan(text, table)
    assert {flag: bool(flags & flag) for flag in _regex_flags(text)} == _regex_flags(text), repr(text[:60])
    chars = normalize_scan.np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype="uint32")
    assert normalize_scan.scan_flags(chars, table) == flags  # the Python form of the kernel agrees


ADVERSARIAL = [
    "", "a", "é", "\x1b", "\x85", "\x80", "\x9f", "\xa0", "Ã", "Ã©", "Ã\ufffd", "é Ã", "Ã ©", "Ã\n©", "â€™",
    "РїС", "√©", "\u2028", "\u2029", "\r\n", "\u3000", "\u200b", "\u200d", "\ufeff", "\ufffe", "\uffff",
    "\ufdd0", "\xad", "e\u0301", "\u0301", "\ud800", "\udfffÃ", "Ã\ud800©", "𝐀\xa0𝐁", "\U0001F600Ã",
    "Ã\U0001F600©", "ordinary text with é and no trouble", "Ã" * 5000, "\xa0" * 3000 + "x",
]


@pytest.mark.parametrize("text", ADVERSARIAL)
def test_scan_flags_equal_the_regex_searches(text):
    _check(text)


def test_scan_flags_on_every_flagged_character_and_random_mixtures():
    flagged = _flagged_chars()
    assert len(flagged) > 300  # the table knows the classes (C1, the codecs' letters, spaces, controls)
    for char in flagged:
        _check(char)
        _check("x" + char + "é")
    rng = random.Random(3)
    alphabet = [*flagged, "a", " ", "\n", "é", "中", "\U0001F600", "\u0301", "\ud800"]
    for _ in range(300):
        _check("".join(rng.choice(alphabet) for _ in range(rng.randint(1, 60))))


def _normalize_by_regex(text: str, s: NormalizeSettings, counters: Counter[str]) -> str:
    """normalize_text as it was before the scan: every decision a regex search."""
    if s.fix_mojibake and (not text.isascii() or "\x1b" in text):
        if normalize._NEEDS_FTFY_RE.search(text) or (normalize._MAYBE_MOJIBAKE_RE.search(text)
                                                      and normalize._is_bad(text)):
            fixed = normalize.ftfy.fix_text(text, normalize._FTFY_CONFIG)
            if fixed != text:
                counters["mojibake_fixed"] += 1
                text = fixed
    if s.unicode_form is not None and not text.isascii():
        if not normalize.unicodedata.is_normalized(s.unicode_form, text):
            counters[f"{s.unicode_form.lower()}_changed"] += 1
            text = normalize.unicodedata.normalize(s.unicode_form, text)
    if s.normalize_whitespace:
        text = normalize._LINE_BREAK_RE.sub("\n", text)
        text = normalize._SPACES_RE.sub(" ", text)
    if s.remove_control_chars and normalize._CONTROL_RE.search(text):
        counters["control_chars_removed"] += 1
        text = normalize._CONTROL_RE.sub("", text)
    return normalize._whitespace(text, s.model_copy(update={"remove_control_chars": False}), counters,
                                 normalize._scan(text))


@pytest.mark.parametrize("settings", [
    NormalizeSettings(),
    NormalizeSettings(normalize_whitespace=False),
    NormalizeSettings(fix_mojibake=False, unicode_form=None),
])
def test_normalize_text_equals_the_regex_decisions(settings):
    rng = random.Random(11)
    pieces = ["Ã©tÃ©", "cafÃ©", "â€™", "\x1b[31mred\x1b[0m", "\x85", "\x93quoted\x94", "a\xa0b", "\u2028",
              "\r\n", "e\u0301", "\u200b", "\ufeff", "\x00", "  ", "\n\n\n\n", "plain ", "中文", "\U0001F600",
              "\xad", "naïve", "\ufffd"]
    for _ in range(300):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(1, 12)))
        expected_counters: Counter[str] = Counter()
        expected = _normalize_by_regex(text, settings, expected_counters)
        counters: Counter[str] = Counter()
        assert normalize.normalize_text(text, settings, counters) == expected, repr(text)
        assert counters == expected_counters, repr(text)


def test_loading_the_step_loads_the_kernel_signature_it_uses():
    normalize.Normalize().load()  # what the pipeline calls before its first batch (building loads nothing)
    kernel = normalize_scan._kernel()
    signatures = len(kernel.signatures)
    assert signatures
    normalize.normalize_text("Ã© caf\xe9\xa0\x85 \U0001F600", NormalizeSettings())
    assert len(kernel.signatures) == signatures  # nothing compiled in the first document


def test_needs_line_strip_equals_the_substring_tests():
    # the compiled pass against the substring tests it replaced in normalize._whitespace
    rng = random.Random(13)
    pieces = [" ", "\t", "\n", "\n\n", "a", "é", "中", "\U0001F600", "\ud800", "\r", "\xa0", " \t", "\u3000"]
    texts = ["", " ", "\n", " \n", "\t\n", "a\n\n\n", "a\n\n\n\n", "\n" * 7, "\ud800\n \n"]
    texts += ["".join(rng.choice(pieces) for _ in range(rng.randint(0, 16))) for _ in range(5000)]
    outcomes = Counter()
    for text in texts:
        for max_blank_lines in (0, 1, 2, 5):
            expected = " \n" in text or "\t\n" in text or "\n" * (max_blank_lines + 2) in text
            assert normalize_scan.needs_line_strip(text, max_blank_lines) == expected, (repr(text), max_blank_lines)
            outcomes[expected] += 1
    assert min(outcomes.values()) > 2000
    data = np.frombuffer(b"ab \n", dtype=np.uint8)
    assert normalize_scan.line_strip_bytes(data, 4) is True  # the Python form, as compiled
    kernel = normalize_scan._line_kernel()
    signatures = len(kernel.signatures)
    normalize.Normalize()
    normalize.normalize_text("a \nb\n\n\n\n\nc", NormalizeSettings())
    assert signatures and len(kernel.signatures) == signatures  # loaded with the step, not compiled later
