r"""PII and secret redaction with typed placeholders (<EMAIL>, <PHONE>, <CREDIT_CARD>, ...).

Detectors run in a fixed order, most specific first, so that a later, looser pattern never sees what
an earlier one replaced (a bearer token is not also read as a JWT, a card number is not read as a phone
number): PRIVATE_KEY, BEARER_TOKEN, JWT, AWS_ACCESS_KEY, AWS_SECRET_KEY, GITHUB_TOKEN, SLACK_TOKEN,
EMAIL, CREDIT_CARD, IP_ADDRESS, PHONE.

Every pattern is linear in the text, which is what lets redaction run on whole documents of any size
(it cannot look at a prefix only): repetitions are bounded (an e-mail local part is at most 64
characters, as in RFC 5321), and each pattern starts with a lookbehind that refuses to start inside a
run of the characters it consumes, so a 4 MB run of "a" or "1" is scanned once, not once per position.
Where a pattern's first character is a literal or a class, the boundary lookbehind comes right after it
(``\d(?<![\w.]\d)``) so that the engine rejects most positions on one character test instead of
evaluating lookbehinds everywhere. Candidates are then validated in Python: Luhn and issuer prefixes
for cards, `ipaddress` for IPs, digit counts and context for phone numbers.
"""

from __future__ import annotations

import ipaddress
import re
from collections import Counter
from collections.abc import Callable, Iterable
from typing import ClassVar, NamedTuple

import pyarrow as pa

from platform_assets.cleaning import pii_digits
from platform_assets.cleaning.pii_search import substitute
from platform_assets.cleaning.settings import PII_TYPES, PiiSettings
from platform_assets.cleaning.steps import Doc, DocumentStep, Drop

# -- secrets --------------------------------------------------------------------------------------------
# The body cannot run past a "-----" (possessive, no backtracking), so each BEGIN scans only up to the
# next marker: linear even for a text of nothing but BEGIN lines. 20,000 characters bound it; an
# 8192-bit RSA key in PEM is ~6.5 KB.
_PRIVATE_KEY_RE = re.compile(
    r"-----BEGIN (?:[A-Z0-9]{1,10} ){0,3}PRIVATE KEY(?: BLOCK)?-----"
    r"(?:[^-]|-(?!----)){1,20000}+"
    r"-----END (?:[A-Z0-9]{1,10} ){0,3}PRIVATE KEY(?: BLOCK)?-----"
)
# RFC 6750: "Bearer" then a b64token. >= 20 characters, so "bearer of bad news" stays.
_BEARER_RE = re.compile(r"(?i:\bbearer)[ \t]{1,10}([A-Za-z0-9._~+/-]{20,4096}=*)")
_JWT_RE = re.compile(
    r"(?<![A-Za-z0-9_-])eyJ[A-Za-z0-9_-]{8,4096}\.eyJ[A-Za-z0-9_-]{8,8192}\.[A-Za-z0-9_-]{8,4096}"
)
# AWS access key ids: a 4-character resource prefix (AKIA long-term, ASIA temporary, ...) + 16.
_AWS_ACCESS_KEY_RE = re.compile(
    r"A(?<![A-Z0-9]A)(?:KIA|SIA|BIA|CCA|GPA|IDA|IPA|NPA|NVA|ROA|PKA|SCA)[A-Z0-9]{16}(?![A-Z0-9])"
)
# Secret access keys are 40 base64 characters with no marker of their own: only next to a name that
# says so (aws_secret_access_key = ..., "SecretAccessKey": "...").
_AWS_SECRET_KEY_RE = re.compile(
    r"(?i:aws)?[_-]?(?i:secret)[_-]?(?i:access)?[_-]?(?i:key)[\"']?[ \t]{0,5}[:=][ \t]{0,5}[\"']?"
    r"([A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=])"
)
_GITHUB_TOKEN_RE = re.compile(
    r"g(?<![A-Za-z0-9_]g)(?:h[pousr]_[A-Za-z0-9]{36,251}|ithub_pat_[A-Za-z0-9_]{22,255})(?![A-Za-z0-9_])"
)
_SLACK_TOKEN_RE = re.compile(r"(?<![A-Za-z0-9-])xox[abposr]-[A-Za-z0-9-]{10,250}")

# -- e-mail ---------------------------------------------------------------------------------------------
_EMAIL_RE = re.compile(
    r"(?<![\w.%+-])[\w.%+-]{1,64}@"
    r"(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.){1,8}[A-Za-z]{2,24}(?![\w-])"
)

# -- credit cards ---------------------------------------------------------------------------------------
# 13 to 19 digits, optionally grouped by single spaces or dashes; starts only where no digit group,
# word character or decimal point precedes and ends where none follows, so neither a long digit table,
# a git hash ("f82a032f417445abbb4111...") nor a float's decimals are mined for 16-digit windows.
_CARD_RE = re.compile(r"\d(?<![\w.,-]\d)(?<!\d \d)(?<!\d-\d)(?:[ -]?\d){12,18}(?![ -]?\d|\w)")
# Issuer prefixes (IIN ranges) of Visa, Mastercard, Amex, Discover, Diners, JCB, UnionPay, Maestro.
_CARD_PREFIX_RE = re.compile(r"4|5[1-5]|2[2-7]|3[47]|3[068]|35|6(?:011|4[4-9]|5)|62|50|5[6-8]|6[39]")
_CARD_GROUPINGS = {
    (4, 4, 4, 4),
    (4, 4, 4, 4, 3),
    (4, 6, 5),
    (4, 6, 4),
    (4, 4, 4, 1),
    (4, 4, 4, 2),
    (4, 4, 4, 3),
}


def luhn_valid(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = ord(ch) - 48
        if i % 2 == 1:
            d *= 2
            if d > 9:
                d -= 9
        total += d
    return total % 10 == 0


def is_card_number(candidate: str) -> bool:
    """13-19 digits in a card grouping, an issuer prefix, not one repeated digit, and a valid Luhn sum."""
    digits = re.sub(r"[ -]", "", candidate)
    if not 13 <= len(digits) <= 19 or len(set(digits)) == 1:
        return False
    if not _CARD_PREFIX_RE.match(digits):
        return False
    groups = tuple(len(g) for g in re.split(r"[ -]", candidate))
    if len(groups) > 1 and groups not in _CARD_GROUPINGS:
        return False  # "1234 56 7890 ..." is a table of numbers, not a card
    return luhn_valid(digits)


# -- IP addresses ---------------------------------------------------------------------------------------
_IPV4_RE = re.compile(r"\d(?<![\w.]\d)\d{0,2}(?:\.\d{1,3}){3}(?!\.?\w)")
# What every candidate holds, led by a literal (scanned fast, where the candidate search tests every
# digit): 80 of the cleaning_stage benchmark's 534 texts have it, and IPv4 costs 0.012 CPU-s, not 0.026
_IPV4_HINT_RE = re.compile(r"\.\d{1,3}\.\d{1,3}\.\d")
# Candidates only (hex groups and colons, at least two colons); `ipaddress` decides. A time "12:30:45"
# or a C++ "std::vector" is not an address (no valid parse, or not preceded by a boundary).
_IPV6_RE = re.compile(r"(?<![\w:.])(?:[0-9A-Fa-f]{0,4}:){2,7}[0-9A-Fa-f]{0,4}(?![\w:])")
# Every candidate holds two colons with at most 4 hex digits between them: a search that starts with
# a literal (fast) decides whether the candidate search (tried at every position) runs at all.
_IPV6_HINT_RE = re.compile(r":[0-9A-Fa-f]{0,4}:")

# Patterns searched only around each occurrence of one character or of an anchor pattern
# (pii_search.substitute_near) instead of at every position of the text: (the character or the anchor, the most
# characters a match holds before its first anchor, the most after that anchor's first character). An
# e-mail address has one "@", a local part of at most 64 characters and at most 8 labels of 63 + "."
# and a 24-letter TLD after it: EMAIL 0.040 -> 0.006 CPU-s on the cleaning_stage benchmark's texts. An
# IPv6 candidate's first colon is followed by at most 4 hex digits and a colon (its second group), with
# at most 4 hex digits before it and 6 groups of 4 + ":" and 4 more after it: anchored on those colons
# rather than on every colon (8,207 of 22,824 in the benchmark's 130 texts with the hint; Python and
# C++ are dense in lone colons), 0.023 -> 0.018 CPU-s. An AWS secret's name holds "secret" (as its
# pattern matches it: case-insensitively) with at most "aws_" before it and up to 69 characters of
# name, separator and 40-character key after its "s": 0.011 -> 0.006 (14 texts, 0.37 MB). An IPv4
# candidate holds its hint (".d.d.d" from its first dot), with at most 3 digits before that dot and 11
# characters after it; one more, since its final lookahead reads two characters where the windows
# allow for one: 0.018 -> 0.007 CPU-s (81 texts; every digit was a start tried before).
_IPV6_ANCHOR_RE = re.compile(r":(?=[0-9A-Fa-f]{0,4}:)")
_AWS_SECRET_ANCHOR_RE = re.compile(r"(?i:secret)")
_SEARCH_NEAR: dict[re.Pattern[str], tuple[str | re.Pattern[str], int, int]] = {
    _EMAIL_RE: ("@", 64, 8 * 64 + 24),
    _IPV6_RE: (_IPV6_ANCHOR_RE, 4, 6 * 5 + 4),
    _AWS_SECRET_KEY_RE: (_AWS_SECRET_ANCHOR_RE, 4, 5 + 1 + 6 + 1 + 3 + 1 + 5 + 1 + 5 + 1 + 40),
    _IPV4_RE: (_IPV4_HINT_RE, 3, 11 + 1),
}


# -- phone numbers --------------------------------------------------------------------------------------
# Three shapes, all needing separators or a "+" so that plain digit runs (ids, counts) are not phones:
#   international  +44 20 7946 0958, +1-415-555-0132, +33 1 23 45 67 89
#   North American (415) 555-0132, 415-555-0132, 415.555.0132
#   national trunk 020 7946 0958, 01 23 45 67 89 (three groups at least: "02111-1307" is the ZIP+4
#                  code in every GPL-2.0 licence text, not a phone)
_PHONE_RE = re.compile(
    r"[+(\d](?<![\w+.-][+(\d])(?:"
    r"(?<=\+)\d{1,3}+(?:[ .-]?\(?\d{1,4}+\)?){1,5}+"
    r"|(?<=\()\d{3}\)[ .-]?\d{3}[ .-]\d{4}"
    r"|(?<=\d)\d{2}([.-])\d{3}\1\d{4}"
    r"|(?<=\d)\d{2} \d{3} \d{4}"
    r"|(?<=0)\d{1,4}+(?:[ .-]\d{2,8}+){2,4}+"
    r")(?![\w-]|\.\d)"
)
# Written as "a first character, then the boundary, then what follows it in each shape" (the shapes
# above, in the same order, each checking which character it starts with): a pattern that starts with a
# character class is scanned for that class at C speed, where one that starts with a lookbehind is
# tried at every position; 2.5x faster on the real corpus, the same matches.
# The possessive quantifiers (`++`, `{m,n}+`) make every alternative deterministic: a candidate that
# is followed by more digits fails at once instead of retrying every way of splitting its digits into
# groups (thousands of steps per "+" otherwise).


# A neighbouring group of 1-4 hex digits (with a digit) means a hex dump or a table of numbers:
# "ffff8801f44ec300: 00 00 00 00 00 00 03" is not a row of phone numbers.
_HEX_GROUP_AFTER_RE = re.compile(r"[ \t]?[0-9A-Fa-f]{0,3}\d[0-9A-Fa-f]{0,3}(?![\w-])")
_HEX_GROUP_BEFORE_RE = re.compile(r"(?<![\w-])[0-9A-Fa-f]{0,3}\d[0-9A-Fa-f]{0,3}:?[ \t]$")


def _phone_ok(m: re.Match[str]) -> bool:
    n = sum(c.isdigit() for c in m.group(0))
    # E.164 numbers have at most 15 digits; fewer than 9 is a local number or, more likely, not a phone
    if not 9 <= n <= 15:
        return False
    text, start, end = m.string, m.start(), m.end()
    if _HEX_GROUP_AFTER_RE.match(text, end, end + 9) or _HEX_GROUP_BEFORE_RE.search(
        text, max(0, start - 9), start
    ):
        return False
    return True


# Redactor.redact's passes at most: a pass that replaces something is followed by one more. A chain of n
# addresses, each after the one before and a "/", needs n; past this, what is left is for the residual
# check to report, not for another scan of the whole text (a 200 KB text of such a chain would be
# scanned thousands of times)
REDACTION_PASSES = 4

# Four dotted numbers after these words are versions or section numbers, not addresses:
# "version 2.6.32.1", "v1.2.3.4", "Section 36.2.1.1", "Firefox/2.0.0.11" (not "http://1.2.3.4")...
_NOT_AN_ADDRESS_CONTEXT_RE = re.compile(
    r"(?i:\b(?:v|ver|version|versi[oó]n|vers[aã]o|release|kernel|linux|build|firmware|section|secci[oó]n"
    r"|sections|se[cç][cç]?[aã]o|sezione|abschnitt|afsnit|kapitel|chapter|chapitre|cap[ií]tulo|capitolo|seksjon|sektion"
    r"|paragraph|appendix|anhang|annexe|figure|fig|table|step|rfc|§)[ .:]?\s?|\w/)$"
)
_HEADING_AFTER_RE = re.compile(r"\.\s")  # ". " or ".\u00a0" (DocBook puts a no-break space there)
_HEADING_BEFORE_RE = re.compile(r"(?:^|\n|[.!?。：:]\s|\s\s)[^\S\n]*$")


class DigitChain(NamedTuple):
    """A detector's gate: the text holds pii_digits' chain of digits (`which`: 0 card, 1 phone), or the
    pattern can find nothing it would replace; and where it searches then: each chain with `before`
    characters before it and `after` after it (pii_search.substitute_in_spans)."""

    which: int
    before: int
    after: int


# type, pattern, validator of the match (None: any), what must be present for the pattern to run, group
Detector = tuple[str, re.Pattern[str], Callable[[re.Match[str]], bool] | None,
                 tuple[str, ...] | re.Pattern[str] | DigitChain | None, int]


class Redactor:
    """Replaces PII in a text; `redact(text, counters)` returns the new text and counts per type."""

    def __init__(self, settings: PiiSettings | None = None):
        self.settings = settings or PiiSettings()
        s = self.settings
        self.placeholders = {t: s.placeholder.format(type=t) for t in PII_TYPES}
        enabled = set(s.types)
        detectors: list[Detector] = [
            # type, pattern, validator of the match (None: any), substrings one of which must be present
            # (a C-speed `in` test that skips the regex on most texts), a cheap pattern that must match or a
            # chain of digits that must be there (pii_digits), group redacted (0: the whole match; 1: the
            # secret after its name)
            ("PRIVATE_KEY", _PRIVATE_KEY_RE, None, ("PRIVATE KEY-----",), 0),
            ("BEARER_TOKEN", _BEARER_RE, None, ("earer", "EARER"), 1),
            ("JWT", _JWT_RE, None, ("eyJ",), 0),
            ("AWS_ACCESS_KEY", _AWS_ACCESS_KEY_RE, None, None, 0),
            ("AWS_SECRET_KEY", _AWS_SECRET_KEY_RE, None, ("ecret", "ECRET"), 1),
            ("GITHUB_TOKEN", _GITHUB_TOKEN_RE, None, None, 0),
            ("SLACK_TOKEN", _SLACK_TOKEN_RE, None, ("xox",), 0),
            ("EMAIL", _EMAIL_RE, None, ("@",), 0),
            # a card number starts and ends with a digit; a phone number may start with "+" or "(" and
            # end with ")" (pii_search.substitute_in_spans)
            ("CREDIT_CARD", _CARD_RE, lambda m: is_card_number(m.group(0)), DigitChain(0, 0, 0), 0),
            ("IP_ADDRESS", _IPV4_RE, self._ipv4_ok, _IPV4_HINT_RE, 0),
            ("IP_ADDRESS", _IPV6_RE, self._ipv6_ok, _IPV6_HINT_RE, 0),
            ("PHONE", _PHONE_RE, _phone_ok, DigitChain(1, 1, 1), 0),
        ]
        self.detectors = [d for d in detectors if d[0] in enabled]

    def _ipv4_ok(self, m: re.Match[str]) -> bool:
        try:
            ip = ipaddress.IPv4Address(m.group(0))  # what ip_address() tries first; the pattern has no ":"
        except ValueError:
            return False
        text, start, end = m.string, m.start(), m.end()
        if _NOT_AN_ADDRESS_CONTEXT_RE.search(text, max(0, start - 20), start):
            return False
        # Every octet below 32 ("1.2.3.4", "12.2.3.1", "4.0.1.2"): in documentation these are section
        # and version numbers far more often than hosts; the few real ones (8.8.8.8, 1.1.1.1) are
        # public resolvers, which identify nobody.
        if max(ip.packed) < 32 and not text.endswith("//", 0, start):
            return False
        # "11.7.3.2. Configuring PAM": a numbered heading (at a line start, after a sentence, or
        # after a run of spaces where extraction joined lines) followed by ". "
        if _HEADING_AFTER_RE.match(text, end) and _HEADING_BEFORE_RE.search(
            text, max(0, start - 20), start
        ):
            return False
        return self.settings.redact_non_global_ips or ip.is_global

    def _ipv6_ok(self, m: re.Match[str]) -> bool:
        candidate = m.group(0)
        # Refused before parsing what `ipaddress` refuses (8 groups, unless "::" stands for some) or
        # the rule below does: most candidates are times ("12:30:45"), MAC addresses and hex dumps
        # (3,482 in cleaning_stage's 133 texts with the hint, 142 with fewer than 3 groups), and
        # each refused parse raised a ValueError (IPv6 redaction 33 -> 20 ms there).
        if "::" not in candidate and candidate.count(":") != 7:
            return False
        if sum(1 for g in candidate.split(":") if g) < 3:
            return False  # "bus #1::" and "a::b" parse as addresses; real ones show three groups or more
        try:
            ip = ipaddress.IPv6Address(candidate)  # ip_address() after IPv4 refused it: the pattern has no "."
        except ValueError:
            return False
        return self.settings.redact_non_global_ips or ip.is_global

    def redact(self, text: str, counters: Counter[str] | None = None) -> tuple[str, int]:
        """`text` with the detected PII replaced by placeholders, and how many were replaced.

        A pass that replaced something is followed by another, up to REDACTION_PASSES, so that the
        result is what redacting it again leaves unchanged (cleaned_documents' `no_residual_pii` check
        redacts the kept texts again). One pass is not always enough: patterns and validators read
        the text around a match, and within a pass that text still holds what the pass replaces.
        "mon_addr=192.1.168.100/192.1.168.101": the second address follows "0/", a version's context
        ("Firefox/2.0.0.11"), so it was kept; after "<IP_ADDRESS>/" it is an address. The whole
        corpus x4 (pipeline_scaling) had 2 such documents of 68,204, and the check failed on them."""
        total = 0
        seen_last = len(self.detectors) - 1  # detectors after this one saw the text as it is now
        for _ in range(REDACTION_PASSES):
            text, hits, last_replacing = self._redact_once(text, counters, seen_last)
            total += hits
            if not hits:
                break
            # a detector after the last one that replaced something scanned the text as it is now and
            # found nothing: it needs to run again only if this pass replaces something before it
            # ("192.1.168.100/192.1.168.100+1 415 555 0134": the second pass's address lets the phone
            # after it match)
            seen_last = last_replacing
        return text, total

    def _redact_once(self, text: str, counters: Counter[str] | None, seen_last: int) -> tuple[str, int, int]:
        """One pass of the detectors, those after `seen_last` only once this pass has replaced something
        (they found nothing in the text as it was): the text, the replacements, the index of the last
        detector that replaced something (-1: none)."""
        total, last_replacing = 0, -1
        chains: tuple[str, pii_digits.DigitChains] | None = None  # pii_digits' answer, and the text it is for
        for index, (kind, pattern, valid, needles, group) in enumerate(self.detectors):
            if index > seen_last and not total:
                break
            spans = None
            if isinstance(needles, DigitChain):
                if chains is None or chains[0] is not text:  # a replacement before may have changed it
                    chains = (text, pii_digits.digit_chains(text))
                found = chains[1][needles.which]
                if not found:
                    continue
                spans = (found, needles.before, needles.after)
            elif needles is not None and not (
                needles.search(text) if isinstance(needles, re.Pattern) else any(x in text for x in needles)
            ):
                continue
            text, hits = substitute(text, pattern, valid, group, self.placeholders[kind], _SEARCH_NEAR.get(pattern),
                                    spans)
            if hits:
                total += hits
                last_replacing = index
                if counters is not None:
                    counters[kind] += hits
        return text, total, last_replacing


class PiiRedact(DocumentStep):
    """Rewrites text; never removes a document. Adds `pii_redactions` (int32, per document)."""

    name = "pii"
    added_fields: ClassVar[tuple[pa.Field, ...]] = (pa.field("pii_redactions", pa.int32(), nullable=True),)

    def __init__(self, settings: PiiSettings | None = None, **kwargs):
        settings = settings or PiiSettings()
        super().__init__(modalities=settings.modalities, **kwargs)
        self.redactor = Redactor(settings)

    def load(self) -> None:
        pii_digits.load()  # the digit-chain pass's tables and kernel

    rewrites_messages = True  # a chat document's messages are what trains: redact them too

    def rewrite_message(self, content: str) -> str:
        return self.redactor.redact(content)[0]

    def process(self, doc: Doc, counters: Counter[str]) -> Drop | None:
        doc.text, n = self.redactor.redact(doc.text, counters)
        doc.out["pii_redactions"] = n
        if n:
            counters["docs_with_pii"] += 1
        return None


def redact(text: str, types: Iterable[str] | None = None) -> str:
    """Convenience: `text` with every PII type (or the given ones) replaced by placeholders."""
    settings = PiiSettings(types=tuple(types)) if types is not None else PiiSettings()
    return Redactor(settings).redact(text)[0]
