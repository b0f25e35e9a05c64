"""The seeds' filters (issue #17): character runs, non-ASCII / non-script letters, mean word length,
empty outputs of chat and instruction documents, and a hate-speech term list.

Not in the default recipe (which is FineWeb's): a recipe turns them on with ``- preset: seed_filters``,
and every check can be switched off alone by setting its field to null (`empty_output: false`).
Rules, in the order they run (the first that fails is the reported reason):

- `seed_filters.empty_output`: a conversation (`meta.messages`) with no assistant turn or one whose
  content is null or blank, or an instruction record whose `output_fields` (in `meta`) is null or
  blank. Ingest rejects such records when it builds the conversation; this catches the ones that
  reach cleaning another way (meta fields of a source not read as chat, rewrites emptying a turn).
- `seed_filters.repeated_char_run`: a run of more than `max_char_run` of one character
  (``sooooooooooooooooooo good!!!!!!!!!!!!``: 19 > 10). Whitespace and the characters of
  `char_run_ignore` (rules and underlines of plain-text and Markdown documents: ``=====``, ``-----``)
  are not counted.
- `seed_filters.non_ascii_ratio`: share of the letters that are not ASCII, for documents in
  `prose_languages` (English by default: an English text with 35% non-ASCII letters is mojibake,
  spam or another language mislabelled).
- `seed_filters.non_script_ratio`: share of the letters outside the Unicode `scripts` (off by
  default; the script-aware form for a multilingual recipe scoped with `languages:`).
- `seed_filters.mean_word_length_low` / `_high`: mean word length bounds, for `prose_languages`
  (scripts without spaces make one long "word" of a sentence).
- `seed_filters.hate_terms`: more than `max_hate_terms` distinct terms of the hate-speech list
  (`data/hate_terms_en.txt` unless `hate_terms_path` names another, plus the `hate_terms` listed in
  the config), matched like the NSFW blocklist (whole words, case-folded, phrases as word n-grams).

Character counts are vectorised: runs over the text's code points as a numpy array, ASCII letters
over its UTF-8 bytes; only non-ASCII letters go through a regex (as runs, not one match a letter).
"""

from __future__ import annotations

from collections import Counter
from typing import Annotated, Literal

import numpy as np
import orjson
import regex
from pydantic import Field

from platform_assets.cleaning.quality.base import ENGLISH, Count, Langs, Preset, Ratio, RuleSet, ScopedSettings
from platform_assets.cleaning.quality.text_view import TextView
from platform_assets.cleaning.steps import Drop
from platform_assets.contracts import MESSAGES_KEY

HATE_TERMS_FILE = "hate_terms_en.txt"
_NON_ASCII_LETTERS_RE = regex.compile(r"(?V1)[\p{L}--\p{ASCII}]+")
_A, _Z = ord("a"), ord("z")


class SeedFiltersSettings(ScopedSettings):
    """The seeds' filters; null (false for `empty_output`) switches one off."""

    preset: Literal["seed_filters"] = "seed_filters"
    empty_output: bool = True
    output_fields: tuple[str, ...] = ("output", "response", "completion", "answer")
    """Keys of `meta` that hold an instruction record's answer: present and null or blank removes it."""
    max_char_run: Annotated[int, Field(ge=1)] | None = 10
    char_run_ignore: str = "-=_*#~.`+<>|/\\"
    max_non_ascii_ratio: Ratio | None = 0.2
    """Of the letters. English prose with names and quotes in other languages stays under 2%."""
    max_non_script_ratio: Ratio | None = None
    scripts: tuple[str, ...] = ("Latin",)
    """Unicode script names (`regex`'s \\p{Script=...}) the letters are expected in."""
    min_mean_word_length: Annotated[float, Field(ge=0)] | None = 3.0
    max_mean_word_length: Annotated[float, Field(ge=0)] | None = 10.0
    prose_languages: Langs = ENGLISH
    """Documents whose `lang` is listed get the language-calibrated rules (non-ASCII share, mean word
    length); None: every document the preset applies to."""
    max_hate_terms: Count | None = 0
    hate_terms_path: str | None = None
    """A UTF-8 term list (one term or phrase a line, '#' comments); None: the shipped list."""
    hate_terms: tuple[str, ...] = ()
    """More terms, added to the list's."""


class SeedFilters(RuleSet):
    preset = "seed_filters"
    s: SeedFiltersSettings
    settings_type = SeedFiltersSettings

    def __init__(self, settings: SeedFiltersSettings | None = None):
        super().__init__(settings)
        s = self.s
        self.reads_meta = s.empty_output  # type: ignore[misc]  # per instance: off means no meta column
        self._ignore = frozenset(s.char_run_ignore)
        self._prose = frozenset(s.prose_languages) if s.prose_languages is not None else None
        self._output_keys = tuple(f'"{f}"' for f in s.output_fields)
        self._outside_scripts = (
            regex.compile(r"(?V1)[\p{L}--[" + "".join(f"\\p{{Script={x}}}" for x in s.scripts) + "]]+")
            if s.max_non_script_ratio is not None else None
        )
        # imported here: blocklist.py reads the settings module, which imports the quality presets
        from platform_assets.cleaning.blocklist import Blocklist, read_terms

        self.hate = (Blocklist([*read_terms(s.hate_terms_path, default=HATE_TERMS_FILE), *s.hate_terms])
                     if s.max_hate_terms is not None else None)

    def check(self, view: TextView, counters: Counter[str]) -> Drop | None:
        s, text = self.s, view.text
        doc = view.doc
        if s.empty_output and doc is not None and doc.meta and (d := self._empty_output(doc.meta)):
            return d
        if s.max_char_run is not None and (d := self._char_run(text, s.max_char_run)):
            return d
        prose = self._prose is None or (doc is not None and doc.lang in self._prose)
        if prose and s.max_non_ascii_ratio is not None and not text.isascii():
            letters, ascii_letters = _letter_counts(text)
            ratio = (letters - ascii_letters) / letters if letters else 0.0
            if d := self.drop_above("non_ascii_ratio", ratio, s.max_non_ascii_ratio):
                return d
        if self._outside_scripts is not None:
            ratio = self._non_script_ratio(text)
            if d := self.drop_above("non_script_ratio", ratio, s.max_non_script_ratio):
                return d
        if prose and (s.min_mean_word_length is not None or s.max_mean_word_length is not None):
            stats = view.word_stats
            if stats.count:
                mean = stats.chars / stats.count
                if d := self.drop_below("mean_word_length_low", mean, s.min_mean_word_length) or self.drop_above(
                    "mean_word_length_high", mean, s.max_mean_word_length
                ):
                    return d
        if self.hate is not None:
            found = self.hate.matches(text, limit=s.max_hate_terms + 1)  # type: ignore[operator]
            if len(found) > s.max_hate_terms:  # type: ignore[operator]
                return Drop(f"{self.preset}.hate_terms", f"{len(found)} > {s.max_hate_terms}: {', '.join(found[:5])}")
        return None

    def _empty_output(self, meta: str) -> Drop | None:
        has_messages = f'"{MESSAGES_KEY}"' in meta
        if not has_messages and not any(k in meta for k in self._output_keys):
            return None  # a substring test settles the documents that are neither chat nor instruction
        try:
            obj = orjson.loads(meta)
        except orjson.JSONDecodeError:
            return None  # tokenization validates conversations and excludes bad ones with their reason
        if not isinstance(obj, dict):
            return None
        rule = f"{self.preset}.empty_output"
        messages = obj.get(MESSAGES_KEY)
        if isinstance(messages, list):
            answers = [(i, m) for i, m in enumerate(messages) if isinstance(m, dict) and m.get("role") == "assistant"]
            if not answers:
                return Drop(rule, "no assistant message")
            for i, m in answers:
                if _blank(m.get("content")):
                    return Drop(rule, f"messages[{i}].content is {_what(m.get('content'))}")
        for key in self.s.output_fields:
            if key in obj and _blank(obj[key]):
                return Drop(rule, f"{key} is {_what(obj[key])}")
        return None

    def _char_run(self, text: str, limit: int) -> Drop | None:
        if len(text) <= limit:
            return None
        points = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
        starts = np.flatnonzero(np.concatenate(([True], points[1:] != points[:-1])))
        lengths = np.diff(np.append(starts, points.size))
        long_runs = np.flatnonzero(lengths > limit)
        if not long_runs.size:
            return None
        best, char = 0, ""
        for k in long_runs.tolist():  # the few runs over the limit
            c = chr(int(points[starts[k]]))
            if not c.isspace() and c not in self._ignore and int(lengths[k]) > best:
                best, char = int(lengths[k]), c
        if not best:
            return None
        return Drop(f"{self.preset}.repeated_char_run", f"{best} > {limit}: {char!r}")

    def _non_script_ratio(self, text: str) -> float:
        letters, ascii_letters = _letter_counts(text)
        if not letters:
            return 0.0
        outside = sum(map(len, self._outside_scripts.findall(text))) if not text.isascii() else 0  # type: ignore[union-attr]
        if "Latin" not in self.s.scripts:
            outside += ascii_letters  # ASCII letters are Latin: outside unless Latin is expected
        return outside / letters


def _letter_counts(text: str) -> tuple[int, int]:
    """(letters, ASCII letters): ASCII letters over the UTF-8 bytes in numpy, the others as regex runs."""
    raw = np.frombuffer(text.encode("utf-8"), dtype=np.uint8)
    ascii_letters = int(np.count_nonzero(((raw | 0x20) - _A).astype(np.uint8) <= _Z - _A))
    other = 0 if text.isascii() else sum(map(len, _NON_ASCII_LETTERS_RE.findall(text)))
    return ascii_letters + other, ascii_letters


def _blank(value: object) -> bool:
    return value is None or (isinstance(value, str) and not value.strip()) or (
        isinstance(value, list | dict) and not value)


def _what(value: object) -> str:
    return "null" if value is None else "empty"


PRESET = Preset("seed_filters", SeedFilters)

__all__ = ["HATE_TERMS_FILE", "PRESET", "SeedFilters", "SeedFiltersSettings"]
