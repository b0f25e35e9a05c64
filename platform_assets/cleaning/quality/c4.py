"""C4 rules (Raffel et al. 2020, section 2.2; c4_utils.py; numbers in presets.C4): lines without terminal
punctuation, short lines, javascript and policy lines removed; lorem ipsum, curly brackets and too few
sentences drop the page."""

from __future__ import annotations

import re
from bisect import bisect_right
from collections import Counter
from itertools import compress
from operator import methodcaller
from typing import Literal

import numpy as np

from platform_assets.cleaning import presets
from platform_assets.cleaning.quality.base import ENGLISH, Count, Langs, Preset, RuleSet, ScopedSettings
from platform_assets.cleaning.quality.text_view import TextView
from platform_assets.cleaning.steps import Drop


class C4Settings(ScopedSettings):
    preset: Literal["c4"] = "c4"
    languages: Langs = ENGLISH
    remove_citations: bool = presets.C4["remove_citations"]
    filter_no_terminal_punct: bool = presets.C4["filter_no_terminal_punct"]
    min_num_sentences: Count | None = presets.C4["min_num_sentences"]
    min_words_per_line: Count | None = presets.C4["min_words_per_line"]
    max_word_length: Count | None = presets.C4["max_word_length"]
    filter_lorem_ipsum: bool = presets.C4["filter_lorem_ipsum"]
    filter_javascript: bool = presets.C4["filter_javascript"]
    filter_curly_bracket: bool = presets.C4["filter_curly_bracket"]
    filter_policy: bool = presets.C4["filter_policy"]


# A sentence boundary inside a line: terminal punctuation (a run, with closing quotes/brackets) then
# whitespace. The lookbehind starts a match only at the first character of a punctuation run.
# Written "first character, then the lookbehind" so that `re` scans for the character class at C
# speed instead of trying the lookbehind at every position (~4x; the same matches).
_SENTENCE_END_RE = re.compile(r"[.!?…](?<![.!?…][.!?…])[.!?…]*+[\"'’”)\]]*+\s")
# The same boundary, not followed by a newline: on lines joined with "\n", the boundaries inside them
_INNER_SENTENCE_END_RE = re.compile(r"[.!?…](?<![.!?…][.!?…])[.!?…]*+[\"'’”)\]]*+[^\S\n]")
_CITATION_RE = re.compile(r"\[\d*\]|\[edit\]|\[citation needed\]")


def count_sentences(line: str) -> int:
    """Sentences in one line: 1 + inner boundaries (nltk's punkt would also skip abbreviations)."""
    return 1 + len(_SENTENCE_END_RE.findall(line)) if line.strip() else 0


def group_by_shared_word(phrases: tuple[str, ...], min_len: int = 5) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """The phrases under a word of `min_len`+ characters that most of them contain ("cookie": 4 of
    C4's policy phrases), or alone: a phrase is a substring of a text only if its word is, so a text
    is searched for each group's word and for its phrases only where the word is there (5 searches
    instead of 8 for C4's phrases on most documents: 0.078 -> ~0.05 CPU-s over cleaning_stage's)."""
    words = {w for p in phrases for w in p.split() if len(w) >= min_len}
    groups: dict[str, list[str]] = {}
    for p in phrases:
        shared = [w for w in words if w in p]
        best = max(shared, key=lambda w: (sum(w in q for q in phrases), len(w), w), default=p)
        groups.setdefault(best, []).append(p)
    return tuple((ps[0], (ps[0],)) if len(ps) == 1 else (w, tuple(ps)) for w, ps in groups.items())


def holds_any(text: str, groups: tuple[tuple[str, tuple[str, ...]], ...]) -> bool:
    """Is one of the grouped phrases (group_by_shared_word) a substring of `text`?"""
    return any(word in text and (len(group) == 1 or any(p in text for p in group)) for word, group in groups)


class C4(RuleSet):
    """Raffel et al. 2020, 2.2 (see presets.C4). Removes lines, so it rewrites the text it keeps."""

    preset = "c4"
    s: C4Settings
    settings_type = C4Settings
    fast_lines = True
    """Take the word-count-only shortcut where it applies (False: the line loop; the tests compare)."""

    def __init__(self, settings: C4Settings | None = None):
        super().__init__(settings)
        s = self.s
        # "a word longer than max_word_length": a run of that many + 1 non-spaces that starts a word
        # (the lookbehind keeps the search linear: it is not retried inside a long run)
        self._long_word_re = (
            re.compile(rf"(?<!\S)\S{{{s.max_word_length + 1}}}") if s.max_word_length is not None else None
        )
        # len(line.split(None, k)) < min_words_per_line  <=>  the line has fewer words: no full split
        self._min_words_split = s.min_words_per_line - 1 if s.min_words_per_line else None
        self._phrases = (
            (("lorem ipsum",) if s.filter_lorem_ipsum else ())
            + (("javascript",) if s.filter_javascript else ())
            + (presets.C4_POLICY_SUBSTRINGS if s.filter_policy else ())
        )
        self._phrase_groups = group_by_shared_word(self._phrases)

    def check(self, view: TextView, counters: Counter[str]) -> Drop | str | None:
        s, text = self.s, view.text
        kept: list[str] = []
        removed: Counter[str] = Counter()
        end_punct = presets.C4_END_PUNCTUATION
        long_word, max_word = self._long_word_re, s.max_word_length
        min_words, split_at = s.min_words_per_line or 0, self._min_words_split
        cite = s.remove_citations and "[" in text
        # Lines only need lower-casing if the document holds one of the phrases at all (citations
        # removed first, as per line: a line's lower-cased text is a substring of the document's).
        phrases = bool(self._phrase_groups)
        if phrases:
            phrases = self._holds_phrase(_CITATION_RE.sub("", text) if cite else text, view)
        curly = s.filter_curly_bracket and "{" in text
        # The compiled pass finds the kept lines where only the word count removes lines: no phrase in
        # the document (most have none) and no terminal-punctuation filter. Citations and curly
        # brackets are then read off its lines (they are in most of the English documents: 1,376 of
        # cleaning_stage's 1,852, 25 of its 28 MB, which went through the line loop below before).
        shortcut = self.fast_lines and not (phrases or s.filter_no_terminal_punct)
        joined = sentences = None  # where the compiled pass gives them
        points = view.code_points if shortcut else None
        if points is not None:
            from platform_assets.cleaning.quality.line_stats import kept_lines  # numba: where rules run

            found = kept_lines(points, min_words, view.line_breaks)
            shortcut = long_word is None or found.longest <= max_word
            if shortcut:
                starts, ends = found.starts.tolist(), found.ends.tolist()
                if curly and (d := self._first_curly_line(text, starts, ends, cite)):
                    return d
                if found.lines > len(starts):
                    removed["too_few_words"] = found.lines - len(starts)
                joined = text if found.unchanged else "\n".join(
                    [text[a:b] for a, b in zip(starts, ends, strict=True)])
                sentences = found.sentences
                if cite and (cited := _CITATION_RE.sub("", joined)) != joined:
                    # per line as below: a citation never spans a newline; the sentences are counted
                    # again over the lines without them ("end.[1] Next" ends a sentence once removed)
                    joined, sentences = cited, None
        lines = [] if joined is not None else list(map(str.strip, view.lines))
        if joined is None and shortcut and not (cite or curly) and (
                long_word is None or max(map(len, lines), default=0) <= max_word):
            # text beyond the BMP: the same as C loops over the lines (map, compress)
            if split_at is not None:
                counts = map(len, map(methodcaller("split", None, split_at), lines))
                kept = list(compress(lines, map(min_words.__le__, counts)))
                if len(kept) < len(lines):
                    removed["too_few_words"] = len(lines) - len(kept)
                lines = []
            else:
                kept, lines = lines, []
        for line in lines:
            # no word can be longer than its line: the search only runs on very long lines
            if long_word is not None and len(line) > max_word and long_word.search(line):
                removed["too_long_word"] += 1
                continue
            n_words_ok = split_at is None or len(line.split(None, split_at)) >= min_words  # before citations
            if cite and "[" in line:
                line = _CITATION_RE.sub("", line)
            if s.filter_no_terminal_punct and (
                not line.endswith(end_punct) or line.endswith(presets.C4_ELLIPSIS)
            ):
                removed["no_terminal_punct"] += 1
                continue
            if not n_words_ok:
                removed["too_few_words"] += 1
                continue
            if phrases:
                low = line.lower()
                if s.filter_lorem_ipsum and "lorem ipsum" in low:
                    return Drop(f"{self.preset}.lorem_ipsum", line[:80])
                if s.filter_javascript and "javascript" in low:
                    removed["javascript"] += 1
                    continue
            if curly and "{" in line:
                return Drop(f"{self.preset}.curly_bracket", line[:80])
            if phrases and s.filter_policy and any(p in low for p in presets.C4_POLICY_SUBSTRINGS):
                removed["policy"] += 1
                continue
            kept.append(line)
        if joined is None:
            joined = "\n".join(kept)
        if s.min_num_sentences is not None:
            if sentences is None:
                # count_sentences summed over the kept lines, in one pass: each non-blank line is one
                # sentence plus its inner boundaries (a boundary never spans the joining newlines); the
                # kept lines are the joined text's (none holds a line break)
                lines_kept = kept if kept or joined is None else joined.split("\n")
                sentences = sum(map(bool, map(str.strip, lines_kept))) + len(_INNER_SENTENCE_END_RE.findall(joined))
            if d := self.drop_below("too_few_sentences", sentences, s.min_num_sentences):
                return d
        for reason, n in removed.items():
            counters[f"{self.preset}.lines_removed.{reason}"] += n
        new_text = joined.strip()
        return new_text if new_text != text else None

    def _holds_phrase(self, text: str, view: TextView) -> bool:
        """Does the lower-cased `text` (the view's, or it without citations) hold one of the phrases?
        One compiled pass over an ASCII text's bytes (phrase_screen), the view's where it is its text."""
        if text.isascii():
            from platform_assets.cleaning.quality import phrase_screen  # numba: where rules run

            table = phrase_screen.phrase_table(self._phrases)
            if table is not None:
                points = view.code_points if text is view.text else None
                data = points.chars if points is not None else np.frombuffer(text.encode("ascii"), dtype=np.uint8)
                return phrase_screen.holds_phrase(data, table)
        return holds_any(text.lower(), self._phrase_groups)

    def _first_curly_line(self, text: str, starts: list[int], ends: list[int], cite: bool) -> Drop | None:
        """The line loop's curly-bracket drop over the compiled pass's kept lines ([starts, ends), in
        order): the first kept line holding "{" (citations removed from it, as the loop does; a
        citation holds no "{"). Searches the text, from one kept line to the next, not line by line."""
        at = text.find("{")
        while at >= 0:
            i = bisect_right(starts, at) - 1
            if i >= 0 and at < ends[i]:
                line = text[starts[i]:ends[i]]
                if cite and "[" in line:
                    line = _CITATION_RE.sub("", line)
                return Drop(f"{self.preset}.curly_bracket", line[:80])
            if i + 1 == len(starts):
                return None
            at = text.find("{", starts[i + 1])  # the next kept line starts after `at`
        return None


PRESET = Preset("c4", C4)
