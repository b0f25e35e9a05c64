"""Disk full while a stage writes its output: the run fails at once with an error naming the asset and
the output path, the previous output stays exactly as it was, and the run after space is freed writes
the same bytes as a run that never saw the fault.

Two ways to fill the disk: a real 4 MiB tmpfs filled with ballast (ENOSPC, needs root to mount; skipped
otherwise), and RLIMIT_FSIZE in a child process (EFBIG: any file over the limit fails, works anywhere).
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest
import yaml

from platform_assets.defs.raw_documents.assets import raw_documents
from platform_assets.defs.raw_documents.partitions import source_partitions
from platform_assets.defs.resources import PipelineResource

pytestmark = pytest.mark.faults

REPO = Path(__file__).resolve().parents[2]
VOCAB = [f"w{i:05d}" for i in range(20_000)]  # a wide vocabulary: zstd keeps ~half the bytes


def _write_source(path: Path, documents: int, words: int, seed: int) -> None:
    """A JSONL source; its mtime is fixed, since `ingested_at` is the file's mtime."""
    rng = random.Random(seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as f:
        for _ in range(documents):
            f.write(json.dumps({"text": " ".join(rng.choice(VOCAB) for _ in range(words))}) + "\n")
    os.utime(path, (1_700_000_000, 1_700_000_000))


def _tree(root: Path) -> dict[str, str]:
    """Every file under root (hidden staging leftovers included) with its sha256."""
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def _pipeline(tmp_path: Path, name: str, storage_root: Path, source: Path) -> PipelineResource:
    config = tmp_path / f"{name}.yaml"
    config.write_text(yaml.safe_dump({"storage": {"root": str(storage_root)},
                                      "sources": [{"name": "docs", "format": "jsonl", "path": str(source)}]}))
    return PipelineResource(config_path=str(config))


def _materialize(pipeline: PipelineResource) -> tuple[dg.ExecuteInProcessResult, dg.DagsterInstance]:
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions(source_partitions.name, ["docs"])
    result = dg.materialize([raw_documents], partition_key="docs", resources={"pipeline": pipeline},
                            instance=instance, raise_on_error=False)
    return result, instance


@pytest.fixture
def small_filesystem(tmp_path: Path):
    mount_point = tmp_path / "fs"
    mount_point.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount_point)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({mounted.stderr.strip()}); the RLIMIT_FSIZE test covers EFBIG")
    yield mount_point
    subprocess.run(["umount", "-l", str(mount_point)], check=True)


def test_disk_full_fails_naming_asset_and_path_keeps_previous_output_and_recovers(small_filesystem, tmp_path):
    source = tmp_path / "src" / "docs.jsonl"
    _write_source(source, documents=40, words=30, seed=1)  # ~8 KB of text
    root = small_filesystem / "platform"
    pipeline = _pipeline(tmp_path, "full", root, source)
    first, _ = _materialize(pipeline)
    assert first.success
    output = root / "raw_documents" / "docs"
    previous = _tree(output.parent)

    # the input grows to ~2 MB of text (~1 MB as a zstd part) while the filesystem has 64 KiB left
    _write_source(source, documents=500, words=500, seed=2)
    ballast = small_filesystem / "ballast"
    stat = os.statvfs(small_filesystem)
    ballast.write_bytes(b"\0" * (stat.f_bavail * stat.f_frsize - 64 * 1024))
    full, instance = _materialize(pipeline)
    assert not full.success
    [failure] = [e for e in full.all_events if e.event_type_value == "STEP_FAILURE"]
    message = failure.step_failure_data.error.message
    assert "raw_documents: " in message and str(output) in message, message
    assert "no space left writing" in message and "previous output there is unchanged" in message
    # a full disk is not transient: no retries burnt waiting for space
    assert not [e for e in full.all_events if e.event_type_value == "STEP_RESTARTED"]
    assert failure.step_failure_data.user_failure_data.metadata["transient"].value is False
    assert _tree(output.parent) == previous  # old output intact, no staging leftovers

    ballast.unlink()
    recovered, _ = _materialize(pipeline)
    assert recovered.success
    clean_root = tmp_path / "clean"
    clean, _ = _materialize(_pipeline(tmp_path, "clean", clean_root, source))
    assert clean.success
    recovered_files = _tree(output)
    assert recovered_files == _tree(clean_root / "raw_documents" / "docs")
    assert len(recovered_files) >= 3  # a part, the quarantine, the manifest


# Runs ingest_source (no Dagster) in a child whose files may not exceed the limit: the kernel's SIGXFSZ
# is ignored so that the write fails with EFBIG instead of killing the process.
EFBIG_CHILD = """
import json, resource, signal, sys
from platform_assets.config import load_config
from platform_assets.ingest.run import ingest_source
from platform_assets.storage import Storage, StorageFullError
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
limit = int(sys.argv[2])
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
cfg = load_config(sys.argv[1])
try:
    result = ingest_source(cfg, "docs", Storage(cfg.storage_root), "raw_documents/docs")
    print(json.dumps({"rows": result.rows}))
except StorageFullError as err:
    print(json.dumps({"errno": err.errno, "message": str(err), "output": err.output_uri}))
"""


def _ingest_with_file_limit(config: Path, limit: int) -> dict:
    proc = subprocess.run([sys.executable, "-c", EFBIG_CHILD, str(config), str(limit)], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_file_size_limit_fails_with_efbig_naming_the_output_and_keeps_previous(tmp_path):
    source = tmp_path / "src" / "docs.jsonl"
    _write_source(source, documents=40, words=30, seed=1)
    root = tmp_path / "platform"
    config = tmp_path / "limit.yaml"
    config.write_text(yaml.safe_dump({"storage": {"root": str(root)},
                                      "sources": [{"name": "docs", "format": "jsonl", "path": str(source)}]}))
    limit = 256 * 1024  # the first output's part is ~10 KB, the second's ~1 MB
    assert _ingest_with_file_limit(config, limit) == {"rows": 40}
    previous = _tree(root / "raw_documents")

    _write_source(source, documents=500, words=500, seed=2)
    failed = _ingest_with_file_limit(config, limit)
    output = root / "raw_documents" / "docs"
    assert failed["errno"] == errno.EFBIG and failed["output"] == str(output)
    assert failed["message"].startswith(f"[Errno {errno.EFBIG}] no space left writing {output}")
    assert _tree(root / "raw_documents") == previous

    assert _ingest_with_file_limit(config, 64 * 2**20) == {"rows": 500}  # the limit raised: it goes through


def _checkpoint_files(root: Path) -> dict[str, str]:
    return {k: v for k, v in _tree(root).items() if not k.startswith(".")}


def test_training_checkpoint_on_a_full_disk_names_the_file_keeps_the_earlier_ones_and_resumes(small_filesystem):
    import torch

    from training.checkpoint import CheckpointWriteError, list_checkpoints, save_checkpoint

    root = small_filesystem / "checkpoints"
    save_checkpoint(root, 1, {"model": torch.arange(1000.0)}, {"epoch": 0}, keep_last=2)
    earlier = _checkpoint_files(root)
    ballast = small_filesystem / "ballast"
    free = os.statvfs(small_filesystem).f_bavail * os.statvfs(small_filesystem).f_frsize
    ballast.write_bytes(b"\0" * (free - 256 * 1024))  # 256 KiB left; the step-2 model is 1.6 MB

    with pytest.raises(CheckpointWriteError) as failure:
        save_checkpoint(root, 2, {"model": torch.arange(400_000.0)}, {"epoch": 0}, keep_last=2)
    assert failure.value.errno == errno.ENOSPC
    message = str(failure.value)
    # torch alone says "[enforce fail at inline_container.cc] unexpected pos ..."
    assert "checkpoint step 2: No space left on device writing" in message and "model.pt" in message
    assert "earlier checkpoints (steps [1]) are unchanged" in message
    assert _tree(root) == earlier  # step 1 and `latest` byte for byte; the partial step 2 removed

    ballast.unlink()
    save_checkpoint(root, 2, {"model": torch.arange(400_000.0)}, {"epoch": 0}, keep_last=2)
    assert [c.step for c in list_checkpoints(root)] == [1, 2]
    assert torch.equal(torch.load(root / "step-00000002" / "model.pt", weights_only=True), torch.arange(400_000.0))


def test_training_checkpoint_over_the_file_size_limit_fails_with_efbig_naming_the_file(tmp_path):
    root = tmp_path / "checkpoints"
    script = f"""
import errno, resource, signal, sys, torch
from training.checkpoint import CheckpointWriteError, save_checkpoint
save_checkpoint({str(root)!r}, 1, {{"model": torch.zeros(1000)}}, {{}}, keep_last=2)
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # the write fails with EFBIG instead of killing the process
resource.setrlimit(resource.RLIMIT_FSIZE, (256 * 1024, resource.RLIM_INFINITY))
try:
    save_checkpoint({str(root)!r}, 2, {{"model": torch.zeros(200_000)}}, {{}}, keep_last=2)
except CheckpointWriteError as err:
    print(err.errno, err)
"""
    proc = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    code, message = proc.stdout.strip().split(" ", 1)
    assert int(code) == errno.EFBIG, message
    assert f"checkpoint step 2: File too large writing {root}/.tmp-step-00000002-" in message, message
    assert sorted(p.name for p in root.iterdir()) == ["latest", "step-00000001"]
