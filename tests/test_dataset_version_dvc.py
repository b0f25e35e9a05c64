"""DVC versioning with the real `dvc` CLI (from .venv-dvc) and a real local remote."""

import hashlib
import shutil
import subprocess
from pathlib import Path

import pytest

from platform_assets.versioning.dvc_repo import DvcError, DvcRepo, find_dvc
from platform_assets.versioning.settings import DvcRemote

try:
    find_dvc(None, Path.cwd())
except DvcError:  # pragma: no cover - setup.sh always creates .venv-dvc; say why instead of erroring
    pytest.skip("no dvc executable (run scripts/setup.sh)", allow_module_level=True)


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


def _tree(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    _git(root, "init", "-q")
    _git(root, "config", "user.email", "t@example.org")
    _git(root, "config", "user.name", "t")
    (root / ".gitignore").write_text("/data/\n")
    (root / "dvc.yaml").write_text("stages:\n  shards:\n    cmd: echo built by the platform\n    outs:\n"
                                   "      - data/shards\n")
    shards = root / "data" / "shards"
    (shards / "flat").mkdir(parents=True)
    (shards / "flat" / "shard-00000.tokens.bin").write_bytes(bytes(range(256)) * 64)
    (shards / "flat" / "index.json").write_text('{"format": "flat"}')
    return root


def test_stage_output_is_committed_pushed_and_pulled_on_a_fresh_clone(repo: Path, tmp_path: Path):
    dvc = DvcRepo(repo)
    dvc.ensure_initialized()
    dvc.configure_remote(DvcRemote(name="store", url=str(tmp_path / "remote")), repo)
    version = dvc.push(dvc.record(repo / "data" / "shards"), "store")
    assert version.stage == "shards" and version.recorded_in == "dvc.lock"
    assert version.md5.endswith(".dir") and version.files == 2 and version.pushed
    assert version.bytes == 256 * 64 + len('{"format": "flat"}')
    assert any((tmp_path / "remote").rglob("*")), "dvc push wrote nothing to the remote"
    assert dvc.missing_in_remote(version, "store") == []
    shutil.rmtree(tmp_path / "remote")
    (tmp_path / "remote").mkdir()
    assert dvc.missing_in_remote(version, "store") != []  # the check behind the asset's gate can fail
    dvc.push(version, "store")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "dataset version")
    rev, dirty = dvc.git_state()
    assert rev == _git(repo, "rev-parse", "HEAD").strip() and dirty is False
    original = _tree(repo / "data" / "shards")

    clone = tmp_path / "clone"
    _git(tmp_path, "clone", "-q", str(repo), str(clone))
    assert not (clone / "data").exists()
    fresh = DvcRepo(clone)
    fresh.configure_remote(DvcRemote(name="store", url=str(tmp_path / "remote")), clone)
    fresh.pull("shards")
    assert _tree(clone / "data" / "shards") == original

    # delete the data and the local cache: the remote alone restores it, byte for byte
    shutil.rmtree(repo / "data")
    shutil.rmtree(repo / ".dvc" / "cache")
    dvc.pull("shards")
    assert _tree(repo / "data" / "shards") == original


def test_changed_content_is_a_new_version_and_same_content_the_same(repo: Path):
    dvc = DvcRepo(repo)
    first = dvc.record(repo / "data" / "shards")
    assert dvc.record(repo / "data" / "shards").md5 == first.md5
    path = repo / "data" / "shards" / "flat" / "shard-00000.tokens.bin"
    data = bytearray(path.read_bytes())
    data[100] ^= 1
    path.write_bytes(bytes(data))
    assert dvc.record(repo / "data" / "shards").md5 != first.md5


def test_directory_without_a_stage_is_added_with_a_dvc_file(repo: Path):
    other = repo / "exports" / "shards"
    other.mkdir(parents=True)
    (other / "a.bin").write_bytes(b"abc")
    version = DvcRepo(repo).record(other)
    assert version.stage is None and version.recorded_in == "exports/shards.dvc"
    assert (repo / "exports" / "shards.dvc").is_file() and version.files == 1


def test_directory_outside_the_repository_is_a_clear_error(repo: Path, tmp_path: Path):
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    with pytest.raises(DvcError, match="is not inside the DVC repository"):
        DvcRepo(repo).record(outside)


def test_dvc_failure_names_the_command_and_dvcs_message(repo: Path):
    dvc = DvcRepo(repo)
    dvc.ensure_initialized()
    with pytest.raises(DvcError, match=r"`dvc pull --quiet --force nosuchstage` failed"):
        dvc.pull("nosuchstage")
