"""cleaned_documents with per-source recipes: an SFT source and a web source in one run, each judged by
its own recipe and its own gate bounds."""

import gzip
import json
from pathlib import Path

import dagster as dg
import pyarrow.parquet as pq
import yaml

from platform_assets.cleaning.pipeline import build_pipeline
from platform_assets.config import load_config
from platform_assets.defs.cleaned_documents.assets import cleaned_documents
from platform_assets.defs.raw_documents.assets import raw_documents
from platform_assets.defs.raw_documents.partitions import source_partitions
from platform_assets.defs.resources import PipelineResource

PAIRS = [
    ("What is the capital of France?", "The capital of France is Paris, on the Seine."),
    ("Name three primary colours.", "The three primary colours are red, yellow and blue."),
    ("Give me a synonym for the word happy.", "A common synonym for happy is joyful, as in a joyful day."),
    ("How many days are there in a leap year?", "A leap year has 366 days instead of the usual 365."),
]


def _english_pages() -> list[str]:
    seed = Path(__file__).resolve().parents[1] / "sample_data" / "real_docs.jsonl.gz"
    with gzip.open(seed, "rt") as f:
        return [d["text"] for d in map(json.loads, f) if d["source"] == "debian-handbook" and d["lang"] == "en"]


def _write_jsonl(path: Path, records: list[dict]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return str(path)


def _pipeline(tmp_path, chat_records: list[dict], web_texts: list[str], **extra) -> PipelineResource:
    (tmp_path / "words.txt").write_text("zorblax\n")
    cfg = {
        "storage": {"root": str(tmp_path / "out")},
        "sources": [
            {"name": "chat", "format": "jsonl", "recipe": "sft",
             "path": _write_jsonl(tmp_path / "chat.jsonl", chat_records),
             "chat": {"prompt_field": "instruction", "response_field": "output"}},
            {"name": "web", "format": "jsonl",  # no recipe: the global block, as before recipes
             "path": _write_jsonl(tmp_path / "web.jsonl", [{"text": t} for t in web_texts])},
        ],
        "cleaning": {"language": {"allow": ["en"]}, "blocklist": {"path": "words.txt"}},
        **extra,
    }
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(cfg))
    return PipelineResource(config_path=str(tmp_path / "p.yaml"))


def _run_sources(pipeline: PipelineResource, sources: list[str]) -> dict[str, dg.ExecuteInProcessResult]:
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions(source_partitions.name, sources)
        return {s: dg.materialize([raw_documents, cleaned_documents], partition_key=s, instance=instance,
                                  resources={"pipeline": pipeline}, raise_on_error=False) for s in sources}


def _checks(result) -> dict[str, dg.AssetCheckEvaluation]:
    return {e.check_name: e for e in result.get_asset_check_evaluations() if e.asset_key.path == ["cleaned_documents"]}


def _metadata(result) -> dict:
    return result.asset_materializations_for_node("cleaned_documents")[0].metadata


def _pair_record(prompt: str, response: str) -> dict:
    return {"instruction": prompt, "output": response}


def test_sft_source_passes_its_recipe_while_the_web_source_keeps_web_rules(tmp_path):
    chat = [_pair_record(p, r) for p, r in PAIRS]
    chat += [
        _pair_record("Say hello.", "\u200b\u200b"),  # blank once normalised: ingest's check sees a character
        _pair_record("What colour is the sky on a clear day?", "What colour is the sky on a clear day?"),
        _pair_record("Explain what a compiler does.", "..."),
    ]
    pages = _english_pages()[:5]
    # the same ordinary pairs as plain web documents, beside real handbook pages
    web = [f"{p}\n\n{r}" for p, r in PAIRS[:3]] + pages
    pipeline = _pipeline(tmp_path, chat, web)
    results = _run_sources(pipeline, ["chat", "web"])
    out = tmp_path / "out" / "cleaned_documents"

    chat_result = results["chat"]
    assert chat_result.success and all(c.passed for c in _checks(chat_result).values())
    md = _metadata(chat_result)
    assert md["recipe"].value == "sft" and (md["docs_in"].value, md["rows"].value) == (7, 4)
    kept = pq.read_table(out / "chat")
    assert [json.loads(m)["messages"][1]["content"] for m in kept["meta"].to_pylist()] == [r for _, r in PAIRS]
    excluded = {e["rule"]: e["value"] for e in pq.read_table(out / "chat" / "_exclusions.parquet").to_pylist()}
    assert excluded == {"conversation.empty_turn": "turn 2 (assistant)",
                        "conversation.duplicate_turn": "turn 2 repeats turn 1",
                        "conversation.response_too_short": "0 < 1 (turn 2)"}
    gate = _checks(chat_result)["removal_rate_within_bounds"]
    assert gate.metadata["recipe"].value == "sft" and gate.metadata["max_removal_rate"].value == 0.5

    web_result = results["web"]
    assert web_result.success
    md = _metadata(web_result)
    assert md["recipe"].value == "web"
    raw = pq.read_table(tmp_path / "out" / "raw_documents" / "web")
    pair_ids = {i for i, t in zip(raw["id"].to_pylist(), raw["text"].to_pylist(), strict=True)
                if t.startswith(tuple(p for p, _ in PAIRS))}
    web_excluded = {e["id"]: e["rule"] for e in pq.read_table(out / "web" / "_exclusions.parquet").to_pylist()}
    assert len(pair_ids) == 3 and pair_ids <= set(web_excluded)  # the pairs fall to the prose rules here
    assert {web_excluded[i].split(".")[0] for i in pair_ids} <= {"gopher_quality", "gopher_repetition"}
    assert _checks(web_result)["removal_rate_within_bounds"].metadata["max_removal_rate"].value == 0.9

    # the web source is cleaned exactly as the global block cleans it (what it was before recipes)
    expected, _ = build_pipeline(load_config(tmp_path / "p.yaml").cleaning_settings()).process_table(raw)
    actual = pq.read_table(out / "web")
    assert actual.num_rows >= 3 and actual["id"].to_pylist() == expected["id"].to_pylist()
    assert actual["text"].to_pylist() == expected["text"].to_pylist()


def test_the_sft_gate_blocks_a_source_that_loses_over_half_its_records(tmp_path):
    chat = [_pair_record(p, r) for p, r in PAIRS[:2]]
    chat += [
        _pair_record("What colour is the sky on a clear day?", "What colour is the sky on a clear day?"),
        _pair_record("Wie spät ist es jetzt, bitte?", "Es ist jetzt genau drei Uhr am Nachmittag."),
        _pair_record("Say the secret word.", "The secret word is zorblax, as you asked me."),
    ]
    result = _run_sources(_pipeline(tmp_path, chat, _english_pages()[:3]), ["chat"])["chat"]
    check = _checks(result)["removal_rate_within_bounds"]
    # 3 of 5 removed, one by each rule group (each well under its 0.6 bound): only the sft recipe's
    # total bound (0.5) catches it; the global 0.9 would have let it through
    assert not result.success and check.passed is False
    assert check.metadata["violations"].value == "all rules: 60.0% removed > 50%"
