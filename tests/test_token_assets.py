"""tokenizer -> tokenized_documents -> packed_shards -> dataset_version -> training_run, in process
through Dagster, with the real dvc CLI (a local remote) and the training job under torchrun."""

import json
import random
from pathlib import Path

import dagster as dg
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from dvc_project import init_dvc_project, write_tiny_run_config

from platform_assets.defs.dataset_version.assets import dataset_version
from platform_assets.defs.packed_shards.assets import packed_shards
from platform_assets.defs.resources import PipelineResource
from platform_assets.defs.tokenized_documents.assets import tokenized_documents
from platform_assets.defs.tokenizer.assets import tokenizer
from platform_assets.defs.training_run.assets import training_run
from platform_assets.schema import DOCUMENTS_SCHEMA, document_id
from platform_assets.storage import Storage

WORDS = ("shard token model train corpus filter clean dedup split pack index byte text page line word source "
         "asset check gate lineage version remote cache batch worker").split()


def _splits_output(root: Path) -> dict[str, str]:
    """A committed dataset_splits output: plain essays in three splits and chat documents in train."""
    rng = random.Random(3)
    rows = []
    for i in range(90):
        text = " ".join(rng.choice(WORDS) for _ in range(rng.randrange(40, 400))) + "."
        rows.append(("essays", text, None, ["train", "validation", "test"][i % 3] if i < 30 else "train"))
    for _ in range(12):
        q, a = f"What is {rng.choice(WORDS)}?", " ".join(rng.choice(WORDS) for _ in range(30))
        meta = json.dumps({"messages": [{"role": "user", "content": q}, {"role": "assistant", "content": a}]})
        rows.append(("chat", f"user: {q}\n\nassistant: {a}", meta, "train"))
    n = len(rows)
    uris = [f"{s}.jsonl#line={i}" for i, (s, *_) in enumerate(rows)]
    table = pa.table({
        "id": [document_id(s, u, t) for (s, t, _, _), u in zip(rows, uris, strict=True)],
        "source": [r[0] for r in rows],
        "text": pa.array([r[1] for r in rows], pa.large_string()),
        "modality": ["text"] * n,
        "uri": uris,
        "license": pa.nulls(n, pa.string()),
        "meta": [r[2] for r in rows],
        "ingested_at": pa.array([1_700_000_000_000] * n, pa.timestamp("ms", tz="UTC")),
        "media": pa.nulls(n, DOCUMENTS_SCHEMA.field("media").type),
    }, schema=DOCUMENTS_SCHEMA).append_column("split", pa.array([r[3] for r in rows]))
    with Storage(str(root)).staged_dir("dataset_splits/_all") as staged:
        with staged.open_output("part-00000.parquet") as f:
            pq.write_table(table, f)
    return dict(zip(table["id"].to_pylist(), table["source"].to_pylist(), strict=True))


@pytest.fixture
def project(tmp_path):
    """A git + DVC project holding the storage root, a dvc.yaml stage owning the shards, a remote."""
    root = tmp_path / "project"
    init_dvc_project(root)
    ids = _splits_output(root / "data" / "platform")
    write_tiny_run_config(root, checkpoint_interval=4)
    (root / "configs" / "pipeline.yaml").write_text(yaml.safe_dump({
        "storage": {"root": "../data/platform"},
        "sources": [{"name": "essays", "format": "jsonl", "path": "."}],
        "tokenizer": {"source": "train", "vocab_size": 400, "min_frequency": 1},
        "packing": {"seq_len": 64, "samples_per_shard": 16},
        "versioning": {"dvc_repo": "..", "remote": {"name": "store", "url": str(tmp_path / "remote")}},
        "training": {"run_config": "run.yaml", "checkpoint_root": "../data/checkpoints"},
    }))
    return root, ids, PipelineResource(config_path=str(root / "configs" / "pipeline.yaml"))


def _checks(result) -> dict[str, bool]:
    return {e.check_name: e.passed for e in result.get_asset_check_evaluations()}


def _meta(result, asset: str) -> dict:
    return {k: v.value for k, v in result.asset_materializations_for_node(asset)[0].metadata.items()}


def test_tokens_to_a_pushed_dvc_version(project, tmp_path):
    root, ids, pipeline = project
    result = dg.materialize([tokenizer, tokenized_documents, packed_shards, dataset_version],
                            resources={"pipeline": pipeline})
    assert result.success
    assert all(_checks(result).values()), _checks(result)
    tok, tokd, packed, version = (_meta(result, a) for a in
                                  ("tokenizer", "tokenized_documents", "packed_shards", "dataset_version"))
    assert 256 < tok["vocab_size"] <= 400 and tok["bytes_per_token"] > 1.5  # a small corpus runs out of merges
    assert tokd["documents"] == len(ids) and tokd["chat_documents"] == 12
    assert tokd["loss_tokens"] < tokd["tokens"]  # chat prompts are masked out
    assert packed["tokens"] == packed["tokens_in"] == tokd["tokens"]  # nothing lost, nothing doubled
    assert packed["formats"] == "flat, parquet, webdataset"
    # the shard set carries its tokenizer: a pulled version decodes itself
    from transformers import AutoTokenizer

    shipped = AutoTokenizer.from_pretrained(str(root / "data" / "platform" / "packed_shards" / "_all" / "tokenizer"))
    assert len(shipped) == tok["vocab_size"] and shipped.eos_token is not None

    # the version is the DVC hash in dvc.lock, pushed, and restorable from the remote alone
    lock = yaml.safe_load((root / "dvc.lock").read_text())["stages"]["packed_shards"]["outs"][0]
    assert version["dvc_md5"] == lock["md5"] and version["git_dirty"] is True
    record = json.loads((root / "data" / "platform" / "dataset_version" / "_all" / "version.json").read_text())
    assert record["md5"] == lock["md5"] and record["totals"]["tokens"] == packed["tokens"]
    flat = root / "data" / "platform" / "packed_shards" / "_all" / "flat"
    before = {p.name: p.read_bytes() for p in flat.rglob("*.bin")}
    # a flipped byte in a shard fails the blocking gate on the next version
    victim = sorted(flat.rglob("*.tokens.bin"))[0]
    data = bytearray(victim.read_bytes())
    data[5] ^= 0xFF
    victim.write_bytes(bytes(data))
    failed = dg.materialize([dataset_version], resources={"pipeline": pipeline}, raise_on_error=False)
    assert _checks(failed)["shards_match_index"] is False
    # rebuilding the shards restores them byte for byte (same inputs, same config)
    again = dg.materialize([packed_shards], resources={"pipeline": pipeline})
    assert again.success and {p.name: p.read_bytes() for p in flat.rglob("*.bin")} == before


@pytest.mark.slow
def test_training_run_launches_torchrun_through_pipes_and_resumes(project):
    root, _, pipeline = project
    dg.materialize([tokenizer, tokenized_documents, packed_shards, dataset_version],
                   resources={"pipeline": pipeline})
    resources = {"pipeline": pipeline, "pipes_subprocess_client": dg.PipesSubprocessClient()}
    result = dg.materialize([training_run], resources=resources)
    meta = _meta(result, "training_run")
    assert meta["steps"] == 6 and np.isfinite(meta["final_loss"]) and meta["tokens_seen"] > 0
    assert "loss_chart" in meta and meta["dataset_version"].endswith(".dir")
    assert _checks(result)["loss_decreased"] is True
    ckpt_root = root / "data" / "checkpoints"
    assert [p.name for p in ckpt_root.iterdir()] == [meta["dataset_version"].removesuffix(".dir")]
    # the same version again: the finished run resumes at its last checkpoint and trains nothing more
    again = _meta(dg.materialize([training_run], resources=resources), "training_run")
    assert again["steps"] == 6 and again["resumed_from_step"] == 6 and again["tokens_seen"] == meta["tokens_seen"]
