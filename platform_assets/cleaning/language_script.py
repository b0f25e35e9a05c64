"""The Unicode script of a text, and the scripts each reported language is written in.

py3langid scores byte n-grams; on text in a script it was never trained on it still answers, and
confidently: 20 words of Canadian syllabics (Cree, Inuktitut; no such label in its 140) come out
Amharic at 0.98, because Ethiopic is the other script of 3-byte UTF-8 letters it knows least. The
language step refuses a label when too few of the text's letters are in a script the language is
written in (`LanguageSettings.min_script_share`).

Scripts are counted over letters only (`\\p{L}`; marks, digits, punctuation carry no script) with the
`regex` package's Unicode Script property, and named by their ISO 15924 codes. Each letter weighs its
UTF-8 bytes, as the model reads them: a Han character (3 bytes) says as much about a text as a short
Latin word, and "PostgreSQL TCLshell 客户端" is 14% Han by letters but 33% by bytes. Han letters are
reported as `Hans` / `Hant` when simplified-only characters outnumber traditional-only ones or the
reverse, `Hani` when neither does (see :func:`han_variant`).
"""

from __future__ import annotations

import string
from collections import Counter
from functools import cache
from typing import Any

import numpy as np
import regex

from platform_assets.code_point_tables import UNICODE_END, every_code_point

# ISO 15924 code -> the Unicode Script property value `regex` knows it by
_SCRIPTS = {
    "Latn": "Latin", "Cyrl": "Cyrillic", "Grek": "Greek", "Arab": "Arabic", "Hebr": "Hebrew",
    "Armn": "Armenian", "Geor": "Georgian", "Ethi": "Ethiopic", "Deva": "Devanagari",
    "Beng": "Bengali", "Guru": "Gurmukhi", "Gujr": "Gujarati", "Orya": "Oriya", "Taml": "Tamil",
    "Telu": "Telugu", "Knda": "Kannada", "Mlym": "Malayalam", "Sinh": "Sinhala", "Thai": "Thai",
    "Laoo": "Lao", "Khmr": "Khmer", "Mymr": "Myanmar", "Tibt": "Tibetan", "Hani": "Han",
    "Hira": "Hiragana", "Kana": "Katakana", "Hang": "Hangul", "Bopo": "Bopomofo", "Cans":
    "Canadian_Aboriginal", "Mong": "Mongolian", "Thaa": "Thaana", "Syrc": "Syriac", "Cher":
    "Cherokee", "Tfng": "Tifinagh", "Adlm": "Adlam", "Nkoo": "Nko", "Java": "Javanese",
}
OTHER_SCRIPT = "Zzzz"  # ISO 15924 "unknown": a letter of a script not listed above
_SCRIPT_RE = regex.compile(
    "|".join(rf"(?P<{code}>[\p{{{name}}}&&\p{{L}}]+)" for code, name in _SCRIPTS.items())
    + rf"|(?P<{OTHER_SCRIPT}>\p{{L}}+?)",
    regex.V1,
)
_NOT_LETTERS_RE = regex.compile(r"\P{L}+")
_NON_LATIN_LETTER_RE = regex.compile(r"[\p{L}--\p{Latin}]", regex.V1)

_LATN, _CYRL, _ARAB = frozenset({"Latn"}), frozenset({"Cyrl"}), frozenset({"Arab"})
_HAN = frozenset({"Hani", "Hans", "Hant"})
# Scripts each reported language (language_tags.REPORTED_LANGUAGES) is written in today, from the
# Unicode CLDR's language-script data (supplementalData.xml <languageData>, primary and secondary
# scripts) for these languages. `zxx` (no linguistic content) has no script to check.
LANGUAGE_SCRIPTS: dict[str, frozenset[str]] = {
    **dict.fromkeys(
        "ace af an bcl br ca cs cy da de en eo es et eu ext fi fo fr fy ga gcf gcr gd gl gn guw ht hu "
        "id ig is it ki kab la lb lg lij ln lt lv mg ms mt nb nl nn nso oc om pcm pl pt qu ro rw se sk "
        "sl sn so sq st sv sw tl tr vec vi vo wa xh yo zu".split(), _LATN),
    **dict.fromkeys("ba be bg kk ky mk ru tg tt uk".split(), _CYRL),
    **dict.fromkeys("ar fa ps ur ug".split(), _ARAB),
    "az": frozenset({"Latn", "Cyrl", "Arab"}), "bs": frozenset({"Latn", "Cyrl"}),
    "crh": frozenset({"Latn", "Cyrl"}), "ff": frozenset({"Latn", "Adlm", "Arab"}),
    "ha": frozenset({"Latn", "Arab"}), "hr": _LATN, "jv": frozenset({"Latn", "Java"}),
    "ku": frozenset({"Latn", "Arab", "Cyrl"}), "mn": frozenset({"Cyrl", "Mong"}),
    "sr": frozenset({"Cyrl", "Latn"}), "tk": frozenset({"Latn", "Cyrl"}),
    "uz": frozenset({"Latn", "Cyrl", "Arab"}), "he": frozenset({"Hebr"}), "hbo": frozenset({"Hebr"}),
    "el": frozenset({"Grek"}), "grc": frozenset({"Grek"}), "hy": frozenset({"Armn"}),
    "ka": frozenset({"Geor"}), "am": frozenset({"Ethi"}),
    "hi": frozenset({"Deva"}), "mr": frozenset({"Deva"}), "ne": frozenset({"Deva"}),
    "sa": frozenset({"Deva"}), "gom": frozenset({"Deva", "Latn", "Knda"}),
    "bn": frozenset({"Beng"}), "as": frozenset({"Beng"}), "pa": frozenset({"Guru", "Arab"}),
    "gu": frozenset({"Gujr"}), "or": frozenset({"Orya"}), "ta": frozenset({"Taml"}),
    "te": frozenset({"Telu"}), "kn": frozenset({"Knda"}), "ml": frozenset({"Mlym"}),
    "si": frozenset({"Sinh"}), "th": frozenset({"Thai"}), "lo": frozenset({"Laoo"}),
    "km": frozenset({"Khmr"}), "my": frozenset({"Mymr"}), "dz": frozenset({"Tibt"}),
    "zh": _HAN | {"Bopo"}, "ja": _HAN | {"Hira", "Kana"}, "ko": frozenset({"Hang"}) | _HAN,
}


def script_counts(text: str) -> Counter[str]:
    """UTF-8 bytes of letters per ISO 15924 script; Han under `Hans`, `Hant` or `Hani` (the text's variant).

    Scripts appear in the order of their first letter (Han's variant last), as the regex runs over the
    letters find them: :func:`script_counts_by_regex`, which a compiled pass over the code points
    replaces (language_kernels.script_letter_bytes; 0.67 -> 0.02 CPU-s under cProfile on the
    cleaning_stage benchmark's 2,172 samples, 0.42 of it the ASCII isalpha loop).
    """
    counts: Counter[str] = Counter()
    if text.isascii():  # most documents: every ASCII letter is Latin, and one byte
        # bytes.translate deletes the letters at C speed (a per-character isalpha took ~0.4 CPU-s)
        letters = len(text) - len(text.encode("ascii").translate(None, _ASCII_LETTERS))
        if letters:
            counts["Latn"] = letters
        return counts
    kernel, script_of, han_form = _compiled_scripts()
    chars = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    letter_bytes, first, n_simplified, n_traditional = kernel(chars, script_of, han_form, len(_SCRIPT_CODES))
    present = np.flatnonzero(letter_bytes).tolist()
    han = 0
    for index in sorted(present, key=first.__getitem__):
        code = _SCRIPT_CODES[index]
        if code == "Hani":
            han = int(letter_bytes[index])
        else:
            counts[code] = int(letter_bytes[index])
    if han:
        variant = _han_variant(n_simplified, n_traditional)
        counts[variant] = han  # after the other scripts, as script_counts_by_regex
    return counts


def script_counts_by_regex(text: str) -> Counter[str]:
    """:func:`script_counts` with the `regex` Script property over the text's letters, run by run: the
    definition the compiled pass is tested against."""
    counts: Counter[str] = Counter()
    if text.isascii():
        letters = sum(c.isalpha() for c in text)
        if letters:
            counts["Latn"] = letters
        return counts
    letters_only = _NOT_LETTERS_RE.sub("", text)
    if not _NON_LATIN_LETTER_RE.search(letters_only):  # accented Latin text: one scan, not 38 branches
        if letters_only:
            counts["Latn"] = len(letters_only.encode("utf-8", "surrogatepass"))
        return counts
    for match in _SCRIPT_RE.finditer(letters_only):
        counts[match.lastgroup] += len(match.group().encode("utf-8", "surrogatepass"))
    # popped first: `counts[variant] += counts.pop("Hani")` read counts["Hani"] before the pop, so with
    # the variant `Hani` (neither form outnumbers the other, e.g. "文件") Han letters counted twice
    han = counts.pop("Hani", 0)
    if han:
        counts[han_variant(text)] += han
    return +counts


_SCRIPT_CODES = (*_SCRIPTS, OTHER_SCRIPT)  # script index (the kernel's) -> ISO 15924 code
_ASCII_LETTERS = string.ascii_letters.encode("ascii")


@cache
def _compiled_scripts() -> tuple[Any, np.ndarray, np.ndarray]:
    """(kernel, script index per code point, Han form per U+4E00..U+9FA5), once per process (~0.1 s:
    the table is _SCRIPT_RE's answer for every letter of U+0000..U+10FFFF, 158,172 of them, 1.1 MB)."""
    from platform_assets.cleaning import language_kernels as kernels

    kernels.load()
    letters = _NOT_LETTERS_RE.sub("", every_code_point())
    points = np.frombuffer(letters.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    index = {code: i for i, code in enumerate(_SCRIPT_CODES)}
    script_of = np.full(UNICODE_END, kernels.NOT_LETTER, dtype=np.uint8)
    for match in _SCRIPT_RE.finditer(letters):
        script_of[points[match.start():match.end()]] = index[match.lastgroup]
    han_form = np.zeros(kernels.HAN_END - kernels.HAN_FIRST, dtype=np.uint8)
    simplified, traditional = _han_forms()
    han_form[[ord(c) - kernels.HAN_FIRST for c in simplified]] = kernels.SIMPLIFIED
    han_form[[ord(c) - kernels.HAN_FIRST for c in traditional]] = kernels.TRADITIONAL
    return kernels.script_letter_bytes, script_of, han_form


def load() -> None:
    """The compiled script pass and its tables, once per process: the language step calls it before its first batch,
    so that its first non-ASCII document does not pay for it."""
    _compiled_scripts()


def dominant_script(counts: Counter[str]) -> str | None:
    """The script with the most letters (ties: the code first in alphabetical order); None: no letter."""
    return min(counts, key=lambda s: (-counts[s], s)) if counts else None


def script_share(language: str, counts: Counter[str]) -> float:
    """The share of the letter bytes written in a script of `language` (1.0 for a language without
    a table entry or a text without letters: nothing to refuse it on)."""
    total = sum(counts.values())
    scripts = LANGUAGE_SCRIPTS.get(language)
    if scripts is None or not total:
        return 1.0
    return sum(n for s, n in counts.items() if s in scripts) / total


@cache
def _han_forms() -> tuple[frozenset[str], frozenset[str]]:
    """(simplified-only, traditional-only) CJK Unified Ideographs: encodable in GB 2312 but not in
    Big5, and the reverse. GB 2312 is the mainland simplified set (6,763 hanzi), Big5 Taiwan's
    traditional set (13,060): of U+4E00..U+9FA5, 2,380 are only in the first and 8,678 only in the
    second. It reads every zh_CN paragraph of the man-page set but one (only shared characters) as
    Hans and every zh_TW one as Hant."""
    simplified, traditional = [], []
    for cp in range(0x4E00, 0x9FA6):
        char = chr(cp)
        in_gb, in_big5 = _encodes(char, "gb2312"), _encodes(char, "big5")
        if in_gb and not in_big5:
            simplified.append(char)
        elif in_big5 and not in_gb:
            traditional.append(char)
    return frozenset(simplified), frozenset(traditional)


def _encodes(char: str, codec: str) -> bool:
    try:
        char.encode(codec)
    except UnicodeEncodeError:
        return False
    return True


def han_variant(text: str) -> str:
    """`Hans` when the text's simplified-only characters outnumber its traditional-only ones, `Hant`
    for the reverse, `Hani` when they are even (most often: none of either, "文件" is both)."""
    simplified, traditional = _han_forms()
    return _han_variant(sum(c in simplified for c in text), sum(c in traditional for c in text))


def _han_variant(n_simplified: int, n_traditional: int) -> str:
    if n_simplified > n_traditional:
        return "Hans"
    if n_traditional > n_simplified:
        return "Hant"
    return "Hani"


_COMPOSITE = {"ja": "Jpan", "ko": "Kore"}  # ISO 15924's codes for Japanese and Korean mixed writing
COMPOSITE_SCRIPTS: dict[str, frozenset[str]] = {
    "Jpan": LANGUAGE_SCRIPTS["ja"], "Kore": LANGUAGE_SCRIPTS["ko"],
}
"""The scripts each composite script is made of (ISO 15924: Jpan = Han + Hiragana + Katakana, Kore =
Hangul + Han), Han as any of its variants: an allow-list entry naming one matches the composite."""


def reported_script(language: str, counts: Counter[str]) -> str | None:
    """The `lang_script` of a text labelled `language`: the most used of its language's scripts
    (`Jpan` / `Kore` for Japanese / Korean), else the text's dominant script; None without letters."""
    scripts = LANGUAGE_SCRIPTS.get(language)
    if language in _COMPOSITE and scripts is not None and any(s in scripts for s in counts):
        return _COMPOSITE[language]
    own = Counter({s: n for s, n in counts.items() if scripts is None or s in scripts})
    return dominant_script(own or counts)
