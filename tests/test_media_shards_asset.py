"""media_shards through Dagster (metadata, charts, blocking checks), then dataset_version recording the
media shard set as a DVC version of its own beside the packed shards, with the real dvc CLI."""

import json
import subprocess
import sys
from pathlib import Path

import dagster as dg
import numpy as np
import pyarrow as pa
import pytest
import yaml

sys.path.insert(0, str(Path(__file__).parent / "unit"))
from media_splits import write_splits  # noqa: E402

from platform_assets.defs.dataset_version.assets import dataset_version  # noqa: E402
from platform_assets.defs.media_shards.assets import media_shards  # noqa: E402
from platform_assets.defs.resources import PipelineResource  # noqa: E402
from platform_assets.packing.samples import ShardSamples  # noqa: E402
from platform_assets.packing.shard_writers import ShardSetHeader, ShardSetWriter  # noqa: E402
from platform_assets.storage import Storage  # noqa: E402
from platform_assets.versioning.dvc_repo import DvcError, find_dvc  # noqa: E402


@pytest.fixture
def project(tmp_path):
    """A git project whose dvc.yaml owns both shard sets (as the repository's does), a dataset_splits
    output with media, and a small packed shard set (2 samples of 8 tokens) for dataset_version."""
    root = tmp_path / "project"
    (root / "configs").mkdir(parents=True)
    for args in (["init", "-q"], ["config", "user.email", "t@example.org"], ["config", "user.name", "t"]):
        subprocess.run(["git", *args], cwd=root, check=True)
    (root / ".gitignore").write_text("/data/\n")
    stages = {name: {"cmd": "echo the platform builds it", "outs": [f"data/platform/{name}/_all"]}
              for name in ("packed_shards", "media_shards")}
    (root / "dvc.yaml").write_text(yaml.safe_dump({"stages": stages}))
    storage = Storage(str(root / "data" / "platform"))
    expected = write_splits(storage)
    header = ShardSetHeader(seq_len=8, vocab_size=100, pad_id=0, eos_id=1, bos_id=None, has_loss_mask=False,
                            tokenizer={"name": "t", "sha256": "0" * 64}, packing={})
    with storage.staged_dir("packed_shards/_all") as staged:
        writer = ShardSetWriter(staged, ["flat"], header, samples_per_shard=4)
        tokens = np.arange(2, 18, dtype=np.uint16).reshape(2, 8)
        writer.group("train", "essays").add(ShardSamples(tokens, np.array([8, 8], np.int32),
                                                         np.array([0, 1, 2]), None), pa.array(["d1", "d2"]))
        writer.close()
    (root / "configs" / "pipeline.yaml").write_text(yaml.safe_dump({
        "storage": {"root": "../data/platform"},
        "sources": [{"name": "photos", "format": "folder", "path": "."}],
        "media_shards": {"audio_features": "none", "shard_max_samples": 2},
        "versioning": {"dvc_repo": "..", "remote": {"name": "store", "url": str(tmp_path / "remote")}},
    }))
    return root, expected, PipelineResource(config_path=str(root / "configs" / "pipeline.yaml"))


def _meta(result, asset: str) -> dict:
    return {k: v.value for k, v in result.asset_materializations_for_node(asset)[0].metadata.items()}


def test_media_shards_asset_reports_and_gates(project):
    _, expected, pipeline = project
    result = dg.materialize([media_shards], resources={"pipeline": pipeline})
    checks = {e.check_name: e.passed for e in result.get_asset_check_evaluations()}
    assert checks == {"media_shards_verified": True, "media_formats_agree": True}
    meta = _meta(result, "media_shards")
    assert meta["samples"] == len(expected.ids) == 6 and meta["samples_audio"] == 2
    assert meta["text_documents_skipped"] == 4 and meta["media_excluded"] == 1
    # shard_max_samples 2: train/photos 2 -> 1 shard, every other set holds 1 sample -> 5 shards
    assert meta["shards"] == 5
    # each format is a complete copy: it holds every media byte (~100 kB here) plus its own framing
    assert min(meta["bytes_webdataset"], meta["bytes_parquet"]) > meta["media_bytes"] > 100_000
    for chart in ("samples_per_modality", "bytes_per_format", "image_sizes", "audio_durations"):
        assert meta[chart].startswith("![") and "data:image/svg+xml;base64," in meta[chart]
    assert {c.name for c in meta["dagster/column_schema"].columns} >= {"image", "audio", "json", "width"}


def test_dataset_version_versions_media_shards_beside_packed_shards(project, tmp_path):
    root, _, pipeline = project
    try:
        find_dvc(None, root)
    except DvcError:
        pytest.skip("no dvc executable (run scripts/setup.sh)")
    result = dg.materialize([media_shards, dataset_version], resources={"pipeline": pipeline})
    assert result.success
    checks = {e.check_name: e.passed for e in result.get_asset_check_evaluations()}
    assert checks["shards_match_index"] and checks["remote_has_version"], checks
    meta = _meta(result, "dataset_version")
    lock = yaml.safe_load((root / "dvc.lock").read_text())["stages"]
    # two versions, each in its own dvc.lock entry: the token shards' md5 stays what training names
    assert meta["dvc_md5"] == lock["packed_shards"]["outs"][0]["md5"]
    assert meta["media_dvc_md5"] == lock["media_shards"]["outs"][0]["md5"] != meta["dvc_md5"]
    record = json.loads((root / "data" / "platform" / "dataset_version" / "_all" / "version.json").read_text())
    assert record["media"]["md5"] == meta["media_dvc_md5"] and record["media"]["pushed"] is True
    assert record["media"]["formats"] == ["parquet", "webdataset"] and record["media"]["totals"]["samples"] == 6
    # a flipped byte in a media shard fails the release's blocking gate
    tar = sorted((root / "data" / "platform" / "media_shards" / "_all" / "webdataset").rglob("*.tar"))[0]
    data = bytearray(tar.read_bytes())
    data[700] ^= 0xFF
    tar.write_bytes(bytes(data))
    failed = dg.materialize([dataset_version], resources={"pipeline": pipeline}, raise_on_error=False)
    checks = {e.check_name: e for e in failed.get_asset_check_evaluations()}
    assert checks["shards_match_index"].passed is False
    assert "media webdataset: " in checks["shards_match_index"].metadata["problems"].value
