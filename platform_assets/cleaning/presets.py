"""The published quality rule sets and their thresholds, with where each number comes from.

These tables are the single source of the defaults in :mod:`platform_assets.cleaning.settings`; the
tests pin them to the papers. Thresholds are the papers' and, where the papers are vague, datatrove's
defaults (datatrove 0.10.1, ``datatrove/pipeline/filters/*``), which is what FineWeb ran.

- Gopher (Rae et al. 2021, "Scaling Language Models: Methods, Analysis & Insights from Training
  Gopher", appendix A.1.1 quality filter, table A1 repetition filter); MassiveWeb.
- C4 (Raffel et al. 2020, "Exploring the Limits of Transfer Learning...", section 2.2, and the
  reference code tensorflow_datasets/text/c4_utils.py).
- FineWeb (Penedo et al. 2024, "The FineWeb Datasets", section 3.4 "additional heuristic filters":
  three filters chosen for removing < 10% of tokens each, on top of Gopher and C4).

One deliberate difference from datatrove: datatrove splits words with nltk/spaCy tokenizers (models to
download); we split with one linear regex that also separates punctuation from words
(:func:`platform_assets.cleaning.quality.text_view.split_words`), so word counts and ratios match
datatrove's closely on space-delimited languages but not exactly. For scripts written without spaces
(Chinese, Japanese, Thai) word-based rules are meaningless, which is why these English-calibrated sets
apply to `languages: [en]` by default.
"""

from __future__ import annotations

from typing import Any

# -- Gopher quality filter (Rae et al. 2021, A.1.1) ----------------------------------------------------
# "...any document that does not contain between 50 and 100,000 words, or whose mean word length is
# outside the range of 3 to 10 characters; any document with a symbol-to-word ratio greater than 0.1
# for either the hash symbol or the ellipsis; any document with more than 90% of lines starting with a
# bullet point, or more than 30% ending with an ellipsis. We also require that 80% of words in a
# document contain at least one alphabetic character, and apply a 'stop word' filter, to remove
# documents that do not contain at least two of the following English words: the, be, to, of, and,
# that, have, with."
GOPHER_STOP_WORDS: tuple[str, ...] = ("the", "be", "to", "of", "and", "that", "have", "with")
GOPHER_QUALITY: dict[str, Any] = {
    "min_doc_words": 50,
    "max_doc_words": 100_000,
    "min_avg_word_length": 3,
    "max_avg_word_length": 10,
    "max_symbol_word_ratio": 0.1,
    "max_bullet_lines_ratio": 0.9,
    "max_ellipsis_lines_ratio": 0.3,
    "min_alpha_words_ratio": 0.8,
    "min_stop_words": 2,
}
GOPHER_BULLETS: tuple[str, ...] = ("•", "-")  # datatrove's reading of "a bullet point"

# -- Gopher repetition filter (Rae et al. 2021, table A1) ----------------------------------------------
GOPHER_REPETITION: dict[str, Any] = {
    "dup_line_frac": 0.30,  # duplicate line fraction
    "dup_para_frac": 0.30,  # duplicate paragraph fraction
    "dup_line_char_frac": 0.20,  # duplicate line character fraction
    "dup_para_char_frac": 0.20,  # duplicate paragraph character fraction
    "top_n_grams": {2: 0.20, 3: 0.18, 4: 0.16},  # top n-gram character fraction
    "dup_n_grams": {5: 0.15, 6: 0.14, 7: 0.13, 8: 0.12, 9: 0.11, 10: 0.10},  # duplicate n-gram char fraction
}

# -- C4 (Raffel et al. 2020, section 2.2; c4_utils.py) ------------------------------------------------
# Lines: keep only lines ending in terminal punctuation, with at least 3 words, no word over 1000
# characters, not mentioning "javascript", no cookie/terms-of-use boilerplate; pages: drop those with
# fewer than 5 sentences, "lorem ipsum", or a curly bracket. (The bad-words list is the blocklist step.)
C4: dict[str, Any] = {
    "remove_citations": True,
    "filter_no_terminal_punct": True,
    "min_num_sentences": 5,
    "min_words_per_line": 3,
    "max_word_length": 1000,
    "filter_lorem_ipsum": True,
    "filter_javascript": True,
    "filter_curly_bracket": True,
    "filter_policy": True,
}
C4_END_PUNCTUATION: tuple[str, ...] = (".", "?", "!", '"', "'")
C4_ELLIPSIS = "..."
C4_POLICY_SUBSTRINGS: tuple[str, ...] = (
    "terms of use",
    "privacy policy",
    "cookie policy",
    "uses cookies",
    "use of cookies",
    "use cookies",
)

# -- FineWeb's own filters (Penedo et al. 2024, 3.4; datatrove FineWebQualityFilter) -----------------
# Remove documents where fewer than 12% of lines end in punctuation, where more than 67% of lines are
# 30 characters or shorter, where duplicated lines hold more than 1% of the characters, or where there
# are more than 0.3 newlines per word (lists).
FINEWEB: dict[str, Any] = {
    "line_punct_thr": 0.12,
    "line_punct_exclude_zero": False,
    "short_line_thr": 0.67,
    "short_line_length": 30,
    "char_duplicates_ratio": 0.01,
    "new_line_ratio": 0.3,
}
# FineWeb ran, on English documents with a fastText language score >= 0.65: Gopher repetition, Gopher
# quality, C4 with the terminal-punctuation line filter turned off (it removed too much), then these.
FINEWEB_LANGUAGE_THRESHOLD = 0.65
FINEWEB_RECIPE: tuple[dict[str, Any], ...] = (
    {"preset": "gopher_repetition"},
    {"preset": "gopher_quality"},
    {"preset": "c4", "filter_no_terminal_punct": False},
    {"preset": "fineweb"},
)

# Unicode sentence-terminal punctuation (datatrove.utils.text.TERMINAL_PUNCTUATION, 159 characters),
# used by FineWeb's line-punctuation rule so that lines ending in "。" or "।" count as punctuated.
TERMINAL_PUNCTUATION: frozenset[str] = frozenset(
    "!.?\u0589\u061d\u061e\u061f\u06d4\u0700\u0701\u0702\u07f9\u0837\u0839\u083d\u083e\u0964"
    "\u0965\u104a\u104b\u1362\u1367\u1368\u166e\u1735\u1736\u17d4\u17d5\u17d6\u17d9\u17da\u1803"
    "\u1809\u1944\u1945\u1aa8\u1aa9\u1aaa\u1aab\u1b5a\u1b5b\u1b5e\u1b5f\u1b7d\u1b7e\u1c3b\u1c3c"
    "\u1c7e\u1c7f\u203c\u203d\u2047\u2048\u2049\u2e2e\u2e3c\u2e53\u2e54\u3002\ua4ff\ua60e\ua60f"
    "\ua6f3\ua6f7\ua876\ua877\ua8ce\ua8cf\ua92f\ua9c8\ua9c9\uaa5d\uaa5e\uaa5f\uaaf0\uaaf1\uabeb"
    "\ufe52\ufe56\ufe57\uff01\uff0e\uff1f\uff61\U00010a56\U00010a57\U00010f55\U00010f56"
    "\U00010f57\U00010f58\U00010f59\U00010f86\U00010f87\U00010f88\U00010f89\U00011047\U00011048"
    "\U000110be\U000110bf\U000110c0\U000110c1\U00011141\U00011142\U00011143\U000111c5\U000111c6"
    "\U000111cd\U000111de\U000111df\U00011238\U00011239\U0001123b\U0001123c\U000112a9\U0001144b"
    "\U0001144c\U000115c2\U000115c3\U000115c9\U000115ca\U000115cb\U000115cc\U000115cd\U000115ce"
    "\U000115cf\U000115d0\U000115d1\U000115d2\U000115d3\U000115d4\U000115d5\U000115d6\U000115d7"
    "\U00011641\U00011642\U0001173c\U0001173d\U0001173e\U00011944\U00011946\U00011a42\U00011a43"
    "\U00011a9b\U00011a9c\U00011c41\U00011c42\U00011ef7\U00011ef8\U00011f43\U00011f44\U00016a6e"
    "\U00016a6f\U00016af5\U00016b37\U00016b38\U00016b44\U00016e98\U0001bc9f\U0001da88"
)
assert len(TERMINAL_PUNCTUATION) == 159

# -- Rule sets of our own (no paper: numbers sized on the real corpus, see each setting) --------------
SYMBOL_RATIO: dict[str, Any] = {"symbols": ("#", "...", "…"), "max_symbol_word_ratio": 0.1}
# Sized on 6,000 documents sampled from the real text corpus (kernel docs, Debian handbook, PostgreSQL
# and Python docs, dictionary, fortunes): each removes under 1% of it, so what they remove is junk
# there rather than a kind of document.
LENGTH: dict[str, Any] = {
    "min_chars": 50,  # 0.13% of the sample is shorter (p1 is 186 characters)
    "max_chars": None,  # the guard's byte limit bounds size; Gopher's 100,000 words bounds prose
    "min_words": 10,  # 0.6% of the sample has fewer (p1 is 15 words)
    "max_words": None,
    "min_lines": None,
    "max_lines": None,
}
CODE_RATIO: dict[str, Any] = {
    # more than half of the non-blank lines look like code: 2.6% of the sample (kernel docs that are
    # mostly listings); meant for prose sources, not for a code source
    "max_code_line_ratio": 0.5,
    "min_lines": 3,  # one or two lines say nothing about a ratio
}
CUSTOM: dict[str, Any] = {
    "max_uppercase_ratio": 0.5,  # of letters; 0.17% of the sample (register tables, SQL keyword lists)
    "min_letters_for_case": 50,  # "NASA" or a 3-word title is not shouting
    "max_digit_ratio": 0.5,  # of non-space characters; 0.02% (hex dumps)
    "max_url_word_ratio": 0.2,  # of whitespace-separated words; link farms; 0% of the sample
    "max_replacement_char_ratio": 0.01,  # U+FFFD left by a lossy decode; 0% of the sample
}
