"""Configuration of the cleaning stage: the `cleaning:` key of the pipeline config.

Strict like the rest of the config (unknown keys are errors, models are frozen). Every threshold is a
field; `None` turns a single check off, ``enabled: false`` a whole step. Quality rule sets are a list
of presets, each a mapping whose `preset` key picks the rule set and whose other keys override its
published thresholds (the presets and their settings: `cleaning/quality/`, one module each)::

    cleaning:
      language: {allow: [en, de], min_score: 0.5}
      quality:
        - preset: gopher_repetition
        - preset: gopher_quality
          min_doc_words: 30
        - preset: c4
          filter_no_terminal_punct: false
        - preset: fineweb
      blocklist: {path: configs/blocklist.txt}
      pii: {types: [EMAIL, PHONE]}
      licenses: {allow: [CC-BY-4.0, MIT], on_missing_or_disallowed: fail}
      recipes:      # per source (`recipe: <name>`); built in: web (this block), code, docs, sft
        chat_seeds: {base: sft, overrides: {quality: [{preset: seed_filters}]}, gates: {max_removal_rate: 0.3}}
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, get_args

from pydantic import Field, model_validator

from platform_assets.cleaning.conversation_filter import ConversationSettings
from platform_assets.cleaning.quality import PRESET_SETTINGS, QualityPreset, fineweb_recipe, preset
from platform_assets.cleaning.quality.base import ENGLISH, TEXT_SCOPE, Count, Langs, Ratio
from platform_assets.cleaning.quality.c4 import C4Settings
from platform_assets.cleaning.quality.code_ratio import CodeRatioSettings
from platform_assets.cleaning.quality.custom import CustomSettings
from platform_assets.cleaning.quality.fineweb import FineWebSettings
from platform_assets.cleaning.quality.gopher_quality import GopherQualitySettings
from platform_assets.cleaning.quality.gopher_repetition import GopherRepetitionSettings
from platform_assets.cleaning.quality.length import LengthSettings
from platform_assets.cleaning.quality.seed_filters import SeedFiltersSettings
from platform_assets.cleaning.quality.symbol_ratio import SymbolRatioSettings
from platform_assets.contracts import StrictModel

__all__ = [  # the preset settings are part of the `cleaning:` config; they live with their rules
    "ENGLISH", "PRESET_SETTINGS", "C4Settings", "CodeRatioSettings", "Count", "CustomSettings", "FineWebSettings",
    "ConversationSettings", "GopherQualitySettings", "GopherRepetitionSettings", "Langs", "LengthSettings",
    "QualityPreset", "Ratio",
    "SeedFiltersSettings", "SymbolRatioSettings", "fineweb_recipe", "preset",
]

# In the order the detectors run: most specific first (see pii.py)
PiiType = Literal[
    "PRIVATE_KEY",
    "BEARER_TOKEN",
    "JWT",
    "AWS_ACCESS_KEY",
    "AWS_SECRET_KEY",
    "GITHUB_TOKEN",
    "SLACK_TOKEN",
    "EMAIL",
    "CREDIT_CARD",
    "IP_ADDRESS",
    "PHONE",
]
PII_TYPES: tuple[str, ...] = get_args(PiiType)


# -- guard, HTML, normalisation -----------------------------------------------------------------------


class GuardSettings(StrictModel):
    """Cheap whole-column checks that run first, so that no later step sees a pathological document."""

    enabled: bool = True
    modalities: tuple[str, ...] | None = TEXT_SCOPE
    """Documents it judges: text and HTML. A media document (image, PDF page, audio) may have no text
    at all, and that is not `empty`; its bytes are checked by its media room."""
    # The real text corpus: median 2.8 KB, p99 58 KB, largest 1.0 MB (13,825 docs). 4 MiB keeps every
    # real document and bounds the worst per-document cost of the Python steps (about 1 s at the
    # slowest step's ~5 MB/s); a 50 MB one-line document is removed here before any Python sees it.
    max_bytes: Annotated[int, Field(gt=0)] = 4 * 2**20
    # Share of C0 control characters (not tab/newline/CR/FF), DEL and U+FFFD among the first
    # `binary_sample_chars` characters. Real text has ~0; random bytes decoded as UTF-8 with
    # replacement give > 50%, decoded as Latin-1 about 12% (30 of 256 byte values), hence 0.1.
    max_binary_ratio: Ratio = 0.1
    binary_sample_chars: Annotated[int, Field(gt=0)] = 65_536


class HtmlSettings(StrictModel):
    """Main-text extraction (Resiliparse) for documents whose modality is `html`."""

    enabled: bool = True
    modalities: tuple[str, ...] = ("html",)
    main_content: bool = True
    """Drop boilerplate (navigation, headers, footers, sidebars); False keeps all visible text."""
    # Resiliparse's main-content heuristic is superlinear in DOM depth (measured: depth 2,000 -> 0.07 s,
    # 20,000 -> 13 s for a 100 KB page); real pages are < 100 deep. 256 is libxml2's (and so lxml's and
    # trafilatura's) own default limit, which fails such pages too.
    max_depth: Annotated[int, Field(gt=1)] = 256
    list_bullets: bool = True
    alt_texts: bool = False
    links: bool = False
    form_fields: bool = False
    noscript: bool = False
    comments: bool = False
    """Keep user comment sections as main content."""
    generator_rules: bool = True
    """Pages whose `<meta name="generator">` names a documentation generator we know (Sphinx, DocBook
    XSL, Publican, makeinfo: `cleaning/html_generators.py`) lose the navigation that generator marks
    and keep everything else, instead of going through the main-content heuristic (which drops
    sidebar boxes and some bulleted lists, and keeps makeinfo's and DocBook's navigation bars:
    recall 73-96%, measured per generator in benchmarks/RESULTS.md). Other pages are unaffected."""
    extra_navigation: tuple[str, ...] = ()
    """CSS selectors of elements removed from every html page before extraction (a site's own menus,
    e.g. `div.site-menu`); applied with or without `main_content`."""


class NormalizeSettings(StrictModel):
    enabled: bool = True
    unicode_form: Literal["NFC", "NFKC", "NFD", "NFKD"] | None = "NFC"
    """NFC keeps what the author typed (full-width forms, ligatures, superscripts); NFKC folds them."""
    fix_mojibake: bool = True
    """Repair text decoded with the wrong codec (ftfy), e.g. 'cafÃ©' -> 'café'."""
    remove_control_chars: bool = True
    """C0/C1 controls (not tab/newline), DEL, BOM, zero-width space, soft hyphen, noncharacters."""
    normalize_whitespace: bool = True
    """Line endings to \\n, exotic spaces to ' ', trailing spaces stripped, blank-line runs capped."""
    collapse_spaces: bool = False
    """Collapse runs of spaces/tabs inside lines: off because it breaks code indentation and tables."""
    max_blank_lines: Annotated[int, Field(ge=0)] = 2


# -- media: decisions on what ingest measured (platform_assets/media/), no decoding -----------------------


class ImageFilterSettings(StrictModel):
    """Images and rendered PDF pages (`cleaning/media_filters.py`)."""

    enabled: bool = True
    modalities: tuple[str, ...] = ("image", "pdf")
    min_side: Count | None = 32
    """Pixels. CLIP-style encoders take 224 px inputs; below 32 px an image is an icon or a tracking
    pixel (the emoji set is 64 px and is kept)."""
    max_side: Count | None = None
    max_aspect_ratio: Annotated[float, Field(ge=1)] | None = 8.0
    """Long side / short side: 8 keeps panoramas (~4:1) and tall receipts, drops banners and rules."""
    min_luma_std: Annotated[float, Field(ge=0)] | None = 2.0
    """Luminance std deviation (0-255) below which an image or page is blank: a white page measures
    0.0, a scanned blank page with noise ~1, the sparsest real emoji ~20."""


class AudioFilterSettings(StrictModel):
    """Audio clips (`cleaning/media_filters.py`)."""

    enabled: bool = True
    modalities: tuple[str, ...] = ("audio",)
    min_duration_s: Annotated[float, Field(ge=0)] | None = 0.3
    """Shorter clips hold no word (a spoken syllable is ~0.2-0.3 s)."""
    max_duration_s: Annotated[float, Field(gt=0)] | None = 30.0
    """Whisper's window: longer clips would be cut by the feature extractor (ingest refuses anything over
    `media.audio.max_duration_s` before decoding; this is the training-side choice)."""
    max_silent_fraction: Ratio | None = 0.9
    """Share of 20 ms frames below `media.audio.silence_dbfs`: speech has pauses (espeak-ng clips: ~10-30%)."""
    max_clipped_fraction: Ratio | None = 0.01
    """Share of samples at full scale: 1% clipped is audibly distorted."""


# -- language -----------------------------------------------------------------------------------------


class LanguageSettings(StrictModel):
    """Language identification with py3langid (model shipped in the wheel, 140 labels)."""

    enabled: bool = True
    modalities: tuple[str, ...] | None = None
    allow: tuple[str, ...] | None = None
    """Keep only these languages, as BCP-47 tags: `de`, `deu`, `pt-BR` (regions are ignored: the model
    tells languages apart, not regional varieties), `no` (matches `nb` and `nn`), `zh` (any script),
    `zh-Hant` / `zh-Hans` (that script, or Han text both share), `sr-Latn`, `ko-Hang` / `ja-Hira`
    (a part of Korean / Japanese writing: matches their texts). Rules:
    platform_assets/cleaning/language_tags.py. A configuration error: a tag naming no language the
    identifier reports, and a variety it reports as its macrolanguage (`arz`, `fuv`, `cmn`: the error
    says to write `ar`, `ff`, `zh`, which is what such an entry would match). None keeps every language."""
    # py3langid's probabilities are softmax-normalised with a temperature of sqrt(bytes), unlike
    # fastText's. On the 3,200 man-page paragraphs (mean 200 chars): 99.4% accuracy overall; 0.5 keeps
    # 98.8% of them at 99.84% accuracy, 0.65 (FineWeb's fastText number) keeps 98.2%.
    min_score: Ratio = 0.5
    min_score_by_words: dict[int, Ratio] = {3: 0.25, 10: 0.3}
    """Thresholds for short texts, by length band: `{3: 0.25, 10: 0.3}` means texts of 1-3 words need
    0.25, 4-10 words 0.3, longer ones `min_score` (words: language_bands.count_words, 2 Han/kana
    characters a word). py3langid's score falls with length (temperature sqrt(bytes)): on 3,278 NAME
    lines of translated man pages, 0.5 removed 15% of the correctly identified 1-3 word lines and 7.5%
    of the 4-10 word ones (these bands: 4.7% and 2.5%). Chosen on those lines per band: the most
    right decisions (correct kept + wrong removed), the highest threshold within 0.5% of the best
    (benchmarks/langid_accuracy.py, RESULTS.md "Language ID: short texts"). `{}`: `min_score` for
    every length."""
    # Accuracy saturates after a few hundred characters (99.4% on 200-char paragraphs); reading at most
    # 2,048 characters bounds the cost at ~2 ms per document whatever its size.
    max_chars: Annotated[int, Field(gt=0)] = 2048
    label_only_modalities: tuple[str, ...] = ("image", "audio")
    """Documents of these modalities are labelled (`lang`, `lang_score`) but never removed for a low
    score: their text is a caption or a transcript of a few words, where py3langid's score is low
    whatever the language (0.18-0.34 on the sample's English captions, "A red circle on a white
    background."). A confident score outside `allow` still removes them."""
    fold_macrolanguages: bool = True
    """Report individual languages that lack an ISO 639-1 code as their macrolanguage: Cantonese and
    Wu as zh, Moroccan/Egyptian Arabic as ar, Nigerian Fulfulde as ff, ... and py3langid's Bokmål
    `no` as nb (language_tags.py; without it, 16% of zh_TW paragraphs come out 'yue'). False: the
    model's own labels, for comparison only (allow-lists and script checks expect the folded ones)."""
    min_script_share: Ratio = 0.15
    """Refuse the label when fewer of the text's letters than this are in a script its language is
    written in (language_script.LANGUAGE_SCRIPTS): py3langid labels Canadian syllabics, which it was
    never trained on, Amharic at 0.98. Shares are of letter bytes (UTF-8, as the model reads): the
    lowest among correctly labelled man-page texts is 0.43 on the 3,200 paragraphs (Japanese with
    English option names) and 0.31 on the NAME lines ("PostgreSQL Tcl/Tk shell 客戶端"). A refused
    label is removed as `script_mismatch` (label-only modalities: reported as `und`, score 0)."""

    @model_validator(mode="after")
    def _allow_tags_are_known(self) -> LanguageSettings:
        from platform_assets.cleaning.language_tags import AllowList  # no import cycle: it imports no settings

        if self.allow is not None:
            AllowList(self.allow)  # ValueError naming the unknown tags
        if any(n <= 0 for n in self.min_score_by_words):
            raise ValueError("min_score_by_words: word counts must be positive")
        return self


# -- blocklist, PII -----------------------------------------------------------------------------------


class BlocklistSettings(StrictModel):
    enabled: bool = True
    modalities: tuple[str, ...] | None = None
    languages: Langs = None
    path: str | None = None
    """A UTF-8 word list, one term or phrase a line, '#' comments; None: the small list shipped in
    platform_assets/cleaning/data/blocklist_en.txt. C4 used LDNOOBW's list (~400 English terms)."""
    max_hits: Count = 0
    """Remove a document with more than this many matches (C4: any match, i.e. 0)."""


class PiiSettings(StrictModel):
    enabled: bool = True
    modalities: tuple[str, ...] | None = None
    types: tuple[PiiType, ...] = PII_TYPES
    placeholder: str = "<{type}>"
    """Replacement text; `{type}` becomes EMAIL, PHONE, ..."""
    redact_non_global_ips: bool = False
    """Also redact private, loopback and documentation addresses (192.168.0.1, 127.0.0.1, 2001:db8::1):
    they identify nobody and are everywhere in technical documentation."""

    @model_validator(mode="after")
    def _placeholder_has_type(self) -> PiiSettings:
        if "{type}" not in self.placeholder:
            raise ValueError("placeholder must contain '{type}'")
        return self


# -- licences ----------------------------------------------------------------------------------------


class LicenseSettings(StrictModel):
    """The licence allow-list: every document's `license` (set at ingest from the source's `license:`
    or the manifest row) must be one of `allow`. Not configured (`allow: null`, the default): no gate.

    ``on_missing_or_disallowed: fail`` keeps the documents and makes the blocking check
    `license_allowed` fail on the partition, naming the source and the licences found, so nothing
    downstream runs; ``drop`` removes those documents (rules `license.missing`,
    `license.not_allowed`, value: the licence). Ids are compared case-insensitively (SPDX ids are)."""

    allow: tuple[str, ...] | None = None
    on_missing_or_disallowed: Literal["fail", "drop"] = "fail"

    @property
    def enabled(self) -> bool:
        return self.allow is not None

    def allowed(self, license_id: str | None) -> bool:
        return license_id is not None and license_id.strip().casefold() in {a.casefold() for a in self.allow or ()}


# -- recipes (cleaning/recipes.py) -------------------------------------------------------------------


class RecipeGates(StrictModel):
    """A recipe's bounds for the blocking removal checks on cleaned_documents; each field set here
    replaces the global `cleaning_gates:` one for the sources of the recipe (None: the global value)."""

    max_removal_rate: Ratio | None = None
    """Share of a source's documents that cleaning may remove in all."""
    max_rule_removal_rate: Ratio | None = None
    """Share of the documents entering a rule group that the group may remove."""
    rule_bounds: dict[str, Ratio] = {}
    """Per rule group or full rule name; merged over the global `cleaning_gates.rule_bounds`."""


class RecipeSettings(StrictModel):
    """A custom recipe (`cleaning.recipes.<name>`): `overrides` deep-merged onto the recipe `base`
    (mappings merge key by key, lists and values replace), validated as a `cleaning:` block."""

    base: str = "web"
    """The recipe it starts from: a built-in one (web, code, docs, sft) or another custom one."""
    overrides: dict[str, Any] = {}
    """Sections of the `cleaning:` block, e.g. `{quality: [{preset: seed_filters}], conversation:
    {min_response_words: 3}}`; errors name the recipe and the key."""
    gates: RecipeGates | None = None
    """The removal-check bounds of this recipe, over those of `base` (the fields set here replace
    the base's, rule bounds merge); None: the base's."""


# -- the stage ----------------------------------------------------------------------------------------


class CleaningSettings(StrictModel):
    """Steps run in this order: licences (in `drop` mode), guard, images, audio, html, normalize,
    conversation, language, quality (in list order), blocklist, pii. Captions, page text and transcripts go through
    the text steps like any text (the quality presets are scoped to text and HTML: a caption is not a
    web page).

    Filters run before redaction so that redaction (the slowest regex work) only touches survivors and
    quality statistics see the author's text, not placeholders.
    """

    guard: GuardSettings = GuardSettings()
    images: ImageFilterSettings = ImageFilterSettings()
    audio: AudioFilterSettings = AudioFilterSettings()
    html: HtmlSettings = HtmlSettings()
    normalize: NormalizeSettings = NormalizeSettings()
    language: LanguageSettings = LanguageSettings()
    quality: list[QualityPreset] = Field(default_factory=fineweb_recipe)
    blocklist: BlocklistSettings = BlocklistSettings()
    pii: PiiSettings = PiiSettings()
    licenses: LicenseSettings = LicenseSettings()
    conversation: ConversationSettings = ConversationSettings()
    """Turn checks of chat and instruction documents (the `sft` recipe's rules); off here."""
    default_recipe: str = "web"
    """The recipe of a source that names none (`recipe:` in its config). `web` is this block as
    written, so sources without a recipe are cleaned exactly as before recipes existed."""
    recipes: dict[str, RecipeSettings] = {}
    """Custom recipes by name, beside the built-in web, code, docs and sft (cleaning/recipes.py)."""
    on_error: Literal["exclude", "raise"] = "exclude"
    """`exclude`: a document whose processing raises is removed under rule `<step>.error` (and
    counted); `raise`: the batch fails."""

    @model_validator(mode="after")
    def _language_gates_need_language_step(self) -> CleaningSettings:
        if self.language.enabled:
            return self
        gated = [q.preset for q in self.quality if q.languages is not None]
        gated += ["blocklist"] if self.blocklist.enabled and self.blocklist.languages is not None else []
        if gated:
            raise ValueError(
                f"language.enabled is false but {', '.join(gated)} filter by language: set their "
                "`languages: null` or enable the language step"
            )
        return self

    @model_validator(mode="after")
    def _recipes_resolve(self) -> CleaningSettings:
        from platform_assets.cleaning.recipes import check_recipes  # recipes.py imports this module

        check_recipes(self)  # ValueError naming the recipe and what is wrong with it
        return self
