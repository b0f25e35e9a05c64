"""The dataset card of a version: facts gathered from a small hand-made set of committed outputs (three
sources, real packed shards from the packing stage), rendered in the Hugging Face card format."""

import dataclasses
import json
from pathlib import Path

import huggingface_hub
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from platform_assets.config import PipelineConfig, parse_config
from platform_assets.packing.settings import PackingSettings
from platform_assets.packing.stage import pack_outputs
from platform_assets.storage import Storage
from platform_assets.versioning.card_facts import CardFacts, LeakCheck, MediaFacts, gather_card_facts
from platform_assets.versioning.dataset_card import (
    card_for_ui,
    card_metadata,
    license_ids,
    render_dataset_card,
    size_category,
)

MD5 = "0123456789abcdef0123456789abcdef.dir"
REPO_REL = "data/platform"  # the storage root inside the DVC repository
RECORD = {"md5": MD5, "path": f"{REPO_REL}/packed_shards/_all", "recorded_in": "dvc.lock", "stage": "packed_shards",
          "git_revision": "f" * 40, "git_dirty": False, "remote": "store", "pushed": True, "media": None,
          "shards_uri": "/somewhere/else/packed_shards/_all", "remote_url": "/somewhere/remote"}
EOS, PAD = 0, 1
TOKENIZER = {"vocab_size": 300, "pad_id": PAD, "eos_id": EOS, "bos_id": None, "name": "tokenizer/_all",
             "sha256": "7" * 64}
ARTIFACT = {"format_version": 1, "vocab_size": 300, "tokenizer_sha256": "7" * 64,
            "info": {"algorithm": "bpe", "source": "train"},
            "special_tokens": {"eos": {"token": "<|endoftext|>", "id": EOS}, "pad": {"token": "<|pad|>", "id": PAD}}}
# (source, lang, license, split) of every document that reaches the splits
SPLIT_DOCS = [("web", "en", "MIT", "train"), ("web", "en", "MIT", "train"), ("web", "en", "MIT", "validation"),
              ("web", "de", "MIT", "test"), ("forum", "fr", "GPL-2.0-or-later OR CC-BY-SA-3.0", "train"),
              ("forum", "fr", "GPL-2.0-or-later OR CC-BY-SA-3.0", "train"),
              ("forum", "en", "GPL-2.0-or-later OR CC-BY-SA-3.0", "validation"), ("scans", "zxx", None, "train")]


def _config(tmp_path: Path) -> PipelineConfig:
    return parse_config({"sources": [
        {"name": "web", "format": "jsonl", "path": "web", "license": "MIT"},
        {"name": "forum", "format": "csv", "path": "forum.csv", "license": "GPL-2.0-or-later OR CC-BY-SA-3.0",
         "recipe": "docs"},
        {"name": "scans", "format": "folder", "path": "scans", "media": ["image"], "recipe": "captions"},
    ], "cleaning": {"quality": [{"preset": "gopher_quality"}, {"preset": "c4", "filter_curly_bracket": False}],
                    "recipes": {"captions": {"base": "sft", "overrides": {"blocklist": {"enabled": False}},
                                             "gates": {"rule_bounds": {"language": 0.2}}}}},
        "cleaning_gates": {"max_rule_removal_rate": 0.5, "rule_bounds": {"c4": 0.7}},
        "splits": {"seed": 7, "ratios": {"train": 0.8, "validation": 0.1, "test": 0.1}}}, tmp_path)


def _write(storage: Storage, rel: str, files: dict[str, pa.Table]) -> None:
    with storage.staged_dir(rel) as staged:
        for name, table in files.items():
            with staged.open_output(name) as f:
                pq.write_table(table, f)


def _ids(source: str, n: int) -> pa.Table:
    return pa.table({"id": [f"{source}-{i}" for i in range(n)], "source": [source] * n})


def _exclusions(*rules: str) -> pa.Table:
    return pa.table({"id": [f"x{i}" for i in range(len(rules))], "rule": list(rules),
                     "value": ["1"] * len(rules), "bytes": pa.array([10] * len(rules), pa.int64())})


def _outputs(root: Path) -> Storage:
    """web: 6 raw (2 quarantined inputs), 1 removed by a quality rule, 1 exact duplicate; forum: 4 raw, 1
    removed by language ID; scans: 2 raw images (1 quarantined input), 1 near-duplicate image."""
    storage = Storage(str(root / REPO_REL))
    for source, raw, quarantined, cleaned, rules in (("web", 6, 2, 5, ["gopher_quality.stop_words"]),
                                                     ("forum", 4, 0, 3, ["language.low_confidence"]),
                                                     ("scans", 2, 1, 2, [])):
        quarantine = pa.table({"source": [source] * quarantined, "reason": ["malformed_json"] * quarantined})
        _write(storage, f"raw_documents/{source}", {"part-00000.parquet": _ids(source, raw),
                                                    "_quarantine.parquet": quarantine})
        _write(storage, f"cleaned_documents/{source}", {"part-00000.parquet": _ids(source, cleaned),
                                                        "_exclusions.parquet": _exclusions(*rules)})
    kept = pa.concat_tables([_ids("web", 4), _ids("forum", 3), _ids("scans", 1)])
    _write(storage, "deduplicated_documents/_all", {
        "part-00000.parquet": kept,
        "_exclusions.parquet": _exclusions("exact_duplicate", "near_duplicate_image")})
    source, lang, license_, split = (list(c) for c in zip(*SPLIT_DOCS, strict=True))
    _write(storage, "dataset_splits/_all", {"part-00000.parquet": pa.table({
        "id": kept["id"], "source": source, "lang": lang, "license": pa.array(license_, pa.string()),
        "split": split})})
    rng = np.random.default_rng(0)
    rows = []
    for doc_id, src, name in zip(kept["id"].to_pylist()[:7], source[:7], split[:7], strict=True):
        tokens = [*map(int, rng.integers(2, 300, int(rng.integers(3, 30)))), EOS]
        rows.append({"id": doc_id, "source": src, "split": name, "chunk": 0, "input_ids": tokens,
                     "loss_mask": None, "num_tokens": len(tokens), "loss_tokens": len(tokens)})
    tokenized = pa.Table.from_pylist(rows, schema=pa.schema([
        ("id", pa.string()), ("source", pa.string()), ("split", pa.string()), ("chunk", pa.int32()),
        ("input_ids", pa.list_(pa.int32())), ("loss_mask", pa.list_(pa.uint8())), ("num_tokens", pa.int32()),
        ("loss_tokens", pa.int32())]))
    _write(storage, "tokenized_documents/_all", {"part-00000.parquet": tokenized})
    pack_outputs(storage, "tokenized_documents/_all", "packed_shards/_all",
                 PackingSettings(seq_len=16, samples_per_shard=4), TOKENIZER,
                 extra_files={"tokenizer/tokenizer_artifact.json": json.dumps(ARTIFACT).encode()})
    return storage


PASSED = LeakCheck(True, "no leakage")


def _facts(tmp_path: Path, name: str = "project", leak: LeakCheck | None = PASSED) -> CardFacts:
    cfg = _config(tmp_path)
    return gather_card_facts(_outputs(tmp_path / name), RECORD, sources=cfg.sources, cleaning=cfg.cleaning,
                             dedup=cfg.dedup, splits=cfg.splits, card_dir=f"{REPO_REL}/dataset_version/_all",
                             leak_check=leak, gates=cfg.cleaning_gates)


@pytest.fixture
def facts(tmp_path) -> CardFacts:
    return _facts(tmp_path)


def _header(card: str) -> dict:
    assert card.startswith("---\n")
    return yaml.safe_load(card[4:].split("\n---\n")[0])


def test_figures_come_from_the_committed_outputs(facts):
    rows = {s.name: (s.format, s.licenses, s.raw, s.quarantined, s.cleaned, s.kept) for s in facts.sources}
    assert rows == {"web": ("jsonl", ("MIT",), 6, 2, 5, 4),
                    "forum": ("csv", ("GPL-2.0-or-later OR CC-BY-SA-3.0",), 4, 0, 3, 3),
                    "scans": ("folder (image)", (None,), 2, 1, 2, 1)}
    assert facts.cleaning_removed == (("gopher_quality.stop_words", 1), ("language.low_confidence", 1))
    assert facts.dedup_removed == (("exact_duplicate", 1), ("near_duplicate_image", 1))
    assert [(s.name, s.documents) for s in facts.splits] == [("train", 5), ("validation", 2), ("test", 1)]
    assert sum(s.sequences for s in facts.splits) == facts.packing.sequences > 0
    assert sum(s.tokens for s in facts.splits) == facts.packing.tokens
    assert facts.languages == (("en", 4), ("fr", 2), ("de", 1), ("zxx", 1))
    assert [f.name for f in facts.formats] == ["flat", "parquet", "webdataset"]
    assert facts.quality_presets == ("gopher_quality", "c4 (filter_curly_bracket: False)")
    assert facts.tokenizer is not None and facts.tokenizer.special_tokens[0] == ("eos", "<|endoftext|>", EOS)
    assert facts.media is None


def test_header_is_a_hugging_face_card(facts):
    card = render_dataset_card(facts)
    header = _header(card)
    assert header["license"] == ["cc-by-sa-3.0", "gpl-2.0-or-later", "mit", "unknown"]  # scans has none
    assert header["language"] == ["en", "fr", "de"] and header["multilinguality"] == "multilingual"
    assert header["size_categories"] == ["n<1K"] and header["task_categories"] == ["text-generation"]
    assert header["configs"] == [{"config_name": "default", "data_files": [
        {"split": s, "path": f"../../packed_shards/_all/parquet/{s}/*/shard-*.parquet"}
        for s in ("train", "validation", "test")]}]
    data = huggingface_hub.DatasetCard(card).data
    assert data.license == header["license"] and data.language == header["language"]
    assert data.size_categories == ["n<1K"] and data.task_categories == ["text-generation"]
    assert data.pretty_name == f"Dataset version {MD5[:12]}" and data.to_dict()["configs"] == header["configs"]


def test_body_states_sources_recipe_and_version(facts):
    card = render_dataset_card(facts)
    assert f"DVC md5: `{MD5}`" in card and "dvc pull packed_shards" in card
    assert "| web | jsonl | MIT | 6 | 2 | 5 | 4 |" in card
    assert "| scans | folder (image) | unspecified | 2 | 1 | 2 | 1 |" in card
    assert "| **total** |  |  | 12 | 3 | 10 | 8 |" in card
    assert "Funnel: 12 documents in, 2 removed, 10 out" in card and "| language.low_confidence | 1 |" in card
    assert "| exact_duplicate | 1 |" in card and "Jaccard >= 0.8" in card and "128 permutations" in card
    assert "seed 7; ratios train 0.8, validation 0.1, test 0.1" in card and "blocking): passed: no leakage." in card
    assert "| eos | `<\\|endoftext\\|>` | 0 |" in card  # a pipe inside a table cell is escaped
    assert f"sequences of 16 tokens (overlong documents: `split`): {facts.packing.sequences} sequences" in card
    assert 'dtype="<u2"' in card and "shape=(shard[\"samples\"], 16)" in card
    assert "/somewhere" not in card  # absolute paths of the machine that built it stay out


def test_each_source_s_recipe_is_stated_with_its_steps_and_bounds(facts):
    """Sources name their own cleaning recipe: the card says which, what it runs and its removal bounds."""
    recipes = {r.name: r for r in facts.recipes}
    assert [(r.name, r.sources) for r in facts.recipes] == [("web", ("web",)), ("docs", ("forum",)),
                                                            ("captions", ("scans",))]
    web, docs, captions = recipes["web"], recipes["docs"], recipes["captions"]
    assert web.steps == facts.cleaning_steps and web.quality_presets == facts.quality_presets
    assert docs.quality_presets == ("gopher_repetition", "gopher_quality") and docs.steps == web.steps
    # captions: sft's conversation checks instead of the quality presets, no blocklist
    assert "conversation" in captions.steps and not {"quality", "blocklist"} & set(captions.steps)
    assert captions.quality_presets == ()
    # effective bounds: the global gates with each recipe's own in their place (sft: 0.5 in all)
    assert (web.max_removal_rate, web.max_rule_removal_rate, web.rule_bounds) == (0.9, 0.5, (("c4", 0.7),))
    assert (captions.max_removal_rate, captions.rule_bounds) == (0.5, (("c4", 0.7), ("language", 0.2)))
    card = render_dataset_card(facts)
    assert "| web | web | as the global block | gopher_quality, c4 (filter_curly_bracket: False) " \
           "| all 90%, per rule 50%; c4 70% |" in card
    assert "| docs | forum | as the global block | gopher_repetition, gopher_quality | all 90%, per rule 50%; " \
           "c4 70% |" in card
    assert "| captions | scans | +conversation, -quality, -blocklist | none | all 50%, per rule 50%; c4 70%, " \
           "language 20% |" in card


def test_a_file_partitioned_source_counts_its_partitions_and_not_a_stale_unsplit_output(tmp_path):
    """web split into 2 file partitions: its figures are the sum of web.00 and web.01; the folder its
    unsplit runs left (raw_documents/web, cleaned_documents/web) is no output of this config."""
    storage = _outputs(tmp_path / "project")
    for key, raw, cleaned, rules in (("web.00", 3, 2, ["c4.lorem_ipsum"]), ("web.01", 4, 4, [])):
        _write(storage, f"raw_documents/{key}", {"part-00000.parquet": _ids(key, raw),
                                                 "_quarantine.parquet": pa.table({"reason": ["binary"]})})
        _write(storage, f"cleaned_documents/{key}", {"part-00000.parquet": _ids(key, cleaned),
                                                     "_exclusions.parquet": _exclusions(*rules)})
    cfg = _config(tmp_path)
    web = cfg.sources[0].model_copy(update={"file_partitions": 2})
    facts = gather_card_facts(storage, RECORD, sources=[web, *cfg.sources[1:]], cleaning=cfg.cleaning,
                              dedup=cfg.dedup, splits=cfg.splits, card_dir=f"{REPO_REL}/dataset_version/_all",
                              leak_check=PASSED, gates=cfg.cleaning_gates)
    rows = {s.name: (s.raw, s.quarantined, s.cleaned, s.kept) for s in facts.sources}
    assert rows == {"web": (7, 2, 6, 4), "forum": (4, 0, 3, 3), "scans": (2, 1, 2, 1)}
    assert facts.cleaning_removed == (("c4.lorem_ipsum", 1), ("language.low_confidence", 1))


def test_same_outputs_anywhere_give_the_same_bytes(tmp_path):
    first = render_dataset_card(_facts(tmp_path, "a"))
    assert render_dataset_card(_facts(tmp_path, "b")) == first  # another checkout directory, same card
    assert render_dataset_card(_facts(tmp_path, "a")) == first


def test_numpy_snippet_reads_the_flat_shards(tmp_path, monkeypatch, facts):
    card = render_dataset_card(facts)
    snippet = card.split("With numpy")[1].split("```python\n")[1].split("```")[0]
    monkeypatch.chdir(tmp_path / "project")
    scope: dict = {}
    exec(snippet, scope)
    assert (scope["sequences"], scope["tokens"]) == (facts.packing.sequences, facts.packing.tokens)


def test_media_and_missing_leak_check(tmp_path):
    facts = _facts(tmp_path, leak=None)
    media = MediaFacts("fedcba9876543210fedcba9876543210.dir", f"{REPO_REL}/media_shards/_all", "media_shards", 3,
                       (("image", 2), ("audio", 1)), (dataclasses.replace(facts.formats[1], splits=("train",)),))
    card = render_dataset_card(dataclasses.replace(facts, media=media))
    header = _header(card)
    assert header["task_categories"] == ["text-generation", "automatic-speech-recognition", "image-to-text"]
    assert header["configs"][1] == {"config_name": "media", "data_files": [
        {"split": "train", "path": "../../media_shards/_all/parquet/train/*/shard-*.parquet"}]}
    assert "media DVC md5: `fedcba9876543210fedcba9876543210.dir`" in card and "3 samples (image 2, audio 1)" in card
    assert "has not run on this instance" in card and "dvc pull packed_shards media_shards`" in card
    ui = card_for_ui(card)
    assert ui.startswith("```yaml\n") and "\n```\n\n# Dataset version " in ui


@pytest.mark.parametrize(("value", "ids", "name"), [
    ("MIT", ["mit"], None),
    ("GPL-2.0-or-later OR CC-BY-SA-3.0", ["gpl-2.0-or-later", "cc-by-sa-3.0"], None),
    ("(MIT AND Apache-2.0)", ["mit", "apache-2.0"], None),
    ("GPL-2.0 WITH Classpath-exception-2.0", ["gpl-2.0"], None),
    (None, ["unknown"], None),
    ("see terms.txt", ["other"], "see terms.txt"),
    ("MIT OR", ["other"], "MIT OR"),
])
def test_license_values_map_to_hub_ids(value, ids, name):
    assert license_ids(value) == (ids, name)


def test_a_non_spdx_licence_is_other_with_its_name(facts):
    web = dataclasses.replace(facts.sources[0], licenses=("Research use only",))
    header = card_metadata(dataclasses.replace(facts, sources=(web, *facts.sources[1:])))
    assert header["license"] == ["cc-by-sa-3.0", "gpl-2.0-or-later", "other", "unknown"]
    assert header["license_name"] == "research-use-only"


@pytest.mark.parametrize(("rows", "bucket"), [(0, "n<1K"), (999, "n<1K"), (1000, "1K<n<10K"),
                                              (123_456, "100K<n<1M"), (10**12, "n>1T")])
def test_size_categories_are_the_hub_buckets(rows, bucket):
    assert size_category(rows) == bucket
