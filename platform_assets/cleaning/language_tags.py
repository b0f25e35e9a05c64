"""BCP-47 language tags for the language step: what it reports, and how an allow-list entry matches.

Reported form (`lang` column): the language subtag alone, lower case, ISO 639-1 where the language
has a code there (`de`, not `deu`/`ger`), else ISO 639-3. An individual language without a 639-1 code
is reported as its macrolanguage when that one has a code (ISO 639-3 macrolanguage mappings, SIL's
iso-639-3-macrolanguages.tab): `fuv` (Nigerian Fulfulde) -> `ff`, `yue`/`wuu` -> `zh`, `ary`/`arz`
-> `ar`, `gug` -> `gn`, `sdh` -> `ku`, `uzs` -> `uz`, `ltg` -> `lv`; these are the codes users name.
The script goes to its own column (`lang_script`, ISO 15924: `Latn`, `Cyrl`, `Hans`, `Hant`, ...),
so steps scoped to `languages: [zh]` see every Chinese document whatever its script.

py3langid's `no` is trained on Norwegian Bokmål (Wikipedia's `no` edition; Nynorsk is its own `nn`
label), so it is reported as `nb`; `no` is the macrolanguage over both.

Allow-list entries (`language.allow`) are BCP-47 tags, `-` or `_` separated, any case: `de`, `deu`,
`pt-BR`, `zh_Hant`, `sr-Latn`, `no`. An entry matches a document when
- its language is the document's, or a macrolanguage the document's language belongs to (`no`
  matches `nb` and `nn`, `zh` matches every Chinese text, `ar` matches `arz`, `kok` matches `gom`);
- and, if it names a script, the text is in that script (`sr-Latn`: Latin letters). Han text is
  `Hans` or `Hant` when its characters say so (language_script.han_variant), `Hani` when it holds only
  characters both forms share: such text is valid in either, so `zh-Hans` and `zh-Hant` both match it,
  and `zh-Hani` matches all three. Japanese and Korean text is reported in the composite scripts
  `Jpan` (Hani + Hira + Kana) and `Kore` (Hang + Hani), and an entry naming a part matches the whole:
  `ja-Hira` and `ko-Hang` keep the model's ja / ko texts, which mix their scripts in every sentence.
- A region (`pt-BR`, `zh-TW`) is accepted and ignored: the model tells languages apart, not regional
  varieties, so `pt-BR` keeps all Portuguese.
An entry whose language the identifier never reports (`iu`, `xx`) is a configuration error, not an
entry that silently matches nothing. So is an entry the macrolanguage fold would widen (`arz`, `fuv`,
`cmn`): the step reports Egyptian Arabic as `ar`, like every other Arabic, so `arz` would keep all
Arabic; the error says to write `ar`. `cleaning_gates.language_shares` keys are read the same way
(`NB` is `nb`, `zh_hans` is `zh-Hans`, `no` counts nb and nn documents).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import regex

from platform_assets.cleaning.language_script import COMPOSITE_SCRIPTS

# ISO 639-2/T and 639-3 codes of the languages with an ISO 639-1 code (Debian's iso-codes 4.x,
# /usr/share/iso-codes/json/iso_639-3.json, `alpha_2`), and the 639-2/B codes that differ (iso_639-2.json)
_ALPHA3_ALPHA2 = """
aar:aa abk:ab afr:af aka:ak amh:am ara:ar arg:an asm:as ava:av ave:ae aym:ay aze:az bak:ba bam:bm
bel:be ben:bn bis:bi bod:bo bos:bs bre:br bul:bg cat:ca ces:cs cha:ch che:ce chu:cu chv:cv cor:kw
cos:co cre:cr cym:cy dan:da deu:de div:dv dzo:dz ell:el eng:en epo:eo est:et eus:eu ewe:ee fao:fo
fas:fa fij:fj fin:fi fra:fr fry:fy ful:ff gla:gd gle:ga glg:gl glv:gv grn:gn guj:gu hat:ht hau:ha
hbs:sh heb:he her:hz hin:hi hmo:ho hrv:hr hun:hu hye:hy ibo:ig ido:io iii:ii iku:iu ile:ie ina:ia
ind:id ipk:ik isl:is ita:it jav:jv jpn:ja kal:kl kan:kn kas:ks kat:ka kau:kr kaz:kk khm:km kik:ki
kin:rw kir:ky kom:kv kon:kg kor:ko kua:kj kur:ku lao:lo lat:la lav:lv lim:li lin:ln lit:lt ltz:lb
lub:lu lug:lg mah:mh mal:ml mar:mr mkd:mk mlg:mg mlt:mt mon:mn mri:mi msa:ms mya:my nau:na nav:nv
nbl:nr nde:nd ndo:ng nep:ne nld:nl nno:nn nob:nb nor:no nya:ny oci:oc oji:oj ori:or orm:om oss:os
pan:pa pli:pi pol:pl por:pt pus:ps que:qu roh:rm ron:ro run:rn rus:ru sag:sg san:sa sin:si slk:sk
slv:sl sme:se smo:sm sna:sn snd:sd som:so sot:st spa:es sqi:sq srd:sc srp:sr ssw:ss sun:su swa:sw
swe:sv tah:ty tam:ta tat:tt tel:te tgk:tg tgl:tl tha:th tir:ti ton:to tsn:tn tso:ts tuk:tk tur:tr
twi:tw uig:ug ukr:uk urd:ur uzb:uz ven:ve vie:vi vol:vo wln:wa wol:wo xho:xh yid:yi yor:yo zha:za
zho:zh zul:zu
tib:bo cze:cs wel:cy ger:de gre:el baq:eu per:fa fre:fr arm:hy ice:is geo:ka mac:mk mao:mi may:ms
bur:my dut:nl rum:ro slo:sk alb:sq chi:zh
"""
ALPHA2: dict[str, str] = dict(pair.split(":") for pair in _ALPHA3_ALPHA2.split())

# IANA language subtag registry: deprecated subtags and their preferred values
DEPRECATED: dict[str, str] = {"iw": "he", "in": "id", "ji": "yi", "jw": "jv", "mo": "ro"}

# ISO 639-3 macrolanguage mappings (SIL, iso-639-3-macrolanguages.tab), for the macrolanguages of the
# identifier's labels and the members users most often write; every code is checked against Debian's
# iso-codes list in tests/unit/test_cleaning_language_tags.py where that list is installed.
_MACROLANGUAGES = """
ar: arb ary arz aeb arq apc ajp acm afb ars ayl acq apd abv shu ssh ayp
zh: cmn yue wuu hak nan gan hsn cjy cdo cpx czh czo mnp lzh
ff: fuv fub fuc fue fuf fuh fui fuq ffm
gn: gug gui gun gnw nhd
ku: ckb kmr sdh
lv: lvs ltg
uz: uzn uzs
no: nb nn
ms: zsm zlm min meo mfa max bjn
sw: swh swc
fa: pes prs
et: ekk vro
sq: als aln aae aat
mn: khk mvf
ne: npi dty
or: ory spv
om: gaz hae orc gax
ps: pbt pbu pst
qu: quz quy qug qub qvi
sh: bs hr sr cnr
kok: gom knn
bik: bcl bto cts fbl lbl rbl ubl
"""
MACROLANGUAGE_OF: dict[str, str] = {
    member: macro.rstrip(":")
    for line in _MACROLANGUAGES.strip().splitlines()
    for macro, *members in [line.split()]
    for member in members
}

# py3langid 0.4.0's labels (tests check them against the model), and those reported differently
PY3LANGID_LABELS = tuple("""
ace af am an ar ary arz as az ba bcl be bg bn br bs ca crh cs cy da de dz el en eo es et eu ext fa fi
fo fr fuv fy ga gcf gcr gd gl gom grc gu gug guw ha hbo he hi hr ht hu hy id ig is it ja jv ka kab
kik kk km kn ko ku ky la lb lg lij ln lo lt ltg lv mg mk ml mn mr ms mt my ne nl nn no nso oc om or
pa pcm pl ps pt qu ro ru rw sa sdh se si sk sl sn so sq sr st sv sw ta te tg th tk tl tr tt ug uk ur
uz uzs vec vi vo wa wuu xh yo yue zh zu zxx
""".split())
_MODEL_LABEL_MEANS = {"no": "nb"}  # py3langid's `no` is Bokmål (see the module docstring)

UNDETERMINED = "und"
NO_LINGUISTIC_CONTENT = "zxx"

_TAG_RE = regex.compile(r"(?P<lang>[a-z]{2,3})(?:-(?P<script>[a-z]{4}))?(?:-(?P<region>[a-z]{2}|\d{3}))?")


def same_language(code: str) -> str:
    """The same language, spelled as reported: `deu` -> `de`, `iw` -> `he`; no macrolanguage fold."""
    code = code.lower()
    return DEPRECATED.get(code, ALPHA2.get(code, code))


def canonical_language(code: str) -> str:
    """`deu` -> `de`, `iw` -> `he`, `FUV` -> `ff`, `cmn` -> `zh`; `nb` stays `nb`, `bcl` stays `bcl`
    (its macrolanguage, Bikol, has no ISO 639-1 code for users to name)."""
    code = same_language(code)
    macro = MACROLANGUAGE_OF.get(code)
    if macro is not None and len(code) == 3 and len(macro) == 2:
        return macro
    return code


def reported_label(model_label: str) -> str:
    """The label the step reports for one of the model's labels."""
    return canonical_language(_MODEL_LABEL_MEANS.get(model_label, model_label))


REPORTED_LANGUAGES: frozenset[str] = frozenset(reported_label(x) for x in PY3LANGID_LABELS)


@dataclass(frozen=True)
class LanguageTag:
    language: str
    script: str | None = None  # ISO 15924, title case: Latn, Hant
    region: str | None = None  # upper case; accepted, never used to match

    def __str__(self) -> str:
        return "-".join(x for x in (self.language, self.script, self.region) if x)

    def covers(self, language: str, script: str | None) -> bool:
        """Does this entry match a document reported as (`language`, `script`)?"""
        return language_matches(self.language, language) and script_matches(self.script, script)


def _match_tag(text: str) -> regex.Match[str]:
    match = _TAG_RE.fullmatch(text.strip().replace("_", "-").lower())
    if match is None:
        raise ValueError(f"{text!r} is not a language tag of the form language[-Script][-Region] "
                         "(e.g. 'de', 'pt-BR', 'zh-Hant', 'sr-Latn')")
    return match


def parse_tag(text: str) -> LanguageTag:
    """Parse a `language[-Script][-Region]` tag (`-` or `_`, any case); ValueError with the reason."""
    match = _match_tag(text)
    script = match["script"].title() if match["script"] else None
    region = match["region"].upper() if match["region"] else None
    return LanguageTag(canonical_language(match["lang"]), script, region)


def configured_tags(entries: Iterable[str], what: str = "language tags") -> tuple[LanguageTag, ...]:
    """Parse configured entries (`language.allow`, `language_shares` keys); ValueError naming each
    one the fold would widen (see the module docstring) and each naming no reported language."""
    entries = tuple(entries)
    tags = tuple(parse_tag(e) for e in entries)
    widened = []
    for entry, tag in zip(entries, tags, strict=True):
        written = same_language(_match_tag(entry)["lang"])
        if written != tag.language:
            widened.append(f"{entry.strip()} is identified as {tag.language} by the language-ID model; write "
                           f"{LanguageTag(tag.language, tag.script, tag.region)}")
    if widened:
        raise ValueError(f"{what}: {'; '.join(widened)} (the model's labels of a macrolanguage's varieties "
                         "are reported as the macrolanguage, so such an entry would match all of it)")
    unknown = [entry for entry, tag in zip(entries, tags, strict=True)
               if not any(language_matches(tag.language, r) for r in REPORTED_LANGUAGES)]
    if unknown:
        raise ValueError(
            f"{what} {unknown} name no language the identifier reports (py3langid's 140 "
            f"labels, reported as: {', '.join(sorted(REPORTED_LANGUAGES))})"
        )
    return tags


def normalised_language_keys(values: Mapping[str, object], what: str) -> dict[str, object]:
    """`values` keyed by the entries' reported form without region (`NB` -> `nb`, `zh_hans_CN` ->
    `zh-Hans`), order kept; ValueError for a bad entry or two keys naming the same tag."""
    out: dict[str, object] = {}
    written: dict[str, str] = {}
    for key, tag in zip(values, configured_tags(values, what), strict=True):
        name = str(LanguageTag(tag.language, tag.script))
        if name in out:
            raise ValueError(f"{what}: {written[name]!r} and {key!r} are the same language tag ({name})")
        out[name], written[name] = values[key], key
    return out


def tag_count(entry: str, counts: Mapping[tuple[str, str | None], int]) -> int:
    """Documents per (lang, lang_script) summed over those `entry` covers (as an allow-list entry)."""
    tag = parse_tag(entry)
    return sum(n for (language, script), n in counts.items() if tag.covers(language, script))


def language_matches(entry: str, reported: str) -> bool:
    """Does allow-list language `entry` (canonical) cover reported language `reported`?"""
    return entry == reported or MACROLANGUAGE_OF.get(reported) == entry


def script_matches(entry_script: str | None, reported_script: str | None) -> bool:
    if entry_script is None or entry_script == reported_script:
        return True
    # Han text with no simplified- or traditional-only character is valid in both forms
    if entry_script in ("Hans", "Hant") and reported_script == "Hani":
        return True
    if entry_script == "Hani" and reported_script in ("Hans", "Hant"):
        return True
    # Japanese / Korean text is reported as its composite script: `ja-Hira`, `ko-Hang` name a part of it
    return reported_script is not None and entry_script in COMPOSITE_SCRIPTS.get(reported_script, ())


class AllowList:
    """Parsed `language.allow` entries; raises ValueError naming each entry that can never match or
    that the macrolanguage fold would widen."""

    def __init__(self, entries: Iterable[str]):
        self.tags = configured_tags(entries)
        self._by_language: dict[str, list[LanguageTag]] = {}
        for reported in sorted(REPORTED_LANGUAGES):
            for tag in self.tags:
                if language_matches(tag.language, reported):
                    self._by_language.setdefault(reported, []).append(tag)

    @property
    def names_scripts(self) -> bool:
        """Does an entry name a script (`zh-Hant`, `sr-Latn`)? Then exclusions show the text's script."""
        return any(t.script for t in self.tags)

    def allows(self, language: str, script: str | None) -> bool:
        return any(t.covers(language, script) for t in self._by_language.get(language, ()))

    def __str__(self) -> str:
        return ",".join(map(str, self.tags))
