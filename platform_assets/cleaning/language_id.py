"""Language identification with py3langid (the model ships inside the wheel: 4.5 MB, 140 labels).

Chosen by measuring on /work/shared/data/langid/manpages_langid.jsonl (3,200 paragraphs of translated
man pages, 16 locales x 200, mean 200 characters), each candidate installed from PyPI, no download:

==========================  ========  =======  ==========  =====================================
library                      accuracy  time     model RSS   notes
==========================  ========  =======  ==========  =====================================
py3langid 0.4.0 + folding    99.44%    0.6 s    ~105 MB     chosen: fastest, small, numpy only
langid 1.1.6                 99.19%    3.0 s    ~140 MB     2016, pure Python scoring
lingua 2.1.1 (all 75 langs)  99.12%    4.5 s    ~1.3 GB     with every language model preloaded
py3langid 0.4.0, no folding  98.19%    0.4 s    ~105 MB     zh_TW read as Cantonese (yue) 16%
==========================  ========  =======  ==========  =====================================

("folding": individual languages that have no ISO 639-1 code are reported as their ISO 639
macrolanguage, summing their probabilities: yue/wuu -> zh, ary/arz -> ar, uzs -> uz, ltg -> lv,
sdh -> ku. Traditional-script Mandarin and Cantonese are hard to tell apart on 200 characters; both
are `zh` to anyone filtering by language.) The remaining errors are command synopses and lists of
man-page names, which are not in any language.
"""

from __future__ import annotations

import threading
from collections import Counter, defaultdict
from typing import ClassVar

import pyarrow as pa
import regex

from platform_assets.cleaning.settings import LanguageSettings
from platform_assets.cleaning.steps import Doc, DocumentStep, Drop, fmt

UNDETERMINED = "und"  # ISO 639-2 "undetermined": no letters to judge by

MACROLANGUAGES: dict[str, str] = {
    "yue": "zh",  # Cantonese
    "wuu": "zh",  # Wu
    "ary": "ar",  # Moroccan Arabic
    "arz": "ar",  # Egyptian Arabic
    "uzs": "uz",  # Southern Uzbek
    "ltg": "lv",  # Latgalian
    "sdh": "ku",  # Southern Kurdish
}

_LETTER_RE = regex.compile(r"\p{L}")

_MODEL_LOCK = threading.Lock()
_MODEL = None


def _load_model():
    """The py3langid identifier, loaded once per process (decompressing the model takes ~0.3 s)."""
    global _MODEL
    with _MODEL_LOCK:
        if _MODEL is None:
            from py3langid.langid import MODEL_FILE, LanguageIdentifier

            _MODEL = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
        return _MODEL


class LanguageIdentifier:
    """``predict(text) -> (lang, score)``: score is the probability of the label (0..1)."""

    def __init__(self, max_chars: int = 2048, fold_macrolanguages: bool = True):
        self.max_chars = max_chars
        self._model = _load_model()
        self._fold = MACROLANGUAGES if fold_macrolanguages else {}

    def predict(self, text: str) -> tuple[str, float]:
        sample = text[: self.max_chars]
        if not _LETTER_RE.search(sample):
            return UNDETERMINED, 0.0  # digits, symbols, emoji: the model would answer at random
        # rank(): every label with its normalised probability (they sum to 1); fold, then take the best
        folded: dict[str, float] = defaultdict(float)
        for label, prob in self._model.rank(sample):
            folded[self._fold.get(label, label)] += prob
        best = max(folded, key=folded.__getitem__)
        return best, float(folded[best])


class LanguageFilter(DocumentStep):
    """Adds `lang` and `lang_score`; removes documents below `min_score` or outside `allow`.

    Rules: ``low_confidence`` (value "de:0.41 < 0.5"), ``not_allowed`` (value "de:0.98").
    """

    name = "language"
    added_fields: ClassVar[tuple[pa.Field, ...]] = (
        pa.field("lang", pa.string(), nullable=True),
        # float32: a probability needs no more than 7 significant digits, and it halves the column
        pa.field("lang_score", pa.float32(), nullable=True),
    )

    def __init__(self, settings: LanguageSettings | None = None, **kwargs):
        settings = settings or LanguageSettings()
        super().__init__(modalities=settings.modalities, **kwargs)
        self.settings = settings
        self.allow = frozenset(settings.allow) if settings.allow is not None else None
        self.identifier = LanguageIdentifier(settings.max_chars, settings.fold_macrolanguages)

    def process(self, doc: Doc, counters: Counter[str]) -> Drop | None:
        lang, score = self.identifier.predict(doc.text)
        counters[f"lang.{lang}"] += 1
        confident = score >= self.settings.min_score
        if not confident and doc.modality not in self.settings.label_only_modalities:
            return Drop("low_confidence", f"{lang}:{fmt(score)} < {fmt(self.settings.min_score)}")
        if confident and self.allow is not None and lang not in self.allow:
            return Drop("not_allowed", f"{lang}:{fmt(score)}")
        doc.out["lang"] = lang
        doc.out["lang_score"] = score
        doc.lang = lang
        return None
