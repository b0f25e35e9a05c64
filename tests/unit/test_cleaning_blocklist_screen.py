"""The blocklist's batch screen (blocklist_screen.py, one RE2 pass) against the substring screen it
replaces in Blocklist.matches: never a text the old screen would search left out, on mixed case,
accented and CJK text, the characters whose case folding holds ASCII (ß, ﬁ, K, ſ, İ), empty text; and
the step's decisions and values unchanged."""

from __future__ import annotations

import random
from collections import Counter

import pyarrow as pa

from platform_assets.cleaning.blocklist import Blocklist, BlocklistFilter, read_terms
from platform_assets.cleaning.blocklist_screen import casefold_to_ascii, may_hold
from platform_assets.cleaning.steps import Doc


def test_casefold_to_ascii_is_every_character_whose_folding_holds_ascii():
    expected = "".join(chr(c) for c in range(0x80, 0x110000)
                       if not 0xD800 <= c < 0xE000 and any(ch.isascii() for ch in chr(c).casefold()))
    assert casefold_to_ascii() == expected
    assert {"ß", "ﬁ", "\u212a", "ſ", "İ"} <= set(expected)


def _texts(rng: random.Random, words: list[str], count: int) -> list[str]:
    pieces = [*words, "PORN", "Hot", "sHoT", "ho", "t", " ", "\n", "é", "中文", "ж", "ß", "ﬁ", "\u212a", "ſ", "İ",
              "mi", "lf", "se", "x", "xxx", "ﬀ", "ﬆ", "ＨＯＴ", "h\u0307ot", "-", "'"]
    fixed = ["", "a", "hot", "HOT", "sex", "ſex", "hentaİ", "ﬁ" * 3 + "lowjob", "\u212aink milf", "ﬁsting",
             "onlyfanſ", "straße", "a" * 1000]
    return fixed + ["".join(rng.choice(pieces) for _ in range(rng.randint(0, 12))) for _ in range(count)]


def test_screen_never_drops_a_text_the_substring_screen_would_search():
    blocklist = Blocklist(read_terms())
    words = list(blocklist.screen_words)
    rng = random.Random(17)
    texts = _texts(rng, words, 6000)
    screened = blocklist.screen(texts)
    assert screened is not None and len(screened) == len(texts)
    old = [any(w in t.casefold() for w in blocklist.screen_words) for t in texts]
    assert all(new or not was for was, new in zip(old, screened, strict=True))
    assert sum(old) > 1000 and sum(not s for s in screened) > 500  # both answers are exercised
    for text, maybe in zip(texts, screened, strict=True):
        assert blocklist.matches(text, 3, may_hold_words=maybe) == blocklist.matches(text, 3), repr(text)


def test_screen_does_not_apply_to_non_ascii_words_or_long_lists():
    assert may_hold(["anything"], ("naïve",)) is None
    assert may_hold(["anything"], ()) is None
    assert Blocklist([f"word{i}" for i in range(100)]).screen(["word1"]) is None
    unspaced = Blocklist(["色情", "porn"])  # a term searched as a substring still is, screened or not
    assert unspaced.matches("色情 text", 3, may_hold_words=False) == ["色情"]


def test_step_with_the_screen_decides_as_without():
    step = BlocklistFilter()
    rng = random.Random(4)
    texts = _texts(rng, list(step.blocklist.screen_words), 800)
    prepared = step.prepare(texts, ["text"] * len(texts), ["en"] * len(texts))
    assert prepared is not None
    drops = 0
    for text, p in zip(texts, prepared, strict=True):
        with_screen = step.process(Doc("d", text, "text", "en", prepared=p), Counter())
        without = step.process(Doc("d", text, "text", "en"), Counter())
        assert with_screen == without, repr(text)
        drops += without is not None
    assert drops > 10
    batch = pa.RecordBatch.from_pydict({"id": [str(i) for i in range(len(texts))], "text": texts,
                                        "modality": ["text"] * len(texts)})
    result = step(batch)
    assert result.kept.num_rows + result.exclusions.num_rows == len(texts)
    assert result.exclusions.num_rows == drops
