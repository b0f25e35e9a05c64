"""The saved tokenizer as the tokenize stage uses it: the Rust tokenizer, its special tokens by role,
the chat template, and whether documents get BOS/EOS.

The tokenizer directory holds what `save_pretrained` writes (tokenizer.json, tokenizer_config.json,
chat_template.jinja: `AutoTokenizer.from_pretrained(dir)` loads it) plus `tokenizer_artifact.json`,
the roles and flags this platform needs and transformers has no place for (add_bos/add_eos, the
ChatML roles, which template was chosen and how its loss mask is found: `info.chat_template`,
`info.loss_mask`, absent for ChatML). Everything is read through `Storage`, so the directory may live on S3.

Two Rust tokenizers are kept. Chat templates write control tokens as text (`<|im_start|>`), so the
template path matches special tokens in text; document text is encoded with
`encode_special_tokens=True`, so a web page or source file that contains `<|endoftext|>` (tokenizer
code does) gets ordinary tokens for it, never a real EOS in the middle of a document.

Templates that read the clock (Llama 3.1 / 3.2 instruct: "Today Date: <date>" from
`strftime_now("%d %b %Y")` unless `date_string` is passed) would make the tokens depend on the day the
stage runs. The artifact carries a fixed date (`tokenizer.chat_template_date`, recorded as
`template_date`): `date_string` is passed to every rendering, and a template that calls `strftime_now`
anyway is rendered with a `strftime_now` macro bound to that date (`rendering_template`). The saved
`chat_template` stays the template as given, for transformers users.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

import regex
from tokenizers import Tokenizer

from platform_assets.storage import Storage

if TYPE_CHECKING:
    from platform_assets.tokenize.tiktoken_bpe import TiktokenChoice

TOKENIZER_FILE = "tokenizer.json"
ARTIFACT_FILE = "tokenizer_artifact.json"
ARTIFACT_FORMAT_VERSION = 1
ROLES = ("eos", "pad", "bos", "unk", "chat_start", "chat_end")
"""Special-token roles; eos and pad always have a token. chat_start and chat_end have one with the
ChatML template (and where another template writes tokens the vocabulary has), bos and unk may not."""
REQUIRED_ROLES = ("eos", "pad")
# transformers' names for the roles it knows: chat templates read them as `{{ eos_token }}` etc.
TEMPLATE_VARIABLES = {"eos": "eos_token", "pad": "pad_token", "bos": "bos_token", "unk": "unk_token"}
DEFAULT_TEMPLATE_DATE = dt.date(2024, 7, 26)
"""The day clock-reading templates render: "26 Jul 2024", the date transformers' own Llama 3.1 template
tests pass as `date_string` (any fixed day would do; this one matches those renderings)."""
DATE_STRING_FORMAT = "%d %b %Y"  # Llama 3.1 / 3.2's `strftime_now("%d %b %Y")`
_STRFTIME_CALL_RE = regex.compile(r"""\bstrftime_now\s*\(\s*(?:"([^"\\]*)"|'([^'\\]*)')\s*\)""")
_FIXED_DATES_VARIABLE = "fixed_clock_dates"
# Shadows transformers' strftime_now global (a template-level macro wins over a global): the day's
# rendering of each format the template writes, or a template error for a format it computes.
_FIXED_CLOCK_PRELUDE = (
    "{%- macro strftime_now(format) -%}"
    f"{{%- if format in {_FIXED_DATES_VARIABLE} -%}}{{{{- {_FIXED_DATES_VARIABLE}[format] -}}}}"
    "{%- else -%}{{- raise_exception('strftime_now(' ~ format ~ '): only a format written as a literal "
    "in the template can be rendered with the fixed tokenizer.chat_template_date') -}}{%- endif -%}"
    "{%- endmacro -%}"
)
# English names, not the C library's locale: the same bytes on every machine
_NAMES = {
    "%a": ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"),
    "%A": ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"),
    "%b": ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"),
    "%B": ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
           "November", "December"),
}


def format_date(day: dt.date, fmt: str) -> str:
    """`day.strftime(fmt)` with English day and month names whatever the process locale (time of day: 0:00)."""
    fixed = {"%%": "%", "%a": _NAMES["%a"][day.weekday()], "%A": _NAMES["%A"][day.weekday()],
             "%b": _NAMES["%b"][day.month - 1], "%B": _NAMES["%B"][day.month - 1]}
    midnight = dt.datetime(day.year, day.month, day.day)
    return "".join(fixed[p] if p in fixed else midnight.strftime(p) for p in regex.split(r"(%%|%[aAbB])", fmt))


@dataclass
class TokenizerArtifact:
    tokenizer: Tokenizer
    """Matches special tokens in text: the chat-template path."""
    special_tokens: dict[str, str]
    """Role -> token string, for the roles that have one (see ROLES)."""
    chat_template: str
    add_bos: bool
    add_eos: bool
    tokenizer_sha256: str = ""
    """sha256 of tokenizer.json as saved; empty until saved or loaded."""
    info: dict[str, Any] = field(default_factory=dict)
    """Provenance recorded at build time (source, algorithm, training documents and bytes)."""
    template_date: dt.date = DEFAULT_TEMPLATE_DATE
    """The day templates that read the clock render (`tokenizer.chat_template_date`)."""
    _tokenizer_json: str | None = field(default=None, repr=False, compare=False)
    """The JSON `tokenizer` was parsed from (from_files), reused for `text_tokenizer`."""

    def __post_init__(self) -> None:
        missing = [r for r in REQUIRED_ROLES if r not in self.special_tokens]
        if missing:
            raise ValueError(f"tokenizer artifact has no {', '.join(missing)} token")
        unknown = sorted(set(self.special_tokens) - set(ROLES))
        if unknown:
            raise ValueError(f"tokenizer artifact: unknown special-token roles {unknown} (known: {ROLES})")
        if self.add_bos and "bos" not in self.special_tokens:
            raise ValueError("add_bos is set but the tokenizer has no bos token")
        ids: dict[str, int] = {}
        for role, token in self.special_tokens.items():
            tid = self.tokenizer.token_to_id(token)
            if tid is None:
                raise ValueError(f"special token {role}={token!r} is not in the tokenizer's vocabulary")
            ids[role] = tid
        self.special_ids = ids
        # every special added token, longest first: a chat message containing one is refused
        # (see encode.py), so only the template can put a control token into a sequence
        self.control_tokens = tuple(sorted(
            (t.content for t in self.tokenizer.get_added_tokens_decoder().values() if t.special),
            key=lambda s: (-len(s), s),
        ))

    @cached_property
    def text_tokenizer(self) -> Tokenizer:
        """The document path's copy: special-token strings in the text are encoded as text. Built on
        first use (a parse of tokenizer.json, ~0.1 CPU-s for GPT-2's 3.5 MB): packing and the training
        job load the artifact for its ids and never encode, and from_files passes the JSON it read."""
        text = Tokenizer.from_str(self._tokenizer_json or self.tokenizer.to_str())
        text.encode_special_tokens = True
        return text

    @cached_property
    def document_tiktoken(self) -> TiktokenChoice:
        """tiktoken's encoding of `text_tokenizer`'s ids, or why there is none (tiktoken_bpe.py). Built
        on first use: checking GPT-2's 50,000 merges and building the encoding took ~0.6 CPU-s."""
        from platform_assets.tokenize.tiktoken_bpe import tiktoken_encoding
        return tiktoken_encoding(self.text_tokenizer, self._tokenizer_json)

    def document_encoder_choice(self, encoder: str) -> TiktokenChoice:
        """What encodes documents under the setting `encoder` (settings.TokenizeSettings.encoder):
        `document_tiktoken` for "auto", tokenizers (with that reason) for "tokenizers"."""
        from platform_assets.tokenize.tiktoken_bpe import TOKENIZERS_CHOSEN
        return self.document_tiktoken if encoder == "auto" else TOKENIZERS_CHOSEN

    @property
    def eos_id(self) -> int:
        return self.special_ids["eos"]

    @property
    def pad_id(self) -> int:
        return self.special_ids["pad"]

    @property
    def bos_id(self) -> int | None:
        return self.special_ids.get("bos")

    @property
    def vocab_size(self) -> int:
        """Ids run 0..vocab_size-1 (added tokens included): what an embedding table needs."""
        return self.tokenizer.get_vocab_size(with_added_tokens=True)

    def template_variables(self) -> dict[str, Any]:
        """What transformers passes to a chat template besides the messages (its special_tokens_map),
        plus `date_string` (the fixed day, as Llama 3.1 writes it) and, for a template that calls
        `strftime_now`, the day's rendering of each format it writes (see `rendering_template`)."""
        variables: dict[str, Any] = {TEMPLATE_VARIABLES[r]: t for r, t in self.special_tokens.items()
                                     if r in TEMPLATE_VARIABLES}
        variables["date_string"] = format_date(self.template_date, DATE_STRING_FORMAT)
        formats = sorted({a or b for a, b in _STRFTIME_CALL_RE.findall(self.chat_template)})
        if "strftime_now" in self.chat_template:
            variables[_FIXED_DATES_VARIABLE] = {f: format_date(self.template_date, f) for f in formats}
        return variables

    @cached_property
    def rendering_template(self) -> str:
        """The template to render with (`template_variables()`): `chat_template`, behind a `strftime_now`
        bound to `template_date` when it calls one. It renders no text of its own, so outputs and
        generation spans are those of `chat_template` on that day."""
        if "strftime_now" not in self.chat_template:
            return self.chat_template
        return _FIXED_CLOCK_PRELUDE + self.chat_template

    def to_json(self) -> dict[str, Any]:
        return {
            "format_version": ARTIFACT_FORMAT_VERSION,
            "special_tokens": {r: {"token": t, "id": self.special_ids[r]}
                               for r, t in sorted(self.special_tokens.items())},
            "add_bos": self.add_bos,
            "add_eos": self.add_eos,
            "vocab_size": self.vocab_size,
            "chat_template": self.chat_template,
            "tokenizer_sha256": self.tokenizer_sha256,
            "info": self.info,
            "template_date": self.template_date.isoformat(),
        }

    @classmethod
    def from_files(cls, tokenizer_json: bytes, artifact_json: Mapping[str, Any]) -> TokenizerArtifact:
        version = artifact_json.get("format_version")
        if version != ARTIFACT_FORMAT_VERSION:
            raise ValueError(f"{ARTIFACT_FILE}: format_version {version!r}, this code reads {ARTIFACT_FORMAT_VERSION}")
        sha = hashlib.sha256(tokenizer_json).hexdigest()
        recorded = artifact_json.get("tokenizer_sha256")
        if recorded and recorded != sha:
            raise ValueError(f"{TOKENIZER_FILE} has sha256 {sha[:12]}..., {ARTIFACT_FILE} records {recorded[:12]}...: "
                             "the directory was modified after it was built")
        text = tokenizer_json.decode("utf-8")
        art = cls(
            tokenizer=Tokenizer.from_str(text),
            special_tokens={r: v["token"] for r, v in artifact_json["special_tokens"].items()},
            chat_template=artifact_json["chat_template"],
            add_bos=bool(artifact_json["add_bos"]),
            add_eos=bool(artifact_json["add_eos"]),
            tokenizer_sha256=sha,
            info=dict(artifact_json.get("info", {})),
            # absent: written before the setting existed, when templates were given no date_string
            template_date=dt.date.fromisoformat(artifact_json.get("template_date", DEFAULT_TEMPLATE_DATE.isoformat())),
            _tokenizer_json=text,
        )
        for role, v in artifact_json["special_tokens"].items():
            if art.special_ids[role] != v["id"]:
                raise ValueError(f"{ARTIFACT_FILE}: {role} {v['token']!r} recorded as id {v['id']}, "
                                 f"the tokenizer gives {art.special_ids[role]}")
        return art

    @classmethod
    def load(cls, storage: Storage, rel: str) -> TokenizerArtifact:
        """The tokenizer written by the `tokenizer` stage under `rel`."""
        if not storage.exists(f"{rel}/{ARTIFACT_FILE}"):
            raise FileNotFoundError(f"no tokenizer at {storage.uri(rel)} (missing {ARTIFACT_FILE}): "
                                    "materialize the tokenizer first")
        return cls.from_files(storage.read_bytes(f"{rel}/{TOKENIZER_FILE}"),
                              json.loads(storage.read_bytes(f"{rel}/{ARTIFACT_FILE}")))
