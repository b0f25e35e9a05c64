"""Text-rewriting cleaning steps also rewrite a chat document's messages: tokenization trains on
`meta.messages`, not on the plain `text` rendering, so a redaction must reach both."""

import orjson
import pyarrow as pa
from document_batches import documents_batch

from platform_assets.cleaning.normalize import Normalize
from platform_assets.cleaning.pii import PiiRedact
from platform_assets.cleaning.settings import PiiSettings
from platform_assets.ingest.chat import render_chat_text
from platform_assets.ingest.readers.fields import meta_json


def _chat_meta(messages: list[dict], **other) -> str:
    return meta_json({**other, "messages": messages}, None, None)


def _batch(texts: list[str], metas: list[str | None]) -> pa.RecordBatch:
    b = documents_batch(texts)
    return b.set_column(b.schema.get_field_index("meta"), b.schema.field("meta"), pa.array(metas, pa.string()))


def test_pii_redaction_reaches_the_messages_that_train():
    messages = [
        {"role": "user", "content": "Mail me at jane.doe@example.com please"},
        {"role": "assistant", "content": "Sure, I will write to jane.doe@example.com or call +44 20 7946 0958."},
        {"role": "user", "content": "thanks"},
    ]
    chat = _chat_meta(messages, lang="en")
    plain_meta = meta_json({"url": "https://example.org/a@b"}, None, None)
    not_json = '{"messages": [oops'
    batch = _batch(
        [render_chat_text(messages), "contact bob@example.com", "see messages", "a@example.com"],
        [chat, plain_meta, not_json, None],
    )
    result = PiiRedact()(batch)
    metas = result.kept.column("meta").to_pylist()
    redacted = orjson.loads(metas[0])
    assert [m["content"] for m in redacted["messages"]] == [
        "Mail me at <EMAIL> please",
        "Sure, I will write to <EMAIL> or call <PHONE>.",
        "thanks",
    ]
    assert redacted["lang"] == "en" and [m["role"] for m in redacted["messages"]] == ["user", "assistant", "user"]
    assert metas[0] == meta_json(redacted, None, None)  # the same key order ingest writes
    assert metas[1:] == [plain_meta, not_json, None]  # other documents' meta untouched, byte for byte
    assert "jane.doe" not in result.kept.column("text")[0].as_py()
    assert result.stats.counters["chat_messages_rewritten"] == 2
    # text redactions are counted once: the messages mirror the text, they do not add to EMAIL
    assert result.stats.counters["EMAIL"] == 4 and result.kept.column("pii_redactions").to_pylist() == [3, 1, 0, 1]


def test_normalisation_reaches_the_messages_and_clean_chats_are_left_alone():
    dirty = [{"role": "user", "content": "caf\u0065\u0301\u0007 ok"}, {"role": "assistant", "content": "fine"}]
    clean = [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "hi"}]
    batch = _batch([render_chat_text(dirty), render_chat_text(clean)], [_chat_meta(dirty), _chat_meta(clean)])
    result = Normalize()(batch)
    metas = result.kept.column("meta").to_pylist()
    assert orjson.loads(metas[0])["messages"][0]["content"] == "caf\u00e9 ok"
    assert metas[1] == _chat_meta(clean)
    assert result.stats.counters["chat_messages_rewritten"] == 1


def test_chats_outside_a_steps_scope_are_not_rewritten():
    messages = [{"role": "user", "content": "x@example.com"}, {"role": "assistant", "content": "ok"}]
    batch = _batch([render_chat_text(messages)], [_chat_meta(messages)])
    batch = batch.set_column(batch.schema.get_field_index("modality"), "modality", pa.array(["code"]))
    result = PiiRedact()(batch)  # by default, every modality
    assert "<EMAIL>" in result.kept.column("meta")[0].as_py()
    scoped = PiiRedact(PiiSettings(modalities=("text",)))(batch)  # a code document: skipped whole
    assert scoped.kept.column("meta")[0].as_py() == _chat_meta(messages) and scoped.stats.skipped == 1
