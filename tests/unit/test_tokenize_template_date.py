"""Chat templates that read the clock (Llama 3.1/3.2 write "Today Date: <date>") render a fixed date:
same inputs and config give the same tokens whatever day the stage runs."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest
from chat_template_tokenizers import LLAMA, save_pretrained_dir
from test_chat_template_own import CONVERSATIONS, batch, own_artifact

from platform_assets.tokenize.chat_template import render_chat
from platform_assets.tokenize.encode import DocumentEncoder
from platform_assets.tokenize.settings import TokenizerSettings
from platform_assets.tokenize.tokenizer_artifact import DEFAULT_TEMPLATE_DATE, TokenizerArtifact
from platform_assets.tokenize.tokenizer_build import saved_files

_TURNS = (
    "{%- for message in messages %}"
    "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] | trim"
    " + '<|eot_id|>' }}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}"
)
# Llama 3.1's own pattern: the clock only when the caller passes no date_string
GUARDED = (
    "{{- bos_token }}"
    '{%- if not date_string is defined %}{%- set date_string = strftime_now("%d %b %Y") %}{%- endif %}'
    "{{- '<|start_header_id|>system<|end_header_id|>\\n\\nToday Date: ' + date_string + '<|eot_id|>' }}" + _TURNS
)
# a template that calls the clock whatever it is passed
UNGUARDED = (
    "{{- bos_token }}{{- '<|start_header_id|>system<|end_header_id|>\\n\\nToday: ' + strftime_now('%A %d %B %Y')"
    " + ' (' + strftime_now(\"%b\") + ')<|eot_id|>' }}" + _TURNS
)
CHATS = [c for c in CONVERSATIONS if c[0]["role"] != "system"]  # the templates above drop no system message


class _Clock:
    """Sets transformers' clock (its strftime_now reads datetime.now()) to a given day."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch):
        self.monkeypatch = monkeypatch

    def set(self, day: dt.datetime) -> None:
        import transformers.utils.chat_template_utils as ctu

        class Frozen(dt.datetime):
            @classmethod
            def now(cls, tz=None):
                return day

        self.monkeypatch.setattr(ctu, "datetime", Frozen)


def _artifact(tmp_path: Path, template: str, **settings) -> TokenizerArtifact:
    path = tmp_path / "llama"
    if not path.exists():
        save_pretrained_dir(path, LLAMA, None)
    return own_artifact(path, chat_template=template, **settings)


@pytest.mark.parametrize("template", [GUARDED, UNGUARDED], ids=["date_string-guard", "strftime_now"])
def test_tokens_do_not_depend_on_the_day_the_stage_runs(tmp_path: Path, monkeypatch, template: str):
    clock = _Clock(monkeypatch)
    outputs, texts = [], []
    for day in (dt.datetime(2025, 3, 1, 9, 30), dt.datetime(2031, 12, 24, 23, 59)):
        clock.set(day)
        art = _artifact(tmp_path, template)
        out = DocumentEncoder(art).encode(batch(CHATS))
        assert out.exclusions.num_rows == 0 and out.batch.num_rows == len(CHATS)
        outputs.append(out.batch.to_pylist())
        texts.append(render_chat(art.rendering_template, CHATS[0], art.template_variables(), art.control_tokens).text)
    assert outputs[0] == outputs[1] and texts[0] == texts[1]
    expected = "Today Date: 26 Jul 2024" if template == GUARDED else "Today: Friday 26 July 2024 (Jul)"
    assert expected in texts[0]


def test_the_date_is_a_setting_recorded_with_the_tokenizer(tmp_path: Path):
    art = _artifact(tmp_path, UNGUARDED, chat_template_date=dt.date(2025, 1, 2))
    assert art.template_variables()["date_string"] == "02 Jan 2025"
    text = render_chat(art.rendering_template, CHATS[0], art.template_variables(), art.control_tokens).text
    assert "Today: Thursday 02 January 2025 (Jan)" in text
    # saved and loaded back: the same date, the template itself unchanged (transformers users get it as is)
    files = saved_files(art)
    recorded = json.loads(files["tokenizer_artifact.json"])
    assert recorded["template_date"] == "2025-01-02" and recorded["chat_template"] == UNGUARDED
    loaded = TokenizerArtifact.from_files(files["tokenizer.json"], recorded)
    assert loaded.template_date == dt.date(2025, 1, 2) and loaded.rendering_template == art.rendering_template
    # an artifact written before the setting existed reads as the default date
    del recorded["template_date"]
    assert TokenizerArtifact.from_files(files["tokenizer.json"], recorded).template_date == DEFAULT_TEMPLATE_DATE
    assert TokenizerSettings(chat_template_date="2024-07-26").chat_template_date == DEFAULT_TEMPLATE_DATE


def test_a_template_without_the_clock_is_rendered_as_it_is(tmp_path: Path):
    art = _artifact(tmp_path, LLAMA.marked)
    assert art.rendering_template == art.chat_template == LLAMA.marked


def test_a_format_that_is_not_a_literal_is_a_template_error(tmp_path: Path):
    template = "{%- set f = '%Y' %}{{- bos_token + strftime_now(f) }}" + _TURNS
    with pytest.raises(Exception, match="strftime_now"):
        art = TokenizerArtifact(_artifact(tmp_path, LLAMA.marked).tokenizer, {"eos": "<|end_of_text|>",
                                "pad": "<|end_of_text|>", "bos": "<|begin_of_text|>"}, template, False, True)
        render_chat(art.rendering_template, CHATS[0], art.template_variables(), art.control_tokens)
