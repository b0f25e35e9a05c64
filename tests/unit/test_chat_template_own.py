"""A pretrained tokenizer keeps its own chat template and vocabulary (issue #17), and the loss mask of its
chat documents equals transformers' `apply_chat_template(return_assistant_tokens_mask=True)` token for
token: directly for a template with `{% generation %}` blocks, and, for one without, against the same
template with the blocks added (the mask then comes from rendered prefixes, chat_turn_spans.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
from chat_template_tokenizers import LLAMA, QWEN25, STYLES, Style, bpe, save_pretrained_dir

from platform_assets.contracts import IOSettings
from platform_assets.parquet_parts import PartWriter, read_batches
from platform_assets.storage import Storage
from platform_assets.tokenize.chat_template import chatml_template, render_chat
from platform_assets.tokenize.encode import DocumentEncoder
from platform_assets.tokenize.exclusion_rules import TokenizeRule
from platform_assets.tokenize.settings import TokenizerSettings, TokenizeSettings
from platform_assets.tokenize.stage import build_tokenizer, tokenize_outputs
from platform_assets.tokenize.tokenizer_artifact import TokenizerArtifact
from platform_assets.tokenize.tokenizer_build import (
    load_pretrained_with_template,
    make_artifact,
    sanity_report,
    save_artifact,
)


def msgs(*turns: tuple[str, str]) -> list[dict[str, str]]:
    return [{"role": r, "content": c} for r, c in turns]


CONVERSATIONS = [
    msgs(("system", "You are a helpful assistant."), ("user", "What is two plus two?"),
         ("assistant", "Two plus two is four."), ("user", "Write a short poem about the sea."),
         ("assistant", "The sea is wide\nand deep and blue.")),
    msgs(("user", "Hello!"), ("assistant", "Hello! How can I help you today?"), ("user", "Thanks a lot."),
         ("assistant", "You are welcome.")),
    msgs(("system", "Be terse."), ("user", "Explain tokenizers in one line."),
         ("assistant", "A tokenizer maps text to ids: 日本語 too.")),
    msgs(("user", "Code?"), ("assistant", "def add(a, b):\n    return a + b")),
]


def batch(conversations: list[list[dict[str, str]]]) -> pa.RecordBatch:
    n = len(conversations)
    return pa.RecordBatch.from_pydict({
        "id": [f"c{i}" for i in range(n)], "source": ["chat"] * n, "split": ["train"] * n,
        "text": pa.array(["plain rendering, ignored"] * n, pa.large_string()),
        "meta": [json.dumps({"messages": m}) for m in conversations],
    })


def vocab_of(specials: list[str]) -> int:
    """Ids of the tiny tokenizer before anything could add to it (training is deterministic)."""
    return bpe(specials).get_vocab_size(with_added_tokens=True)


def own_artifact(path: Path, **settings) -> TokenizerArtifact:
    tok, declared, own = load_pretrained_with_template(str(path))
    return make_artifact(tok, TokenizerSettings(source="pretrained", path=str(path), **settings), declared,
                         own_template=own)


@pytest.fixture(params=[(s, marked) for s in STYLES for marked in (False, True)],
                ids=lambda p: f"{p[0].name}-{'marked' if p[1] else 'unmarked'}")
def pretrained(request, tmp_path: Path) -> tuple[Style, bool, Path]:
    style, marked = request.param
    template = style.marked if marked else style.template
    return style, marked, save_pretrained_dir(tmp_path / "pretrained", style, template)


def test_own_template_is_kept_and_no_token_is_added(pretrained, tmp_path: Path):
    from transformers import AutoTokenizer

    style, marked, path = pretrained
    hf = AutoTokenizer.from_pretrained(str(path))
    art = own_artifact(path)
    assert art.chat_template == hf.chat_template == (style.marked if marked else style.template)
    assert art.vocab_size == len(hf) == vocab_of(style.specials) and "added_tokens" not in art.info
    assert art.info["chat_template"] == "own"
    assert art.info["loss_mask"] == ("generation_blocks" if marked else "rendered_prefixes")
    # ChatML's roles only where the template writes them (Qwen's), never added (Llama's)
    chat_roles = {r: art.special_tokens.get(r) for r in ("chat_start", "chat_end")}
    assert chat_roles == ({"chat_start": "<|im_start|>", "chat_end": "<|im_end|>"} if style is QWEN25
                          else {"chat_start": None, "chat_end": None})
    assert sanity_report(art, [("a", "Hello! How can I help you today?")]).ok

    save_artifact(art, tmp_path / "saved")
    saved = AutoTokenizer.from_pretrained(str(tmp_path / "saved"))
    assert len(saved) == len(hf) and saved.get_vocab() == hf.get_vocab()
    for conv in CONVERSATIONS:
        text = hf.apply_chat_template(conv, tokenize=False)
        assert render_chat(art.chat_template, conv, art.template_variables(), art.control_tokens).text == text
        assert saved.apply_chat_template(conv, tokenize=False) == text
        assert saved.apply_chat_template(conv[:2], tokenize=False, add_generation_prompt=True) == \
            hf.apply_chat_template(conv[:2], tokenize=False, add_generation_prompt=True)


def test_masks_equal_transformers_token_for_token(pretrained):
    from transformers import AutoTokenizer

    style, marked, path = pretrained
    hf = AutoTokenizer.from_pretrained(str(path))
    art = own_artifact(path)
    out = DocumentEncoder(art, TokenizeSettings()).encode(batch(CONVERSATIONS))
    rows = out.batch.to_pylist()
    assert out.exclusions.num_rows == 0 and len(rows) == len(CONVERSATIONS)
    for conv, row in zip(CONVERSATIONS, rows, strict=True):
        # the reference: transformers' mask of the same template with generation blocks around each answer
        ref = hf.apply_chat_template(conv, chat_template=style.marked, tokenize=True, return_dict=True,
                                     return_assistant_tokens_mask=True)
        assert row["input_ids"] == ref["input_ids"] + [art.eos_id]
        assert row["loss_mask"] == ref["assistant_masks"] + [0]
        end_of_turn = "<|eot_id|>" if style is LLAMA else "<|im_end|>"
        answers = "".join(m["content"] + end_of_turn for m in conv if m["role"] == "assistant")
        masked = [i for i, m in zip(row["input_ids"], row["loss_mask"], strict=True) if m]
        assert hf.decode(masked) == answers and row["loss_tokens"] == len(masked)
        if not marked:  # why the prefixes are needed: transformers marks nothing without generation blocks
            plain = hf.apply_chat_template(conv, tokenize=True, return_dict=True, return_assistant_tokens_mask=True)
            assert plain["input_ids"] == ref["input_ids"] and not any(plain["assistant_masks"])


def test_an_instruct_tokenizers_eos_can_be_set_to_the_end_of_text(tmp_path: Path):
    """Qwen2.5-Instruct declares eos = <|im_end|>, its end of turn: as the boundary of packed documents it
    would blur turns and documents (the sanity check says so) until the config names the end of text."""
    from transformers import PreTrainedTokenizerFast

    path = tmp_path / "instruct"
    PreTrainedTokenizerFast(tokenizer_object=bpe(QWEN25.specials), chat_template=QWEN25.template,
                            eos_token="<|im_end|>", pad_token="<|endoftext|>").save_pretrained(path)
    declared = own_artifact(path)
    assert declared.special_tokens["eos"] == "<|im_end|>"
    assert sanity_report(declared, []).special_token_problems == [
        f"chat_end shares id {declared.eos_id} with eos"]
    art = own_artifact(path, special_tokens={"eos": "<|endoftext|>"})
    assert art.special_tokens["eos"] == "<|endoftext|>" and sanity_report(art, []).ok
    assert art.vocab_size == declared.vocab_size == vocab_of(QWEN25.specials)
    with pytest.raises(ValueError, match=r"no eos token '</s>' \(tokenizer.special_tokens.eos\)"):
        own_artifact(path, special_tokens={"eos": "</s>"})


# -- templates the rendered prefixes cannot mask ---------------------------------------------------------------
LLAMA_TURN = "{{ '<|start_header_id|>' + m['role'] + '<|end_header_id|>\n\n' + m['content'] + '<|eot_id|>' }}"
GEN_PROMPT = "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"


@pytest.mark.parametrize(("template", "message"), [
    ("{% for m in messages %}" + LLAMA_TURN + "{% endfor %}",
     "add_generation_prompt=True does not append a generation prompt"),
    # prompts for a `model` turn, renders answers as `assistant` turns
    ("{% for m in messages %}" + LLAMA_TURN + "{% endfor %}"
     "{% if add_generation_prompt %}{{ '<|start_header_id|>model<|end_header_id|>\n\n' }}{% endif %}",
     "does not start with the generation prompt"),
    # Qwen3-style: only the last answer carries a thinking block, earlier ones are rewritten without it
    ("{% for m in messages %}{{ '<|start_header_id|>' + m['role'] + '<|end_header_id|>\n\n' }}"
     "{% if m['role'] == 'assistant' and loop.last %}{{ '<think></think>' }}{% endif %}"
     "{{ m['content'] + '<|eot_id|>' }}{% endfor %}" + GEN_PROMPT,
     "a later message changes how this turn is rendered"),
    ("{% for m in messages %}{{ m['role'] + ': ' + m['content'] + '\n\n' }}{% endfor %}"
     "{% if add_generation_prompt %}{{ 'assistant: ' }}{% endif %}",
     "the turn ends with no special token"),
    ("{% for m in messages %}" + LLAMA_TURN + "{{ '--\n' }}{% endfor %}" + GEN_PROMPT,
     "text follows the turn's last special token: '--\\\\n'"),
])
def test_a_template_that_cannot_be_masked_exactly_is_refused(tmp_path: Path, template: str, message: str):
    path = save_pretrained_dir(tmp_path / "pretrained", LLAMA, template)
    with pytest.raises(ValueError, match=r"cannot be found exactly by rendering prefixes .*" + message):
        own_artifact(path)
    with pytest.raises(ValueError, match=message):  # the same as a custom template
        own_artifact(save_pretrained_dir(tmp_path / "bare", LLAMA, None), chat_template=template)


def test_a_conversation_the_template_rewrites_is_excluded(tmp_path: Path):
    """The system prompt goes into the last user message (as Mistral's templates do): fine for the build's
    probe and for conversations without one; with one, turn 2 is rendered differently once it is answered."""
    template = (
        "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{% set sys = messages[0]['content'] + ' ' %}"
        "{% set turns = messages[1:] %}{% else %}{% set sys = '' %}{% set turns = messages %}{% endif %}"
        "{% for m in turns %}{{ '<|start_header_id|>' + m['role'] + '<|end_header_id|>\n\n' }}"
        "{% if m['role'] == 'user' and loop.last %}{{ sys }}{% endif %}{{ m['content'] + '<|eot_id|>' }}"
        "{% endfor %}" + GEN_PROMPT
    )
    art = own_artifact(save_pretrained_dir(tmp_path / "pretrained", LLAMA, template))
    out = DocumentEncoder(art).encode(batch(CONVERSATIONS))
    assert [r["id"] for r in out.batch.to_pylist()] == ["c1", "c3"]  # the ones without a system message
    excluded = out.exclusions.to_pylist()
    assert [(e["id"], e["rule"]) for e in excluded] == [("c0", TokenizeRule.CHAT_TURNS_NOT_MASKABLE),
                                                        ("c2", TokenizeRule.CHAT_TURNS_NOT_MASKABLE)]
    assert excluded[0]["value"].startswith("messages[2] (assistant): the rendering with this message does not start")


# -- the ChatML path and the other choices -------------------------------------------------------------------
def test_a_tokenizer_without_a_template_gets_chatml_and_its_two_tokens(tmp_path: Path):
    bare = tmp_path / "tokenizer.json"
    bpe(["<|endoftext|>"]).save(str(bare))
    tok, declared, own = load_pretrained_with_template(str(bare))
    assert own is None
    art = make_artifact(tok, TokenizerSettings(source="pretrained", path=str(bare)), declared, own_template=own)
    assert art.chat_template == chatml_template() and art.vocab_size == vocab_of(["<|endoftext|>"]) + 2
    assert art.info["added_tokens"] == ["<|im_start|>", "<|im_end|>"] and "chat_template" not in art.info
    with pytest.raises(ValueError, match="'own' but the tokenizer at .* has no chat template"):
        make_artifact(tok, TokenizerSettings(source="pretrained", path=str(bare), chat_template="own"), declared)


def test_chatml_replaces_the_own_template_only_when_asked(tmp_path: Path):
    path = save_pretrained_dir(tmp_path / "pretrained", LLAMA, LLAMA.template)
    art = own_artifact(path, chat_template="chatml")
    assert art.chat_template == chatml_template() and art.vocab_size == vocab_of(LLAMA.specials) + 2
    assert art.info["added_tokens"] == ["<|im_start|>", "<|im_end|>"]


def test_a_template_file_and_its_errors(tmp_path: Path):
    path = save_pretrained_dir(tmp_path / "pretrained", LLAMA, None)
    (tmp_path / "llama3.jinja").write_text(LLAMA.marked)
    art = own_artifact(path, chat_template=str(tmp_path / "llama3.jinja"))
    assert art.chat_template == LLAMA.marked and art.info["chat_template"] == "custom"
    assert art.info["loss_mask"] == "generation_blocks" and art.vocab_size == vocab_of(LLAMA.specials)
    with pytest.raises(FileNotFoundError, match="is not 'own', 'chatml', a Jinja template"):
        own_artifact(path, chat_template=str(tmp_path / "missing.jinja"))


def test_the_config_resolves_a_template_file_against_its_folder(tmp_path: Path):
    from platform_assets.config import parse_config

    def settings(template: str) -> TokenizerSettings:
        raw = {"sources": [{"name": "web", "format": "jsonl", "path": "web"}],
               "tokenizer": {"source": "pretrained", "path": "tok", "chat_template": template}}
        return parse_config(raw, tmp_path).tokenizer_settings()

    assert settings("templates/llama3.jinja").chat_template == str(tmp_path / "templates" / "llama3.jinja")
    assert settings("own").chat_template == "own" and settings("chatml").chat_template == "chatml"
    assert settings(LLAMA.template).chat_template == LLAMA.template  # a Jinja string is not a path


# -- through the stages --------------------------------------------------------------------------------------
def test_the_stages_keep_the_own_template(storage: Storage, tmp_path: Path):
    from transformers import AutoTokenizer

    path = save_pretrained_dir(tmp_path / "pretrained", QWEN25, QWEN25.template)
    schema = pa.schema([("id", pa.string()), ("source", pa.string()), ("text", pa.large_string()),
                        ("meta", pa.string()), ("split", pa.string())])
    with storage.staged_dir("dataset_splits/_all") as staged, PartWriter(staged, schema) as writer:
        writer.write(pa.Table.from_batches([batch(CONVERSATIONS)]).select(schema.names).cast(schema))
    settings = TokenizerSettings(source="pretrained", path=str(path))  # chat_template: null -> own
    result = build_tokenizer(storage, "dataset_splits/_all", "tokenizer/_all", settings)
    hf = AutoTokenizer.from_pretrained(str(path))
    assert result.vocab_size == len(hf) and result.sanity.ok, result.sanity.to_dict()
    tokenized = tokenize_outputs(storage, "dataset_splits/_all", "tokenizer/_all", "tokenized_documents/_all",
                                 TokenizeSettings(), IOSettings(batch_rows=2))
    rows = [r for b in read_batches(storage, "tokenized_documents/_all/train/chat") for r in b.to_pylist()]
    assert len(rows) == len(CONVERSATIONS) and tokenized.excluded == 0
    for conv, row in zip(CONVERSATIONS, rows, strict=True):
        ref = hf.apply_chat_template(conv, chat_template=QWEN25.marked, tokenize=True, return_dict=True,
                                     return_assistant_tokens_mask=True)
        assert row["input_ids"] == ref["input_ids"] + [hf.eos_token_id]
        assert row["loss_mask"] == ref["assistant_masks"] + [0]
