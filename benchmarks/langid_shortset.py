"""Build the short-text language ID development set from the NAME lines of translated man pages.

A man page's NAME line (`ls \\- Verzeichnisinhalte auflisten`, `.Nd` in mdoc pages) is a title of
1-15 words, written by the page's translator: the kind of text (captions, titles, single chat turns)
where language ID is weakest. The part after `\\-` is the sample; its label is the page's locale
directory (`/usr/share/man/de/man1/ls.1.gz` -> `de`).

Removed, as the paragraph set (../shared/data/langid/manpages_langid.jsonl) removes them: a line
identical to the English page's NAME line (an untranslated page), a line with no letter, a line
repeated within its locale (pages share NAME lines: `bunzip2` is `bzip2`'s), a Chinese/Japanese/
Russian/Ukrainian line without a single letter of its script (English left in place). Each locale
keeps at most `--per-locale` lines, chosen by a hash of the page path (the same set on every run);
locales with fewer than `--min-per-locale` lines are left out (too few to report an accuracy).

    .venv/bin/python -m benchmarks.langid_shortset /usr/share/man /tmp/langid_short.jsonl

writes one JSON object a line: `text`, `lang` (the locale), `file`, `words` (the language step's word
count: platform_assets.cleaning.language_bands.count_words).
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import re
import sys
import unicodedata
from collections import Counter, defaultdict
from pathlib import Path

# A locale's letters must include at least one of its script (else the translator left English)
_SCRIPT_OF_LOCALE = {
    "ja": r"[\u3040-\u30ff\u4e00-\u9fff]", "zh_CN": r"[\u4e00-\u9fff]", "zh_TW": r"[\u4e00-\u9fff]",
    "vi": r"[^\x00-\x7f]",  # Vietnamese marks tones on nearly every word: ASCII-only is English
    "ko": r"[\uac00-\ud7af]", "ru": r"[\u0400-\u04ff]", "uk": r"[\u0400-\u04ff]", "sr": r"[\u0400-\u04ff]",
}
# troff escapes that carry no text: fonts (\fB, \f(CW, \f[I]), zero-width (\&, \:, \/, \,), sizes
_TROFF_DROP = re.compile(r"\\f(?:\(..|\[[^\]]*\]|.)|\\s[+-]?\d+|\\[&:/,^|%]|\\c\s*$")
_TROFF_CHARS = {r"\-": "-", r"\(em": "—", r"\(en": "–", r"\(aq": "'", r"\(lq": "“", r"\(rq": "”",
                r"\(Fo": "«", r"\(Fc": "»", r"\e": "\\", r"\ ": " ", r"\~": " "}
_TROFF_ANY = re.compile(r"\\\(..|\\\[[^\]]*\]|\\\*(?:\(..|\[[^\]]*\]|.)")
# groff's accented letters (groff_char(7)): \('a, \(:o, \[,c] -> á, ö, ç; \(ss -> ß
_TROFF_ACCENTED = re.compile(r"\\(?:\(([':`^~,])([A-Za-z])|\[([':`^~,])([A-Za-z])\])")
_COMBINING = {"'": "\u0301", "`": "\u0300", "^": "\u0302", "~": "\u0303", ":": "\u0308", ",": "\u0327"}


def _accented(match: re.Match) -> str:
    accent, letter = (match[1], match[2]) if match[1] else (match[3], match[4])
    return unicodedata.normalize("NFC", letter + _COMBINING[accent])


def clean_troff(line: str) -> str:
    line = _TROFF_DROP.sub("", line)
    line = _TROFF_ACCENTED.sub(_accented, line).replace(r"\(ss", "ß").replace(r"\[ss]", "ß")
    for escape, char in _TROFF_CHARS.items():
        line = line.replace(escape, char)
    line = _TROFF_ANY.sub("", line)  # other named characters and strings: dropped
    return " ".join(line.split())


def name_description(source: str) -> str | None:
    """The text after the dash of the NAME section's line (man), or the `.Nd` line (mdoc)."""
    lines = source.splitlines()
    for line in lines:
        if line.startswith(".Nd "):
            return clean_troff(line[4:])
    for i, line in enumerate(lines):
        if not line.startswith((".SH", ".Sh")):
            continue
        # the first section is NAME whatever its translated heading (BEZEICHNUNG, 名前, НАЗВА)
        body = []
        for nxt in lines[i + 1:]:
            if nxt.startswith((".SH", ".Sh")):
                break
            if not nxt.startswith((".", "'")):
                body.append(nxt)
        text = " ".join(body)
        if r"\-" not in text:
            return None
        return clean_troff(text.split(r"\-", 1)[1])
    return None


def read_page(path: Path) -> str | None:
    try:
        raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
        return raw.decode("utf-8")
    except (OSError, EOFError, UnicodeDecodeError, gzip.BadGzipFile):
        return None  # counted as unreadable


def build(man_root: Path, per_locale: int, min_per_locale: int) -> tuple[list[dict], Counter[str]]:
    # imported here: the harness imports every module of this package to list the benchmarks, and
    # cleaning_stage's baseline side must import platform_assets from another tree afterwards
    from platform_assets.cleaning.language_bands import count_words

    stats: Counter[str] = Counter()
    by_locale: dict[str, list[tuple[str, dict]]] = defaultdict(list)
    english: dict[tuple[str, str], str | None] = {}
    for locale_dir in sorted(p for p in man_root.iterdir() if p.is_dir() and not p.name.startswith("man")):
        locale = locale_dir.name
        seen: set[str] = set()
        for page in sorted(locale_dir.glob("man*/*")):
            if not page.is_file() or page.is_symlink():
                continue
            source = read_page(page)
            text = name_description(source) if source is not None else None
            if not text or not re.search(r"[^\W\d_]", text):
                stats[f"{locale}.no_name_line"] += 1
                continue
            key = (page.parent.name, page.name)
            if key not in english:
                en_page = man_root / page.parent.name / page.name
                en_source = read_page(en_page) if en_page.is_file() else None
                english[key] = name_description(en_source) if en_source else None
            if english[key] is not None and english[key].casefold() == text.casefold():
                stats[f"{locale}.identical_to_english"] += 1
                continue
            script = _SCRIPT_OF_LOCALE.get(locale)
            if script and not re.search(script, text):
                stats[f"{locale}.wrong_script"] += 1
                continue
            if text in seen:
                stats[f"{locale}.duplicate"] += 1
                continue
            seen.add(text)
            rel = str(page.relative_to(man_root))
            order = hashlib.sha256(rel.encode()).hexdigest()
            by_locale[locale].append((order, {"text": text, "lang": locale, "file": rel,
                                              "words": count_words(text)}))
    rows = []
    for locale, items in sorted(by_locale.items()):
        if len(items) < min_per_locale:
            stats[f"{locale}.excluded_too_few"] = len(items)
            continue
        chosen = [row for _, row in sorted(items, key=lambda kv: kv[0])[:per_locale]]
        stats[f"{locale}.sampled"] = len(chosen)
        rows += sorted(chosen, key=lambda r: r["file"])
    return rows, stats


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("man_root", type=Path, help="e.g. /usr/share/man")
    parser.add_argument("out", type=Path, help="the JSONL file to write")
    parser.add_argument("--per-locale", type=int, default=300)
    parser.add_argument("--min-per-locale", type=int, default=20)
    args = parser.parse_args(argv)
    rows, stats = build(args.man_root, args.per_locale, args.min_per_locale)
    with open(args.out, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    args.out.with_suffix(".stats.json").write_text(json.dumps(dict(sorted(stats.items())), indent=1) + "\n")
    print(f"{len(rows)} lines, {len({r['lang'] for r in rows})} locales -> {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
