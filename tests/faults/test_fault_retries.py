"""Transient faults, retried: the S3 endpoint going away while ingest and packing write, a `dvc push`
killed midway, a DataLoader worker killed under training. Each run completes once the fault clears,
through the assets' retry policy (defs/stage_asset.py), with the bytes of a run that never saw it.

The S3 endpoint is moto's server behind a TCP proxy (tcp_proxy.py, in a process of its own) that the
test cuts and restores.
Why a proxy and not stopping moto: moto keeps its objects in memory, so a restarted moto is an empty
S3, which no real endpoint restart looks like (S3 and MinIO keep their objects); SIGSTOP would only
model a hung endpoint. A cut proxy refuses new connections and resets open ones, exactly what the
client sees while an endpoint restarts, and the objects behind it stay.
"""

from __future__ import annotations

import json
import random
import sys
import time
from pathlib import Path

import dagster as dg
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from dvc_project import init_dvc_project
from moto_server import moto_server
from tcp_proxy import ProxyProcess

from platform_assets.defs.raw_documents.assets import raw_documents
from platform_assets.defs.raw_documents.partitions import source_partitions
from platform_assets.defs.resources import PipelineResource
from platform_assets.schema import DOCUMENTS_SCHEMA, document_id
from platform_assets.storage import Storage

pytestmark = [pytest.mark.faults, pytest.mark.slow]  # ~60 s for the file on 2 cores

REPO = Path(__file__).resolve().parents[2]
# An outage of 3 s with 2 attempts per S3 request (~0.5 s of client retries): longer than one
# request rides out, so the step fails and the retry policy (first wait 0-4 s) is what recovers it.
OUTAGE_S = 3.0
S3_ATTEMPTS = 2


# -- the S3 endpoint ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def moto_port():
    with moto_server() as port:
        yield port


@pytest.fixture
def s3(moto_port, monkeypatch):
    """(boto3 client straight to moto, bucket, proxy in front of moto)."""
    boto3 = pytest.importorskip("boto3")
    for key, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                       "AWS_DEFAULT_REGION": "us-east-1"}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    client = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{moto_port}", region_name="us-east-1")
    bucket = f"faults{time.time_ns()}"
    client.create_bucket(Bucket=bucket)
    proxy = ProxyProcess(moto_port)
    yield client, bucket, proxy
    proxy.close()


def _objects(client, bucket: str, prefix: str) -> dict[str, bytes]:
    """Every object under prefix (pyarrow's empty `dir/` markers left out), by key relative to it."""
    out = {}
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for o in page.get("Contents", []):
            if not o["Key"].endswith("/"):
                out[o["Key"][len(prefix):]] = client.get_object(Bucket=bucket, Key=o["Key"])["Body"].read()
    return out


def _committed(objects: dict[str, bytes], output: str) -> dict[str, bytes]:
    """The files of a committed output: hidden staging prefixes are no part of it (nothing lists them)."""
    return {k[len(output) + 1:]: v for k, v in objects.items() if k.startswith(f"{output}/")}


def _check_output_against_manifest(files: dict[str, bytes]) -> None:
    """Exactly the files the manifest lists, each with its size and sha256: nothing lost, nothing extra."""
    import hashlib

    manifest = json.loads(files["_manifest.json"])["files"]
    assert set(files) - {"_manifest.json"} == set(manifest)
    for name, info in manifest.items():
        assert (len(files[name]), hashlib.sha256(files[name]).hexdigest()) == (info["bytes"], info["sha256"]), name


def _retries(result: dg.ExecuteInProcessResult, step: str) -> int:
    return sum(1 for e in result.all_events if e.event_type_value == "STEP_RESTARTED" and e.step_key == step)


def _s3_pipeline(tmp_path: Path, name: str, root: str, endpoint: str, **sections) -> PipelineResource:
    config = tmp_path / f"{name}.yaml"
    config.write_text(yaml.safe_dump({"storage": {"root": root, "s3": {"endpoint_url": endpoint,
                                                                     "max_attempts": S3_ATTEMPTS}},
                                      **sections}))
    return PipelineResource(config_path=str(config))


# -- ingest ---------------------------------------------------------------------------------------
def _write_jsonl(path: Path, documents: int, seed: int) -> None:
    rng = random.Random(seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as f:
        for i in range(documents):
            f.write(json.dumps({"text": f"{i} " + " ".join(f"w{rng.randrange(50_000)}" for _ in range(60))}) + "\n")
        f.write("{not json\n")  # one quarantined line: the side file goes through the outage too


def _ingest(pipeline: PipelineResource) -> dg.ExecuteInProcessResult:
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions(source_partitions.name, ["web"])
    return dg.materialize([raw_documents], partition_key="web", resources={"pipeline": pipeline},
                          instance=instance, raise_on_error=False)


@pytest.mark.s3
def test_s3_outage_while_ingest_writes_is_retried_to_the_clean_output(s3, tmp_path):
    client, bucket, proxy = s3
    _write_jsonl(tmp_path / "src" / "a.jsonl", 1500, seed=1)
    _write_jsonl(tmp_path / "src" / "b.jsonl", 500, seed=2)
    sources = [{"name": "web", "format": "jsonl", "path": str(tmp_path / "src")}]
    io = {"batch_rows": 250, "part_max_rows": 250}  # 8 parts: the outage falls between separate uploads

    before = proxy.client_bytes
    clean = _ingest(_s3_pipeline(tmp_path, "clean", f"s3://{bucket}/clean", proxy.url, sources=sources, io=io))
    assert clean.success and _retries(clean, "raw_documents") == 0
    clean_bytes = proxy.client_bytes - before

    proxy.cut_after(clean_bytes // 2, down_for_s=OUTAGE_S)  # halfway through the run's uploads
    faulty = _ingest(_s3_pipeline(tmp_path, "faulty", f"s3://{bucket}/faulty", proxy.url, sources=sources, io=io))
    assert proxy.outages() == (1, 1), "the outage never happened"
    assert faulty.success
    assert _retries(faulty, "raw_documents") >= 1  # the step failed during the outage and was run again

    clean_files = _committed(_objects(client, bucket, "clean/"), "raw_documents/web")
    faulty_files = _committed(_objects(client, bucket, "faulty/"), "raw_documents/web")
    assert faulty_files["_manifest.json"] == clean_files["_manifest.json"]
    assert faulty_files == clean_files
    assert sum(name.startswith("part-") for name in clean_files) == 8
    _check_output_against_manifest(faulty_files)


def test_a_deterministic_failure_is_not_retried(tmp_path):
    """The retry policy is for faults that pass: a source that is not there fails at once, naming it."""
    (tmp_path / "p.yaml").write_text(yaml.safe_dump({
        "storage": {"root": str(tmp_path / "out")},
        "sources": [{"name": "web", "format": "jsonl", "path": str(tmp_path / "missing")}]}))
    result = _ingest(PipelineResource(config_path=str(tmp_path / "p.yaml")))
    assert not result.success and _retries(result, "raw_documents") == 0
    [failure] = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    assert "web" in failure.step_failure_data.error.message


# -- packing --------------------------------------------------------------------------------------
WORDS = "shard token model train corpus filter clean dedup split pack index byte text page line word".split()


def _splits_table(n: int) -> pa.Table:
    rng = random.Random(7)
    texts = [" ".join(rng.choice(WORDS) for _ in range(rng.randrange(30, 300))) + "." for _ in range(n)]
    uris = [f"essays.jsonl#line={i}" for i in range(n)]
    docs = pa.table({
        "id": [document_id("essays", u, t) for u, t in zip(uris, texts, strict=True)],
        "source": ["essays"] * n,
        "text": pa.array(texts, pa.large_string()),
        "modality": ["text"] * n,
        "uri": uris,
        "license": pa.array(["CC-BY-4.0"] * n, pa.string()),
        "meta": pa.nulls(n, pa.string()),
        "ingested_at": pa.array([1_700_000_000_000] * n, pa.timestamp("ms", tz="UTC")),
        "media": pa.nulls(n, DOCUMENTS_SCHEMA.field("media").type),
    }, schema=DOCUMENTS_SCHEMA)
    return docs.append_column("lang", pa.array(["en"] * n)).append_column(
        "split", pa.array([("train", "train", "validation", "test")[i % 4] for i in range(n)]))


@pytest.mark.s3
def test_s3_outage_while_packing_writes_is_retried_to_the_clean_output(s3, tmp_path):
    from platform_assets.defs.packed_shards.assets import packed_shards
    from platform_assets.defs.tokenized_documents.assets import tokenized_documents
    from platform_assets.defs.tokenizer.assets import tokenizer

    client, bucket, proxy = s3
    pipeline = _s3_pipeline(
        tmp_path, "pack", f"s3://{bucket}/platform", proxy.url,
        sources=[{"name": "essays", "format": "jsonl", "path": str(tmp_path)}],
        tokenizer={"source": "train", "vocab_size": 400, "min_frequency": 1},
        # 64-token samples, 256 a shard: 5 shard sets of 1-2 shards per format, ~40 files
        packing={"seq_len": 64, "samples_per_shard": 256})
    cfg = pipeline.config()
    storage = Storage(cfg.storage_root, pipeline.s3_settings(cfg))
    with storage.staged_dir("dataset_splits/_all") as staged, staged.open_output("part-00000.parquet") as f:
        pq.write_table(_splits_table(300), f)
    upstream = dg.materialize([tokenizer, tokenized_documents], resources={"pipeline": pipeline})
    assert upstream.success

    before = proxy.client_bytes
    clean = dg.materialize([packed_shards], resources={"pipeline": pipeline}, raise_on_error=False)
    assert clean.success and _retries(clean, "packed_shards") == 0
    clean_bytes = proxy.client_bytes - before
    clean_files = _committed(_objects(client, bucket, "platform/"), "packed_shards/_all")
    print("TARS", sum(name.endswith(".tar") for name in clean_files), len(clean_files), clean_bytes)
    for key in list(_objects(client, bucket, "platform/packed_shards/")):  # the retry must write it all again
        client.delete_object(Bucket=bucket, Key=f"platform/packed_shards/{key}")

    proxy.cut_after(clean_bytes // 2, down_for_s=OUTAGE_S)
    faulty = dg.materialize([packed_shards], resources={"pipeline": pipeline}, raise_on_error=False)
    assert proxy.outages() == (1, 1), "the outage never happened"
    assert faulty.success
    assert _retries(faulty, "packed_shards") >= 1
    faulty_files = _committed(_objects(client, bucket, "platform/"), "packed_shards/_all")
    assert faulty_files["_manifest.json"] == clean_files["_manifest.json"]
    assert faulty_files == clean_files
    _check_output_against_manifest(faulty_files)


# -- dvc push -------------------------------------------------------------------------------------
# Stands in for `dvc` (versioning.dvc_executable): every command goes to the real DVC, except the first
# `push`, which is SIGKILLed as soon as the remote holds its first object (a push cut off midway, as a
# dropped connection or a killed worker leaves it). It records how many objects the remote held then.
KILLING_DVC = """#!{python}
import os, pathlib, signal, subprocess, sys, time
real, remote, marker = {real!r}, pathlib.Path({remote!r}), pathlib.Path({marker!r})
if sys.argv[1:2] != ["push"] or marker.exists():
    os.execv(real, [real, *sys.argv[1:]])
proc = subprocess.Popen([real, *sys.argv[1:]], start_new_session=True)
def objects():
    return sum(1 for p in remote.rglob("*") if p.is_file() and not p.name.startswith("."))
while proc.poll() is None and objects() == 0:
    time.sleep(0.001)
os.killpg(proc.pid, signal.SIGKILL)
proc.wait()
marker.write_text(str(objects()))
sys.exit(137)
"""


def test_dvc_push_killed_midway_is_retried_until_the_remote_holds_the_version(tmp_path):
    from platform_assets.defs.dataset_version.assets import dataset_version
    from platform_assets.defs.packed_shards.assets import packed_shards
    from platform_assets.defs.tokenized_documents.assets import tokenized_documents
    from platform_assets.defs.tokenizer.assets import tokenizer
    from platform_assets.versioning.dvc_repo import DvcError, DvcRepo, find_dvc

    try:
        real_dvc = find_dvc(None, REPO)
    except DvcError:
        pytest.skip("no dvc executable (run scripts/setup.sh)")
    root = tmp_path / "project"
    init_dvc_project(root)
    remote, marker = tmp_path / "remote", tmp_path / "first-push-killed"
    wrapper = tmp_path / "dvc"
    wrapper.write_text(KILLING_DVC.format(python=sys.executable, real=real_dvc, remote=str(remote),
                                          marker=str(marker)))
    wrapper.chmod(0o755)
    (root / "configs" / "pipeline.yaml").write_text(yaml.safe_dump({
        "storage": {"root": "../data/platform"},
        "sources": [{"name": "essays", "format": "jsonl", "path": "."}],
        "tokenizer": {"source": "train", "vocab_size": 400, "min_frequency": 1},
        # 16 samples a shard: ~80 files for the push to be cut off in the middle of
        "packing": {"seq_len": 64, "samples_per_shard": 16},
        "versioning": {"dvc_repo": "..", "dvc_executable": str(wrapper),
                       "remote": {"name": "store", "url": str(remote)}},
    }))
    pipeline = PipelineResource(config_path=str(root / "configs" / "pipeline.yaml"))
    storage = Storage(str(root / "data" / "platform"))
    with storage.staged_dir("dataset_splits/_all") as staged, staged.open_output("part-00000.parquet") as f:
        pq.write_table(_splits_table(300), f)
    assert dg.materialize([tokenizer, tokenized_documents, packed_shards], resources={"pipeline": pipeline}).success

    result = dg.materialize([dataset_version], resources={"pipeline": pipeline}, raise_on_error=False)
    assert result.success
    assert _retries(result, "dataset_version") == 1  # the killed push failed the step once
    shards = root / "data" / "platform" / "packed_shards" / "_all"
    files = sum(1 for p in shards.rglob("*") if p.is_file())
    assert 0 < int(marker.read_text()) < files + 1, "the first push was not cut off midway"

    dvc = DvcRepo(root, real_dvc)
    version = json.loads((root / "data" / "platform" / "dataset_version" / "_all" / "version.json").read_text())
    md5 = version["md5"]
    assert dvc.dvc_cmd("status", "--cloud", "--remote", "store", "packed_shards").strip() in (
        "Cache and remote 'store' are in sync.", "")
    # the remote holds exactly the version: every file's object and the .dir listing, no other object.
    # The killed transfer leaves the temporary file of the one copy it cut off beside them (a `*.tmp`
    # name, hidden or not): not an object, DVC never reads it
    listing = json.loads((root / ".dvc" / "cache" / "files" / "md5" / md5[:2] / md5[2:]).read_text())
    expected = {entry["md5"] for entry in listing} | {md5}
    stored = [p for p in (remote / "files" / "md5").rglob("*") if p.is_file()]
    temporary = [p for p in stored if any(part.endswith(".tmp") for part in p.relative_to(remote).parts)]
    held = {p.parent.name + p.name for p in stored if p not in temporary}
    assert held == expected
    assert len(temporary) <= 1, temporary


# -- a DataLoader worker killed under training ----------------------------------------------------
# torchrun's entry for the faulty run: the real Pipes entry point, with one more metrics callback that,
# at train step KILL_AT of the first launch, SIGKILLs a DataLoader worker of this rank (as the OOM
# killer would). PyTorch then fails the trainer with "DataLoader worker (pid X) is killed by signal";
# nothing else is changed.
KILL_A_WORKER_ENTRY = """
import multiprocessing, os, pathlib, signal, sys
sys.path.insert(0, {repo!r})
import training.pipes_entry as entry
marker, kill_at, run = pathlib.Path({marker!r}), {kill_at}, entry.run
def kill_a_loader_worker(record):
    if record.get("kind") == "train" and record.get("step") == kill_at and not marker.exists():
        workers = [p.pid for p in multiprocessing.active_children()]
        marker.write_text(" ".join(map(str, workers)))
        for pid in workers[:1]:
            os.kill(pid, signal.SIGKILL)
entry.run = lambda cfg, callbacks=(): run(cfg, callbacks=[*callbacks, kill_a_loader_worker])
sys.exit(entry.main())
"""
# torchrun as the asset calls it, but with the entry above in place of `-m training.pipes_entry`
TORCHRUN_WITH_ENTRY = """#!{python}
import os, sys
args = sys.argv[1:]
i = args.index("-m")
os.execv({torchrun!r}, [{torchrun!r}, *args[:i], {entry!r}, *args[i + 2:]])
"""
KILL_AT = 5  # after the checkpoint of step 3 (interval 3): the relaunch resumes from step 3 (or 6, below)


@pytest.mark.slow
def test_killed_dataloader_worker_fails_the_run_and_the_retry_resumes_exactly(tmp_path, monkeypatch):
    sys.path.insert(0, str(REPO / "tests" / "training"))
    import torch
    from train_runs import run_config, sample_ids, subprocess_env, train_in_process, train_losses, write_shards

    from platform_assets.defs.training_run.assets import training_run
    from training.checkpoint import find_latest_checkpoint

    for key, value in subprocess_env().items():  # one thread per rank, offline, no inherited RANK
        monkeypatch.setenv(key, value)
    flat = write_shards(tmp_path / "shards")
    one_worker = {"data__num_workers": 1}
    reference = tmp_path / "reference"
    assert train_in_process(run_config(flat, reference, **one_worker)).step == 10

    md5 = "0123456789abcdef0123456789abcdef.dir"
    storage = Storage(str(tmp_path / "platform"))
    storage.write_bytes_atomic("dataset_version/_all/version.json",
                               json.dumps({"md5": md5, "shards_uri": str(flat.parent)}).encode())
    marker, entry, torchrun = tmp_path / "worker-killed", tmp_path / "entry.py", tmp_path / "torchrun"
    entry.write_text(KILL_A_WORKER_ENTRY.format(repo=str(REPO), marker=str(marker), kill_at=KILL_AT))
    torchrun.write_text(TORCHRUN_WITH_ENTRY.format(python=sys.executable, entry=str(entry),
                                                   torchrun=str(Path(sys.executable).with_name("torchrun"))))
    torchrun.chmod(0o755)
    write_config_path = tmp_path / "run.yaml"
    write_config_path.write_text(yaml.safe_dump(run_config(flat, tmp_path / "unused", **one_worker)))
    (tmp_path / "pipeline.yaml").write_text(yaml.safe_dump({
        "storage": {"root": str(tmp_path / "platform")},
        "sources": [{"name": "essays", "format": "jsonl", "path": str(tmp_path)}],
        "training": {"run_config": str(write_config_path), "checkpoint_root": str(tmp_path / "checkpoints"),
                     "torchrun": str(torchrun)},
    }))
    pipeline = PipelineResource(config_path=str(tmp_path / "pipeline.yaml"))
    result = dg.materialize([training_run], resources={"pipeline": pipeline,
                                                       "pipes_subprocess_client": dg.PipesSubprocessClient()},
                            raise_on_error=False)

    assert marker.read_text().strip(), "no DataLoader worker was running at the kill step"
    assert result.success
    assert _retries(result, "training_run") == 1  # the killed worker failed the first launch
    [materialization] = result.asset_materializations_for_node("training_run")
    # the newest checkpoint when the failure surfaced: step 3, or step 6 when the trainer still had the
    # batches of steps 5-6 (one message from the worker holds many micro-batches of this tiny set) and
    # read from the dead worker only after step 6's checkpoint (seen in ~1 of 2 runs on 2 busy cores)
    assert materialization.metadata["resumed_from_step"].value in (3, 6)
    ckpt = tmp_path / "checkpoints" / md5.removesuffix(".dir")
    # the steps trained twice (4, 5) were trained the same way, and the run ends as the clean one did
    assert train_losses(ckpt) == train_losses(reference)
    assert sample_ids(ckpt) == sample_ids(reference)
    final, expected = find_latest_checkpoint(ckpt).load("model"), find_latest_checkpoint(reference).load("model")
    assert all(torch.equal(final[k], expected[k]) for k in expected)
