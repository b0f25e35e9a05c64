"""cleaned_documents through Dagster: funnel metadata, exclusions, and gates that fail when they should."""

import json

import dagster as dg
import pyarrow.parquet as pq
import pytest
import yaml

from platform_assets.defs.cleaned_documents.assets import cleaned_documents
from platform_assets.defs.raw_documents.assets import raw_documents
from platform_assets.defs.raw_documents.partitions import source_partitions
from platform_assets.defs.resources import PipelineResource


def handbook(lang: str) -> list[str]:
    """Real prose shipped with the repo (sample_data/): Debian handbook pages, which pass Gopher's rules."""
    import gzip
    from pathlib import Path

    seed = Path(__file__).resolve().parents[1] / "sample_data" / "real_docs.jsonl.gz"
    with gzip.open(seed, "rt") as f:
        return [d["text"] for d in map(json.loads, f) if d["source"] == "debian-handbook" and d["lang"] == lang]


ENGLISH = handbook("en")
GERMAN = handbook("de")
PROSE = ENGLISH[0]


def _config(tmp_path, docs: list[str], **extra) -> PipelineResource:
    (tmp_path / "in.jsonl").write_text("".join(json.dumps({"text": d}) + "\n" for d in docs))
    cfg = {"storage": {"root": str(tmp_path / "out")},
           "sources": [{"name": "web", "format": "jsonl", "path": str(tmp_path / "in.jsonl")}],
           "cleaning": {"quality": [{"preset": "gopher_repetition"}, {"preset": "gopher_quality"}]}, **extra}
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(cfg))
    return PipelineResource(config_path=str(tmp_path / "p.yaml"))


def _run(pipeline):
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions(source_partitions.name, ["web"])
        return dg.materialize([raw_documents, cleaned_documents], partition_key="web",
                              resources={"pipeline": pipeline}, instance=instance, raise_on_error=False)


def _checks(result) -> dict[str, dg.AssetCheckEvaluation]:
    return {e.check_name: e for e in result.get_asset_check_evaluations() if e.asset_key.path == ["cleaned_documents"]}


def test_clean_source_reports_funnel_exclusions_and_passes_gates(tmp_path):
    docs = [text + f"\n\nContact alice{i}@example.org for details." for i, text in enumerate(ENGLISH)]
    docs += ["buy now " * 200, "short text here"]  # repetitive; too few words
    result = _run(_config(tmp_path, docs, cleaning_gates={"max_rule_removal_rate": 0.5}))
    assert result.success
    md = result.asset_materializations_for_node("cleaned_documents")[0].metadata
    assert (md["docs_in"].value, md["rows"].value) == (7, 5)
    assert "| **out** | 5 |" in md["funnel"].value and md["funnel_chart"].value.startswith("![")
    # the pages hold addresses of their own besides the 5 planted ones
    assert {r.data["type"]: r.data["count"] for r in md["pii_redactions"].value.records}["EMAIL"] >= 5
    out = tmp_path / "out" / "cleaned_documents" / "web"
    kept = pq.read_table(out)
    assert all("<EMAIL>" in t and "@example.org" not in t for t in kept["text"].to_pylist())
    assert set(kept["lang"].to_pylist()) == {"en"}
    excl = pq.read_table(out / "_exclusions.parquet").to_pylist()
    # both junk documents go, each with the rule that removed it (here: too unlike any language)
    assert len(excl) == 2 and all(e["rule"].split(".")[0] in {"language", "gopher_repetition", "gopher_quality"}
                                  for e in excl)
    assert all(e["value"] for e in excl)  # the value that tripped the rule
    # the spot check in the UI shows each removed document's rule, value and raw text
    spot = md["spot_checks"].value
    assert all(e["rule"] in spot and e["value"] in spot for e in excl) and "buy now buy now" in spot
    # and the kept side: all 5 kept documents (fewer than the 10 sampled), none of the removed ones
    kept_spot = md["spot_checks_kept"].value
    assert kept_spot.count("| web | kept |") == 5 and "buy now" not in kept_spot
    assert all(f"`{i[:12]}`" in kept_spot for i in kept["id"].to_pylist())
    assert all(c.passed for c in _checks(result).values())


def test_a_rule_removing_too_much_blocks(tmp_path):
    docs = ENGLISH[:3] + [f"the cat sat {i} " * 20 for i in range(7)]  # 7 of 10 are repetitive
    result = _run(_config(tmp_path, docs, cleaning_gates={"max_rule_removal_rate": 0.5}))
    assert not result.success
    check = _checks(result)["removal_rate_within_bounds"]
    assert check.passed is False and "removed > 50%" in check.metadata["violations"].value


def test_language_mix_outside_configured_shares_warns(tmp_path):
    docs = ENGLISH[:4] + GERMAN[:4]
    result = _run(_config(tmp_path, docs, cleaning_gates={"language_shares": {"en": [0.9, 1.0]}}))
    check = _checks(result)["language_mix_as_configured"]
    assert check.passed is False and check.severity == dg.AssetCheckSeverity.WARN
    assert "expected 90%-100%" in check.metadata["problems"].value
    assert "de:" in check.metadata["languages"].value


def test_residual_pii_is_detected(tmp_path, monkeypatch):
    """If redaction silently stopped working, the second scan must catch what was left."""
    from platform_assets.cleaning import pii

    monkeypatch.setattr(pii.PiiRedact, "process", lambda self, doc, counters: None)
    result = _run(_config(tmp_path, [t + "\n\nMail bob@example.com now." for t in ENGLISH[:3]]))
    check = _checks(result)["no_residual_pii"]
    assert not result.success and check.passed is False
    assert check.metadata["type.EMAIL"].value >= 3  # the 3 planted addresses, and the pages' own


@pytest.mark.parametrize("bad", ["\x00\x01binary\x02" * 100, "a" * 200_000])
def test_pathological_documents_do_not_crash(tmp_path, bad):
    result = _run(_config(tmp_path, [PROSE, bad], cleaning_gates={"max_rule_removal_rate": 0.6}))
    md = result.asset_materializations_for_node("cleaned_documents")[0].metadata
    assert md["docs_in"].value == 2 and md["rows"].value == 1


def _chat_config(tmp_path) -> PipelineResource:
    conversations = [
        {"messages": [{"role": "user", "content": f"Summarise this for me and reply to bob{i}@example.com."},
                      {"role": "assistant", "content": text + f"\n\nQuestions go to carol{i}@example.org."}]}
        for i, text in enumerate(ENGLISH[:3])
    ]
    (tmp_path / "chat.jsonl").write_text("".join(json.dumps(c) + "\n" for c in conversations))
    cfg = {"storage": {"root": str(tmp_path / "out")},
           "sources": [{"name": "web", "format": "jsonl", "path": str(tmp_path / "chat.jsonl"),
                        "chat": {"messages_field": "messages"}}],
           "cleaning": {"quality": [{"preset": "gopher_quality"}]}}
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(cfg))
    return PipelineResource(config_path=str(tmp_path / "p.yaml"))


def test_chat_messages_are_redacted_where_tokenization_reads_them(tmp_path):
    result = _run(_chat_config(tmp_path))
    assert result.success and all(c.passed for c in _checks(result).values())
    kept = pq.read_table(tmp_path / "out" / "cleaned_documents" / "web")
    assert kept.num_rows == 3
    for meta in kept["meta"].to_pylist():
        contents = [m["content"] for m in json.loads(meta)["messages"]]
        assert all("@example." not in c for c in contents) and all("<EMAIL>" in c for c in contents)


def test_residual_pii_in_chat_messages_is_detected(tmp_path, monkeypatch):
    """Text redacted but messages left alone (the defect this guards against): the gate blocks."""
    from platform_assets.cleaning import pii

    monkeypatch.setattr(pii.PiiRedact, "rewrites_messages", False)
    result = _run(_chat_config(tmp_path))
    check = _checks(result)["no_residual_pii"]
    assert not result.success and check.passed is False
    assert check.metadata["type.EMAIL"].value >= 6  # 2 planted per conversation, in its messages
