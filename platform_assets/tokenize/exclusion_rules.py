"""Why the tokenize stage dropped a document: the `rule` column of its `_exclusions.parquet`.

Stable strings (users `GROUP BY rule` in DuckDB), `tokenize.` + the check, like cleaning's
`<step>.<check>`. The `value` column says what was wrong and where ("message 2: role 'bot'").
"""

from __future__ import annotations

from platform_assets.contracts import exclusions_schema

# The shared exclusion columns; `bytes` is the document's UTF-8 text size.
EXCLUSIONS_SCHEMA = exclusions_schema("tokenize")


class TokenizeRule:
    META_NOT_JSON = "tokenize.meta_not_json"
    """meta mentions "messages" but is not a JSON object."""
    MESSAGES_NOT_A_LIST = "tokenize.messages_not_a_list"
    EMPTY_CONVERSATION = "tokenize.empty_conversation"
    MESSAGE_NOT_AN_OBJECT = "tokenize.message_not_an_object"
    UNKNOWN_ROLE = "tokenize.unknown_role"
    MISSING_CONTENT = "tokenize.missing_content"
    """A message without a string `content`."""
    CONTROL_TOKEN_IN_CONTENT = "tokenize.control_token_in_content"
    """A message's text contains a special token string (`<|im_end|>`): encoded as a token it would
    end the turn early, encoded as text it would not mean what the author of the data meant."""
    CHAT_TEMPLATE_ERROR = "tokenize.chat_template_error"
    """The chat template raised (e.g. a custom template's `raise_exception` on a role order)."""
    CHAT_TURNS_NOT_MASKABLE = "tokenize.chat_turns_not_maskable"
    """A template without `{% generation %}` blocks renders this conversation in a way its assistant
    turns cannot be found exactly from rendered prefixes (chat_turn_spans.py says which check failed)."""
    NO_LOSS_TOKENS = "tokenize.no_loss_tokens"
    """A chat document with no assistant token left (no assistant message, or truncation cut them)."""
    NO_TOKENS = "tokenize.no_tokens"
    """A plain-text document whose text encodes to no token (empty): a row of only BOS/EOS would
    teach that documents may be empty."""
    MISSING_TEXT = "tokenize.missing_text"
    """A plain-text document whose text is null."""

    @classmethod
    def all(cls) -> list[str]:
        return sorted(v for k, v in vars(cls).items() if k.isupper())
