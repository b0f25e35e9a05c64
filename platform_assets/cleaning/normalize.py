"""Text normalisation: mojibake repair (ftfy), Unicode normal form, control characters, whitespace.

Order matters: mojibake is repaired first (ftfy needs the C1 characters and odd bytes that the later
passes would delete), then the normal form, then control characters, then whitespace.

ftfy costs ~3 MB/s when run on everything (it works line by line in Python), and most text has no
mojibake. So ``fix_text`` runs only on texts that ftfy's own detector (`is_bad`, ~8 MB/s) flags or
that hold C1 controls / terminal escapes, and `is_bad` runs only on texts that contain a mojibake
bigram: a UTF-8 lead byte (0xC2-0xF4) followed by a continuation byte (0x80-0xBF), both read in one of
the single-byte codecs ftfy repairs (Latin-1, cp1252, cp1250, cp1251, ISO-8859-2, MacRoman, cp437),
e.g. "Ã©", "â€™", "РїС", "√©". One regex pass at C speed; ASCII text skips even that. On 3,000
real documents, the 3,200 man-page paragraphs and 1,200 synthetic mojibake paragraphs in those
codecs, it selects every text ``fix_text`` changes. Within a selected text, ftfy's fixer runs only
on the lines it can change (normalize_ftfy.py: the same output as ``fix_text``, 7x less CPU on the
corpus' mojibake documents).
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Callable
from functools import cache

import ftfy
import numpy as np
from ftfy.badness import BADNESS_RE, is_bad

from platform_assets.cleaning import normalize_badness, normalize_ftfy, normalize_scan
from platform_assets.cleaning.settings import NormalizeSettings
from platform_assets.cleaning.steps import Doc, DocumentStep, Drop

# datatrove's FTFYFormatter choices: fix encodings; do not impose a house style (ligatures, full-width
# CJK punctuation, curly quotes are real text that a model should see); no normal form (ours is next).
_FTFY_CONFIG = ftfy.TextFixerConfig(
    unescape_html=False,  # "&amp;" in a plain-text document about HTML is content
    remove_terminal_escapes=True,
    fix_encoding=True,
    restore_byte_a0=True,
    replace_lossy_sequences=True,
    decode_inconsistent_utf8=True,
    fix_c1_controls=True,
    fix_latin_ligatures=False,
    fix_character_width=False,
    uncurl_quotes=False,
    fix_line_breaks=False,
    fix_surrogates=True,
    remove_control_chars=False,  # ours below, with the same idea of what a control character is
    normalization=None,
    explain=False,
)
_NEEDS_FTFY_RE = re.compile(r"[\x80-\x9f\x1b]")  # C1 controls, ESC (terminal escape sequences)


def _mojibake_classes() -> tuple[str, str]:
    leads, conts = set(), set()
    for codec in ("latin-1", "cp1252", "cp1250", "cp1251", "iso-8859-2", "mac_roman", "cp437"):
        leads.update(bytes(range(0xC2, 0xF5)).decode(codec, errors="ignore"))
        conts.update(bytes(range(0x80, 0xC0)).decode(codec, errors="ignore"))
    conts.add("\ufffd")  # ftfy also repairs lossy sequences such as "Ã\ufffd"
    cls = lambda chars: "[" + "".join(re.escape(c) for c in sorted(chars)) + "]"  # noqa: E731
    # One class pair over all codecs: a superset of each codec's pairs, so no mojibake is missed; a
    # legitimate text that matches only costs an `is_bad` call.
    return cls(leads), cls(conts)


_MOJIBAKE_LEAD, _MOJIBAKE_CONT = _mojibake_classes()
_MAYBE_MOJIBAKE_RE = re.compile(_MOJIBAKE_LEAD + _MOJIBAKE_CONT)

# Deleted: C0 controls except tab/newline (CR/FF/VT are turned into newlines first when whitespace is
# normalised), DEL, C1 controls, BOM/zero-width no-break space, zero-width space, soft hyphen, word
# joiner, interlinear annotation marks, object replacement, noncharacters. Kept on purpose: ZWJ/ZWNJ
# (U+200C/D, needed by emoji sequences, Persian and Indic scripts) and bidi marks (RTL text).
_CONTROL_CODEPOINTS = (
    [c for c in range(0x00, 0x20) if c not in (0x09, 0x0A, 0x0B, 0x0C, 0x0D)]
    + list(range(0x7F, 0xA0))
    + [0xAD, 0x200B, 0x2060, 0xFEFF, 0xFFF9, 0xFFFA, 0xFFFB, 0xFFFC, 0xFFFE, 0xFFFF]
    + list(range(0xFDD0, 0xFDF0))
)
_CONTROL_RE = re.compile("[" + "".join(re.escape(chr(c)) for c in _CONTROL_CODEPOINTS) + "]")

# Line breaks to "\n", space separators to " " (NBSP, en/em spaces, thin spaces, ...). The ideographic
# space U+3000 is kept: in CJK text it is a full-width character with its own width, not a space.
_SPACES_RE = re.compile("[\u00a0\u1680\u2000-\u200a\u202f\u205f]")
_LINE_BREAK_RE = re.compile("\r\n|[\r\x0b\x0c\x85\u2028\u2029]")
_LINE_BREAK_CHARS_RE = re.compile("[\r\x0b\x0c\x85\u2028\u2029]")  # _LINE_BREAK_RE matches iff one is there
_INNER_SPACES_RE = re.compile(r"(?<![ \t])[ \t]{2,}")  # starts only at a run's first character: linear
# ASCII characters that are not deleted controls: bytes.translate(None, these) of an ASCII text is
# empty unless it holds a control character (~1 GB/s, where the regex search runs at ~100 MB/s)
_ASCII_NOT_CONTROL = bytes(c for c in range(128) if c not in _CONTROL_CODEPOINTS)


def _badness_alternatives() -> list | None:
    """BADNESS_RE's alternatives as `re`'s parser reads them (a list of (op, argument) per
    alternative), or None if an ftfy release makes it something other than one alternation."""
    import re._constants as c
    import re._parser as sre_parse

    try:
        (op, (_, branches)), = sre_parse.parse(BADNESS_RE.pattern, BADNESS_RE.flags)
    except (ValueError, TypeError):
        return None
    return branches if op is c.BRANCH else None


def _badness_radius() -> int | None:
    """How far around a non-ASCII character ftfy's BADNESS_RE can match, if every one of its
    alternatives is a bounded run of single characters with at least one that must be non-ASCII: then
    a match lies within (longest alternative - 1) characters of a non-ASCII run, and `is_bad` can
    search only there. None (search everything) if an ftfy release changes that shape."""
    import re._constants as c

    single = {c.LITERAL, c.NOT_LITERAL, c.IN, c.ANY, c.CATEGORY}
    branches = _badness_alternatives()
    if branches is None:
        return None
    longest = 0
    for branch in branches:
        length, anchored = 0, False
        for op, av in branch:
            if op in (c.MAX_REPEAT, c.MIN_REPEAT) and av[1] is not c.MAXREPEAT and len(av[2]) == 1 \
                    and av[2][0][0] in single:
                length += av[1]
                continue
            if op is c.AT and av in (c.AT_BEGINNING, c.AT_BEGINNING_STRING):
                continue  # "^": the string's own start, which search(text, pos) does not move
            if op not in single:
                return None
            length += 1
            if op is c.LITERAL:
                anchored |= av >= 0x80
            elif op is c.IN and all(kind in (c.LITERAL, c.RANGE) for kind, _ in av):  # not negated
                anchored |= min(x if kind is c.LITERAL else x[0] for kind, x in av) >= 0x80
        if not anchored:
            return None
        longest = max(longest, length)
    return longest - 1


# How common a character of a BADNESS_RE class is in clean text, roughly: ASCII and typographic
# characters (no-break space, quotes, dashes, ellipsis, guillemets) 1000, lower-case letters 30, other
# letters 10, anything else (symbols, box drawing, C1 controls) 1
_COMMON_IN_CLEAN_TEXT = frozenset(map(ord, "\u00a0‘’‚“”„–—…«»·"))
_LETTER_WEIGHT = {"Ll": 30, "Lu": 10, "Lt": 10, "Lm": 10, "Lo": 10}


def _badness_anchors() -> re.Pattern[str] | None:
    """Runs of the characters of which every BADNESS_RE match holds one: per alternative, the
    position (a literal, or a class of literals and ranges, once or repeated at least once) whose
    characters are rarest in clean text (the weights above; the alternative
    `[a-zA-Z] [α-ωа-џ...] [¦¤¨¬¯¸ƒˆˇ˘˛˜†‡‰⌐◊�ªº]` is found through its third class, not its Greek and
    Cyrillic letters). None if an alternative has no such position (then the non-ASCII runs)."""
    import re._constants as c

    def finite(op, av) -> set[int] | None:
        if op is c.LITERAL:
            return {av}
        if op is c.IN and all(kind in (c.LITERAL, c.RANGE) for kind, _ in av):  # not negated
            return {x for kind, v in av for x in ((v,) if kind is c.LITERAL else range(v[0], v[1] + 1))}
        if op in (c.MAX_REPEAT, c.MIN_REPEAT) and av[0] >= 1 and len(av[2]) == 1:
            return finite(*av[2][0])
        return None

    def weight(chars: set[int]) -> int:
        common = _COMMON_IN_CLEAN_TEXT
        return sum(1000 if x < 0x80 or x in common else _LETTER_WEIGHT.get(unicodedata.category(chr(x)), 1)
                   for x in chars)

    branches = _badness_alternatives()
    if branches is None:
        return None
    anchors: set[int] = set()
    for branch in branches:
        classes = [chars for op, av in branch if (chars := finite(op, av))]
        if not classes:
            return None
        anchors |= min(classes, key=weight)
    return re.compile("[" + "".join(re.escape(chr(x)) for x in sorted(anchors)) + "]+")


_BADNESS_RADIUS = _badness_radius()
# Where a match can be. On cleaning_stage's 93 candidate texts (62 in accented Latin, 15 Cyrillic):
# 0.080 CPU-s searching around every non-ASCII run, 0.044 around these characters' runs (ftfy's own
# is_bad: 0.33), the same answers
_BADNESS_ANCHOR_RE = _badness_anchors() or re.compile(r"[^\x00-\x7f]+")


def _is_bad(text: str) -> bool:
    """ftfy's `is_bad`: compiled (normalize_badness), else searching only around runs of the characters
    one of which every match holds (_badness_anchors; see _badness_radius): in accented Latin, Cyrillic
    or Greek text a few symbols, where the full search runs at ~4 MB/s (its alternatives are tried at
    every position)."""
    compiled = normalize_badness.is_bad(text)
    if compiled is not None:
        return compiled
    return _is_bad_windows(text)


def _is_bad_windows(text: str) -> bool:
    """_is_bad by BADNESS_RE's own search, in windows (text beyond the BMP, a BADNESS_RE of another shape)."""
    if _BADNESS_RADIUS is None:
        return is_bad(text)
    search, radius = BADNESS_RE.search, _BADNESS_RADIUS
    start = end = -1
    for m in _BADNESS_ANCHOR_RE.finditer(text):
        a, b = m.span()
        if a - radius <= end:  # overlaps the current window: extend it
            end = b + radius
            continue
        if end >= 0 and search(text, max(0, start), end):
            return True
        start, end = a - radius, b + radius
    return end >= 0 and search(text, max(0, start), end) is not None


def normalize_text(text: str, settings: NormalizeSettings, counters: Counter[str] | None = None) -> str:
    """One text through the configured normalisation passes."""
    counters = counters if counters is not None else Counter()
    flags = _scan(text)
    repaired = _repair(text, settings, counters, flags)
    if repaired is not text:  # ftfy or the normal form changed it (rare): its characters are new
        flags = _scan(repaired)
    return _whitespace(repaired, settings, counters, flags)


@cache
def _scanner() -> tuple[Callable[[str, np.ndarray], int], np.ndarray]:
    """normalize_scan.scan and its table, built from this module's regexes (~0.05 s, once per process;
    the step's load calls it)."""
    table = normalize_scan.char_flags(_NEEDS_FTFY_RE, re.compile(_MOJIBAKE_LEAD), re.compile(_MOJIBAKE_CONT),
                                      _SPACES_RE, _CONTROL_RE, _LINE_BREAK_CHARS_RE)
    normalize_scan.load(table)
    return normalize_scan.scan, table


def load() -> None:
    """The scan's table and compiled kernel, once per process (the step's load, before its first batch; an image
    build calls it to compile the kernel into numba's cache: ~0.1 CPU-s cold)."""
    _scanner()
    _space_separators()
    normalize_badness.load()  # ~0.2 s: BADNESS_RE's character sets over the BMP


def _scan(text: str) -> int | None:
    """normalize_scan's flags of a non-ASCII text (which regex passes can change it); None for ASCII,
    where substring tests and bytes.translate decide at memchr speed."""
    if text.isascii():
        return None
    scan, table = _scanner()
    return scan(text, table)


def _strip_lines(text: str, max_blank_lines: int) -> str:
    """rstrip(" \t") every line, keep at most `max_blank_lines` empty lines in a row: split/join is
    linear whatever the input."""
    out: list[str] = []
    blank = 0
    for line in text.split("\n"):
        line = line.rstrip(" \t")
        if line:
            blank = 0
        else:
            blank += 1
            if blank > max_blank_lines:
                continue
        out.append(line)
    return "\n".join(out)


def _repair(text: str, s: NormalizeSettings, counters: Counter[str], flags: int | None) -> str:
    """Mojibake and the Unicode normal form: per document (ftfy), and only for text that can need it.
    `flags`: _scan(text)."""
    if s.fix_mojibake and (flags is not None or "\x1b" in text):
        # an ASCII text gets here only with an ESC, which _NEEDS_FTFY_RE matches
        needs_ftfy = flags is None or flags & normalize_scan.NEEDS_FTFY
        if needs_ftfy or (flags & normalize_scan.MOJIBAKE and _is_bad(text)):
            fixed = normalize_ftfy.fix_text(text, _FTFY_CONFIG, _is_bad)
            if fixed != text:
                counters["mojibake_fixed"] += 1
                text = fixed
    if s.unicode_form is not None and not text.isascii():
        if not unicodedata.is_normalized(s.unicode_form, text):
            counters[f"{s.unicode_form.lower()}_changed"] += 1
            text = unicodedata.normalize(s.unicode_form, text)
    return text


def _whitespace(text: str, s: NormalizeSettings, counters: Counter[str], flags: int | None) -> str:
    """Line breaks, spaces, control characters, trailing spaces, blank-line runs.

    Substring tests (memchr speed) decide which passes can change anything: a regex search for a
    character class runs at ~100 MB/s in `re`, and splitting every document into lines took as long,
    when real text rarely has a CR, a control character, trailing spaces or a run of blank lines. A
    non-ASCII text's `flags` (_scan(text)) say the same for its non-ASCII classes in one pass.
    """
    ascii_text = flags is None
    if s.normalize_whitespace:
        if ("\r" in text or "\x0b" in text or "\x0c" in text) if ascii_text else flags & normalize_scan.LINE_BREAK:
            text = _LINE_BREAK_RE.sub("\n", text)
        if not ascii_text and flags & normalize_scan.SPACE:
            text = _replace_spaces(text)
    if s.remove_control_chars and _has_controls(text, flags, s.normalize_whitespace):
        counters["control_chars_removed"] += 1
        text = _CONTROL_RE.sub("", text)
    if s.normalize_whitespace:
        if s.collapse_spaces:
            text = _INNER_SPACES_RE.sub(" ", text)
        # Strip trailing spaces per line and cap blank-line runs. Without a space or tab before a
        # newline and without a run of more newlines than allowed, only the last line can change
        # (normalize_scan.needs_line_strip: one compiled pass, where substring searches took ~3x as long).
        if normalize_scan.needs_line_strip(text, s.max_blank_lines):
            text = _strip_lines(text, s.max_blank_lines)
        else:
            text = text.rstrip(" \t")
        # Leading blank lines and trailing whitespace go; the first line's indentation stays when
        # lines follow (it is code indentation), a lone line is stripped.
        text = text.strip("\n")
        if "\n" not in text:
            text = text.strip()
    return text


def _replace_spaces(text: str) -> str:
    """_SPACES_RE.sub(" ", text) as one str.replace per separator the text holds: a substring test
    per character of the class (15) runs at memchr speed where `re` tries the class at every position
    of a non-ASCII text (~100 MB/s): 0.020 -> 0.007 CPU-s over cleaning_stage's 332 texts with one."""
    for c in _space_separators():
        if c in text:
            text = text.replace(c, " ")
    return text


@cache
def _space_separators() -> tuple[str, ...]:
    """The characters _SPACES_RE matches (all in the BMP: the scan's table flags them)."""
    _, table = _scanner()
    return tuple(map(chr, np.flatnonzero(table & normalize_scan.SPACE).tolist()))


def _has_controls(text: str, flags: int | None, whitespace_normalized: bool) -> bool:
    """Whether _CONTROL_RE finds something in `text` (after the whitespace passes; `flags`: before them)."""
    if flags is None:
        return bool(text.encode("ascii").translate(None, _ASCII_NOT_CONTROL))
    # NEL is a control character too, but a "\n" by now when whitespace was normalised
    return bool(flags & normalize_scan.CONTROL or (flags & normalize_scan.NEL and not whitespace_normalized))


class Normalize(DocumentStep):
    """Rewrites text; removes a document only if nothing is left (rule normalize.empty)."""

    name = "normalize"

    def __init__(self, settings: NormalizeSettings | None = None, **kwargs):
        super().__init__(**kwargs)
        self.settings = settings or NormalizeSettings()

    def load(self) -> None:
        load()  # the scan's table and kernel

    rewrites_messages = True  # what trains on a chat document is its messages: same normalisation

    def rewrite_message(self, content: str) -> str:
        return normalize_text(content, self.settings)

    def process(self, doc: Doc, counters: Counter[str]) -> Drop | None:
        doc.text = normalize_text(doc.text, self.settings, counters)
        if not doc.text.strip():
            return Drop("empty")
        return None
