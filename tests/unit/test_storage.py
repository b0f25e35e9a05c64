"""The filesystem layer: atomic directory commits survive crashes; manifests describe outputs."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from platform_assets.storage import MANIFEST_NAME, Storage, manifest_version


def _files(p: Path) -> dict[str, bytes]:
    return {str(f.relative_to(p)): f.read_bytes() for f in sorted(p.rglob("*")) if f.is_file()}


def test_staged_dir_commits_files_and_manifest(tmp_path):
    st = Storage(str(tmp_path))
    with st.staged_dir("asset/part") as d:
        d.write_bytes("a.bin", b"alpha")
        d.write_bytes("sub/b.bin", b"beta")
    out = tmp_path / "asset" / "part"
    manifest = json.loads((out / MANIFEST_NAME).read_text())["files"]
    assert set(manifest) == {"a.bin", "sub/b.bin"}
    assert manifest["a.bin"] == {"bytes": 5, "sha256": st.sha256("asset/part/a.bin")}
    assert [p.name for p in (tmp_path / "asset").iterdir()] == ["part"]  # no staging leftovers
    assert manifest_version(manifest) == manifest_version(dict(reversed(list(manifest.items()))))


def test_exception_mid_write_leaves_previous_output_intact(tmp_path):
    st = Storage(str(tmp_path))
    with st.staged_dir("asset/p") as d:
        d.write_bytes("part-0", b"old")
    before = _files(tmp_path / "asset" / "p")
    with pytest.raises(RuntimeError), st.staged_dir("asset/p") as d:
        d.write_bytes("part-0", b"new and half")
        raise RuntimeError("disk full")
    assert _files(tmp_path / "asset" / "p") == before
    assert sorted(os.listdir(tmp_path / "asset")) == ["p"]


def test_recovers_from_a_crash_between_the_two_renames(tmp_path):
    st = Storage(str(tmp_path))
    with st.staged_dir("asset/p") as d:
        d.write_bytes("x", b"committed")
    # the state a crash leaves after `final -> trash` and before `staging -> final`
    os.rename(tmp_path / "asset" / "p", tmp_path / "asset" / ".p.trash-abc")
    (tmp_path / "asset" / ".p.staging-def").mkdir()
    with st.staged_dir("asset/p") as d:
        assert (tmp_path / "asset" / "p" / "x").read_bytes() == b"committed"  # restored before writing
        d.write_bytes("x", b"second")
    assert (tmp_path / "asset" / "p" / "x").read_bytes() == b"second"
    assert sorted(os.listdir(tmp_path / "asset")) == ["p"]


def test_write_bytes_atomic_replaces_whole_file(tmp_path):
    st = Storage(str(tmp_path))
    st.write_bytes_atomic("idx/index.json", b"{}")
    st.write_bytes_atomic("idx/index.json", b'{"v": 2}')
    assert st.read_json("idx/index.json") == {"v": 2}
    assert os.listdir(tmp_path / "idx") == ["index.json"]


def test_list_files_patterns_and_hidden(tmp_path):
    for rel in ("a.jsonl", "n/b.jsonl", "n/c.txt", ".git/d.jsonl", "n/.e.jsonl.swp"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("x")
    st = Storage(str(tmp_path))
    names = [Path(e.path).name for e in st.list_files("", "*.jsonl")]
    assert names == ["a.jsonl", "b.jsonl"]
    assert len(st.list_files("", ("*.jsonl", "*.txt"))) == 3
    assert st.list_files("missing") == []


def test_unsupported_scheme_is_a_clear_error():
    with pytest.raises(ValueError, match="unsupported location 'gs://b/x'"):
        Storage("gs://b/x")


CRASHING_INGEST = """
import sys, time
from platform_assets.config import load_config
from platform_assets.storage import Storage
from platform_assets.ingest import writer
from platform_assets.ingest.run import ingest_source

original = writer.DocumentWriter._write
def slow_write(self, batch, nbytes):
    original(self, batch, nbytes)
    print("batch written", flush=True)
    time.sleep(0.2)
writer.DocumentWriter._write = slow_write
cfg = load_config(sys.argv[1])
ingest_source(cfg, "a", Storage(cfg.storage_root), "raw_documents/a")
"""


def test_sigkill_mid_ingest_keeps_previous_output_and_rerun_is_identical(tmp_path, write_config):
    (tmp_path / "a.jsonl").write_bytes(b"".join(b'{"text": "doc %d"}\n' % i for i in range(5000)))
    cfg = write_config([{"name": "a", "format": "jsonl", "path": str(tmp_path / "a.jsonl")}],
                       io={"batch_rows": 100})
    from platform_assets.ingest.run import ingest_source

    st = Storage(cfg.storage_root)
    ingest_source(cfg, "a", st, "raw_documents/a")
    out = tmp_path / "out" / "raw_documents" / "a"
    before = _files(out)

    proc = subprocess.Popen([sys.executable, "-c", CRASHING_INGEST, str(tmp_path / "pipeline.yaml")],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "batch written"  # killed mid-run, after a write
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert _files(out) == before  # the previous output is untouched
    assert any(".staging-" in p for p in os.listdir(out.parent))  # the crash left its staging dir

    time.sleep(0.01)
    ingest_source(cfg, "a", st, "raw_documents/a")
    assert _files(out) == before  # the rerun gives the same bytes
    assert sorted(os.listdir(out.parent)) == ["a"]  # and cleared the leftovers
