"""A word-list filter for toxic / NSFW terms (C4's "bad words" rule, with a list of your choosing).

Matching is on whole words, case-folded: the text's words are looked up in a set, and phrases as
n-grams of words, so the cost is linear in the text and independent of the list's size (a regex
alternation of 400 terms would be neither). Terms written in scripts without spaces between words
(Chinese, Japanese, Thai) cannot be matched as words; they are searched as substrings, as C4 did for
those languages.
"""

from __future__ import annotations

import importlib.resources
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import regex

from platform_assets.cleaning.blocklist_screen import may_hold
from platform_assets.cleaning.settings import BlocklistSettings
from platform_assets.cleaning.steps import Doc, DocumentStep, Drop

DEFAULT_BLOCKLIST = "blocklist_en.txt"
_WORD_RE = regex.compile(r"\w+")
# Above this many listed words, substring tests per word cost more than splitting the text into words
_MAX_SUBSTRING_TESTS = 64
# Han, Hiragana, Katakana, Thai, Lao, Khmer, Myanmar: written without spaces between words
_UNSPACED_SCRIPT_RE = regex.compile(r"[\p{Han}\p{Hiragana}\p{Katakana}\p{Thai}\p{Lao}\p{Khmer}\p{Myanmar}]")


def read_terms(path: str | Path | None = None, default: str = DEFAULT_BLOCKLIST) -> list[str]:
    """Terms from a word list file (one per line, '#' comments), or the shipped list `default`
    (`cleaning/data/`: the NSFW blocklist, or the hate-speech list of the seed filters)."""
    if path is None:
        text = (
            importlib.resources.files("platform_assets.cleaning").joinpath("data").joinpath(default)
        ).read_text(encoding="utf-8")
    else:
        text = Path(path).read_text(encoding="utf-8")
    terms = []
    for line in text.splitlines():
        term = line.split("#", 1)[0].strip()
        if term:
            terms.append(term)
    return terms


class Blocklist:
    """`matches(text)` -> the listed terms found in `text` (each once, in order of appearance)."""

    def __init__(self, terms: Iterable[str]):
        self.phrases: dict[int, set[tuple[str, ...]]] = {}
        self.substrings: list[str] = []
        for term in terms:
            folded = term.casefold()
            if _UNSPACED_SCRIPT_RE.search(folded):
                self.substrings.append(folded)
                continue
            words = tuple(_WORD_RE.findall(folded))
            if words:
                self.phrases.setdefault(len(words), set()).add(words)
        self.max_len = max(self.phrases, default=0)
        self.single = self.phrases.get(1, set())
        self.single_words = {p[0] for p in self.single}
        # first words of multi-word phrases: n-grams are only built where a phrase can start
        self.phrase_starts = {p[0] for n, ps in self.phrases.items() if n > 1 for p in ps}
        self.first_words = tuple(self.single_words | self.phrase_starts)
        self._first_word_hashes: Any = None  # their hashes (blocklist_words), made on the first search
        # The substring test needs only the first words that hold no other one ("porno", "pornography"
        # hold "porn"): one of them is in a text iff one of first_words is (shipped list: 21 of 28).
        # Only short lists use it, and finding them is quadratic: for 50,000 terms it took ~160 s.
        self.screen_words: tuple[str, ...] = ()
        if len(self.first_words) <= _MAX_SUBSTRING_TESTS:
            self.screen_words = tuple(sorted(w for w in self.first_words
                                             if not any(o != w and o in w for o in self.first_words)))

    def __len__(self) -> int:
        return sum(map(len, self.phrases.values())) + len(self.substrings)

    def screen(self, texts: Sequence[str]) -> list[bool] | None:
        """Per text, for a batch: False where `matches` would find no listed word (its substring
        screen), in one pass for all of them (blocklist_screen); None where that does not apply."""
        if not self.phrases or len(self.first_words) > _MAX_SUBSTRING_TESTS:
            return None
        return may_hold(texts, self.screen_words)

    def matches(self, text: str, limit: int | None = None, may_hold_words: bool = True) -> list[str]:
        """Distinct terms found; stops after `limit` of them (enough to decide). `may_hold_words`
        False: `screen` found that the text holds no listed word (then only unspaced-script terms are
        searched)."""
        if not may_hold_words and not self.substrings:
            return []
        folded = text.casefold()
        found: dict[str, None] = {}
        # A word can only equal a listed word (or a phrase's first word) that is a substring of the
        # text: with a short list (the shipped one has 29 terms) a substring test per term settles most
        # texts at memchr speed, without splitting them into words.
        searched = self.phrases and may_hold_words and (
            len(self.first_words) > _MAX_SUBSTRING_TESTS or any(w in folded for w in self.screen_words))
        if searched and self._find_words(folded, found, limit):
            return list(found)
        for term in self.substrings:
            if term in folded:
                found.setdefault(term)
        return list(found)

    def _find_words(self, folded: str, found: dict[str, None], limit: int | None) -> bool:
        """Adds the listed words and phrases among `folded`'s words to `found`, in order of appearance;
        True where it stopped at `limit`. The words from one compiled pass that makes strings only of
        those that may be listed first words (blocklist_words), `regex.findall` beyond the BMP."""
        from platform_assets.cleaning import blocklist_words  # numba: where the step runs

        if self._first_word_hashes is None:
            self._first_word_hashes = blocklist_words.wanted_hashes(self.single_words | self.phrase_starts)
        words = blocklist_words.words_of(folded, self._first_word_hashes)
        if words is None:
            tokens = _WORD_RE.findall(folded)
            return self._scan(len(tokens), range(len(tokens)), tokens.__getitem__, found, limit)
        starts, ends = words.starts, words.ends
        return self._scan(len(starts), words.candidates, lambda i: folded[starts[i]:ends[i]], found, limit)

    def _scan(self, n_words: int, positions: Iterable[int], word: Callable[[int], str], found: dict[str, None],
              limit: int | None) -> bool:
        """The words at `positions` (in order; every word that may be a listed or phrase-first word):
        listed words, and phrases from each phrase-first word on, added to `found`; True at `limit`."""
        for i in positions:
            w = word(i)
            if (w,) in self.single:
                found.setdefault(w)
            if w not in self.phrase_starts:
                continue
            for n in range(2, min(self.max_len, n_words - i) + 1):
                gram = tuple(word(j) for j in range(i, i + n))
                if gram in self.phrases.get(n, ()):
                    found.setdefault(" ".join(gram))
            if limit is not None and len(found) >= limit:
                return True
        return False


class BlocklistFilter(DocumentStep):
    """Removes documents with more than `max_hits` distinct listed terms (rule blocklist.match)."""

    name = "blocklist"

    def __init__(
        self, settings: BlocklistSettings | None = None, terms: Iterable[str] | None = None, **kwargs
    ):
        settings = settings or BlocklistSettings()
        super().__init__(modalities=settings.modalities, languages=settings.languages, **kwargs)
        self.settings = settings
        self.blocklist = Blocklist(terms if terms is not None else read_terms(settings.path))

    def load(self) -> None:
        from platform_assets.cleaning import blocklist_words  # numba: where the step runs

        self.blocklist.screen([])  # the screen's character table (~25 ms, once per process)
        blocklist_words.load()  # the word pass's kernel

    def prepare(self, texts: list[str], modalities: list[str | None], langs: list[str | None]) -> list[Any] | None:
        return self.blocklist.screen(texts)

    def process(self, doc: Doc, counters: Counter[str]) -> Drop | None:
        found = self.blocklist.matches(doc.text, limit=self.settings.max_hits + 1,
                                       may_hold_words=doc.prepared is not False)
        if len(found) > self.settings.max_hits:
            return Drop("match", f"{len(found)} > {self.settings.max_hits}: {', '.join(found[:5])}")
        return None
