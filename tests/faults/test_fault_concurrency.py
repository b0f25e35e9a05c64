"""Concurrency: two writers of one output, in real processes, are serialised and both commit whole outputs;
two Dagster runs of one partition both succeed and the instance records both; two incremental dedup runs
that read one signature artifact cannot both commit (the second is refused and told to run again).

The fault is injected by holding the output's lock from the test while both processes start: each then
provably reaches the lock (it logs that it waits) before either may write, the worst interleaving, every
time, instead of a race that happens only sometimes.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import time
from contextlib import ExitStack
from pathlib import Path

import dagster as dg
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from platform_assets.contracts import MANIFEST_FILE, SIGNATURES_FILE
from platform_assets.dedup.settings import DedupSettings
from platform_assets.dedup.stage import deduplicate_outputs
from platform_assets.defs.raw_documents.partitions import source_partitions
from platform_assets.defs.stage_asset import failures_as_dagster
from platform_assets.output_lock import ConcurrentCommitError, output_lock
from platform_assets.schema import DOCUMENTS_SCHEMA, document_id
from platform_assets.storage import Storage

pytestmark = pytest.mark.faults

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
WAITING = "waiting for"  # what output_lock logs when another process holds the output

WRITER = """
import sys, time, pathlib
from platform_assets.storage import Storage
root, rel, tag, proceed = sys.argv[1:5]
committed = pathlib.Path(root, rel, "who.txt")
with Storage(root).staged_dir(rel) as staged:
    # what is committed when this writer enters: one after the other means B finds A's output already there
    print("entered", tag, "saw", committed.read_text() if committed.exists() else "nothing", flush=True)
    staged.write_bytes("who.txt", tag.encode())
    while proceed != "-" and not pathlib.Path(proceed).exists():
        time.sleep(0.02)
print("committed", tag, flush=True)
"""

DEDUP = """
import logging, sys
from platform_assets.dedup.settings import DedupSettings
from platform_assets.dedup.stage import deduplicate_outputs
from platform_assets.output_lock import ConcurrentCommitError
from platform_assets.storage import Storage
logging.basicConfig(level=logging.WARNING)
root, out_rel, *inputs = sys.argv[1:]
try:
    result = deduplicate_outputs(Storage(root), inputs, out_rel, DedupSettings(incremental=True))
except ConcurrentCommitError as err:
    print(err, file=sys.stderr)
    sys.exit(3)
print("committed", result.rows_in, result.rows_out)
"""


class Child:
    """A Python process of the repo with stdout and stderr in files the test can watch."""

    def __init__(self, tmp: Path, name: str, args: list[str], env: dict[str, str] | None = None):
        self.out, self.err = tmp / f"{name}.out", tmp / f"{name}.err"
        with open(self.out, "w") as out, open(self.err, "w") as err:
            self.proc = subprocess.Popen(args, cwd=REPO, stdout=out, stderr=err, env=env)

    def text(self) -> str:
        return self.out.read_text() + self.err.read_text()

    def wait_for(self, needle: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while needle not in self.text():
            if self.proc.poll() is not None:
                raise AssertionError(f"exited {self.proc.returncode} before {needle!r}:\n{self.text()[-3000:]}")
            if time.monotonic() > deadline:
                raise AssertionError(f"no {needle!r} after {timeout} s:\n{self.text()[-3000:]}")
            time.sleep(0.05)

    def finish(self, timeout: float) -> int:
        return self.proc.wait(timeout=timeout)


def python(tmp: Path, name: str, script: str, *args: str, env: dict[str, str] | None = None) -> Child:
    return Child(tmp, name, [sys.executable, "-c", script, *args], env)


def lock_path(storage_root: Path, rel: str) -> str:
    return Storage(str(storage_root))._lock_path(rel)  # the test holds the very lock a writer takes


def assert_intact(output: Path) -> dict:
    """Every file the manifest lists is there with its sha256, nothing else, no hidden leftovers beside it."""
    manifest = json.loads((output / MANIFEST_FILE).read_text())["files"]
    on_disk = sorted(str(p.relative_to(output)) for p in output.rglob("*") if p.is_file())
    assert on_disk == sorted([*manifest, MANIFEST_FILE])
    for name, info in manifest.items():
        assert Storage(str(output)).sha256(name) == info["sha256"], name
    assert [p.name for p in output.parent.iterdir() if p.name.startswith(".")] == []  # no staging, no trash
    locks = output.parents[1] / ".locks"  # outputs here are <root>/<asset>/<partition>
    assert [p for p in locks.rglob("*") if p.is_file()] == []  # the lock is removed by its last holder
    return manifest


def test_a_second_writer_of_one_output_waits_then_commits_whole(tmp_path):
    root, rel = tmp_path / "out", "raw_documents/web"
    release = tmp_path / "release-a"
    with ExitStack() as stack:
        a = python(tmp_path, "a", WRITER, str(root), rel, "A", str(release))
        stack.callback(a.proc.kill)
        a.wait_for("entered A", 60)
        b = python(tmp_path, "b", WRITER, str(root), rel, "B", "-")
        stack.callback(b.proc.kill)
        # before the lock, B's crash repair deleted A's staging directory here and A failed
        b.wait_for(WAITING, 60)
        assert "entered B" not in b.text()
        release.touch()
        assert a.finish(60) == 0, a.text()
        assert b.finish(60) == 0, b.text()
    # one after the other: B entered only once A's commit was in place (wall clocks of two processes
    # cannot order this: A prints its time after releasing the lock, and B may print first, CI saw 7 us)
    assert "entered A saw nothing" in a.text()
    assert "entered B saw A" in b.text()
    assert (root / rel / "who.txt").read_text() == "B"  # the later commit replaced the earlier, whole
    assert set(assert_intact(root / rel)) == {"who.txt"}


def test_a_writer_killed_while_holding_the_lock_blocks_nobody(tmp_path):
    root, rel = tmp_path / "out", "raw_documents/web"
    a = python(tmp_path, "a", WRITER, str(root), rel, "A", str(tmp_path / "never"))
    try:
        a.wait_for("entered A", 60)
    finally:
        a.proc.kill()  # SIGKILL inside the staged dir: the kernel drops its flock, its lock file stays
    assert a.finish(60) == -9
    assert Path(lock_path(root, rel)).exists()
    b = python(tmp_path, "b", WRITER, str(root), rel, "B", "-")
    assert b.finish(60) == 0, b.text()
    assert WAITING not in b.text()  # a dead holder's file is not a held lock
    assert (root / rel / "who.txt").read_text() == "B"
    assert set(assert_intact(root / rel)) == {"who.txt"}  # A's staging cleared, B's lock removed


WORDS = "data shard token model train valid corpus filter clean dedup split pack index byte text page".split()


def write_cleaned(root: Path, source: str, texts: list[str]) -> None:
    """A committed cleaned_documents partition, as the cleaning stage leaves it."""
    uris = [f"{source}.jsonl#line={i + 1}" for i in range(len(texts))]
    n = len(texts)
    table = pa.table({
        "id": [document_id(source, u, t) for u, t in zip(uris, texts, strict=True)],
        "source": [source] * n, "text": pa.array(texts, pa.large_string()), "modality": ["text"] * n,
        "uri": uris, "license": pa.nulls(n, pa.string()), "meta": pa.nulls(n, pa.string()),
        "ingested_at": pa.array([1_700_000_000_000 + i for i in range(n)], pa.timestamp("ms", tz="UTC")),
        "media": pa.nulls(n, DOCUMENTS_SCHEMA.field("media").type),
    }, schema=DOCUMENTS_SCHEMA)
    with Storage(str(root)).staged_dir(f"cleaned_documents/{source}") as staged:
        with staged.open_output("part-00000.parquet") as f:
            pq.write_table(table, f)


def test_two_incremental_dedup_runs_from_one_signature_version_cannot_both_commit(tmp_path):
    rng = random.Random(11)
    essays = [" ".join(rng.choice(WORDS) + str(rng.randrange(60)) for _ in range(200)) for _ in range(50)]
    root, out = tmp_path / "out", "deduplicated_documents/_all"
    write_cleaned(root, "web", essays[:30])
    first = deduplicate_outputs(Storage(str(root)), ["cleaned_documents/web"], out, DedupSettings(incremental=True))
    assert first.rows_out == 30
    write_cleaned(root, "crawl", essays[30:])  # 20 new documents for the next incremental run
    inputs = ["cleaned_documents/web", "cleaned_documents/crawl"]

    with ExitStack() as stack:
        runs = []
        stack.callback(lambda: [run.proc.kill() for run in runs])
        with output_lock(lock_path(root, out), "held by the test"):
            runs += [python(tmp_path, name, DEDUP, str(root), out, *inputs) for name in ("a", "b")]
            for run in runs:  # both read version 1 of _signatures, computed, and wait to commit
                run.wait_for(WAITING, 120)
        codes = sorted(run.finish(120) for run in runs)
    assert codes == [0, 3], [run.text()[-2000:] for run in runs]
    refused = next(run for run in runs if run.proc.returncode == 3).text()
    assert f"{root / out} changed while this run was computing from it" in refused and "run again" in refused
    committed = next(run for run in runs if run.proc.returncode == 0).text()
    assert "committed 20 50" in committed  # 20 new documents deduplicated against 30 accepted: 50 kept

    assert SIGNATURES_FILE in assert_intact(root / out)
    assert pq.read_table(root / out / SIGNATURES_FILE).num_rows == 50  # every kept document's signature once
    again = deduplicate_outputs(Storage(str(root)), inputs, out, DedupSettings(incremental=True))
    assert (again.rows_in, again.rows_out, again.carried_over) == (0, 50, 50)  # the re-run finds nothing new
    # in Dagster the asset's retry policy runs that re-run itself, with the message and no traceback
    with pytest.raises(dg.Failure) as failure, failures_as_dagster("deduplicated_documents"):
        raise ConcurrentCommitError("changed while this run was computing from it")
    assert failure.value.allow_retries and failure.value.metadata["transient"].value is True


@pytest.mark.slow
def test_two_dagster_runs_of_one_partition_both_succeed_and_the_instance_records_both(tmp_path):
    web = tmp_path / "src" / "web"
    web.mkdir(parents=True)
    (web / "a.jsonl").write_text("".join(json.dumps({"text": f"page {i} " * 20}) + "\n" for i in range(300)))
    root = tmp_path / "out"
    config = {"storage": {"root": str(root)}, "sources": [{"name": "web", "format": "jsonl", "path": str(web)}]}
    (tmp_path / "pipeline.yaml").write_text(yaml.safe_dump(config))
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(REPO / "dagster_home" / "dagster.yaml", home / "dagster.yaml")
    env = {**os.environ, "DAGSTER_HOME": str(home), "PLATFORM_CONFIG": str(tmp_path / "pipeline.yaml")}
    with dg.DagsterInstance.from_config(str(home)) as instance:
        instance.add_dynamic_partitions(source_partitions.name, ["web"])

    cli = [str(BIN / "dagster"), "asset", "materialize", "-m", "platform_assets.definitions",
           "--select", "raw_documents", "--partition", "web"]
    with ExitStack() as stack:
        runs = []
        stack.callback(lambda: [run.proc.kill() for run in runs])
        with output_lock(lock_path(root, "raw_documents/web"), "held by the test"):
            runs += [Child(tmp_path, name, cli, env) for name in ("a", "b")]
            for run in runs:
                run.wait_for(WAITING, 240)  # both runs started and reached the output at once
        for run in runs:
            assert run.finish(240) == 0, run.text()[-3000:]
            assert "RUN_SUCCESS" in run.text()

    with dg.DagsterInstance.from_config(str(home)) as instance:
        runs_recorded = instance.get_runs()
        assert len(runs_recorded) == 2
        assert {r.status for r in runs_recorded} == {dg.DagsterRunStatus.SUCCESS}
        events = instance.fetch_materializations(dg.AssetKey("raw_documents"), limit=10).records
        assert sorted(e.run_id for e in events) == sorted(r.run_id for r in runs_recorded)
        assert {e.partition_key for e in events} == {"web"}
        rows = {e.asset_materialization.metadata["rows"].value for e in events}
        assert rows == {300}  # each run committed the whole partition
    assert_intact(root / "raw_documents" / "web")
