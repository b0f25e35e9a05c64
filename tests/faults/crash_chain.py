"""Two small projects for the crash tests: a reference built cleanly, and one whose runs get killed.

Both read the same source files (ids and uris hash the location, so shared files give the same bytes).
The crash project is first built from a smaller corpus (v1), then the sources grow (v2) and the
reference is built from them: every asset of the crash project then holds an old complete output that
differs from the new one, so a test can tell "the old version" from "the new one" from "a mix".

Killed runs are forked from the test process (the imports, ~3 s a process, are paid once) and run the
asset through `dg.materialize` on a real SQLite DagsterInstance in the project's DAGSTER_HOME.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import multiprocessing
import os
import shutil
import signal
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import dagster as dg
import yaml
from dagster import ExecuteInProcessResult
from dvc_project import init_dvc_project, write_tiny_run_config

from platform_assets.contracts import MANIFEST_FILE
from platform_assets.defs.cleaned_documents.assets import cleaned_documents
from platform_assets.defs.dataset_splits.assets import dataset_splits
from platform_assets.defs.dataset_version.assets import dataset_version
from platform_assets.defs.dedup_band_buckets.assets import ALL_BUCKETS_RUN_TAGS, dedup_band_buckets
from platform_assets.defs.dedup_signatures.assets import dedup_signatures
from platform_assets.defs.deduplicated_documents.assets import deduplicated_documents
from platform_assets.defs.packed_shards.assets import packed_shards
from platform_assets.defs.raw_documents.assets import raw_documents
from platform_assets.defs.raw_documents.partitions import source_partitions
from platform_assets.defs.resources import PipelineResource
from platform_assets.defs.tokenized_documents.assets import tokenized_documents
from platform_assets.defs.tokenizer.assets import tokenizer
from platform_assets.defs.training_run.assets import training_run
from platform_assets.storage import FAULT_KILL_AT_ENV

REPO = Path(__file__).resolve().parents[2]
SOURCES = ("py", "kernel")
ASSETS: dict[str, dg.AssetsDefinition] = {a.key.to_user_string(): a for a in (
    raw_documents, cleaned_documents, dedup_signatures, dedup_band_buckets, deduplicated_documents, dataset_splits,
    tokenizer, tokenized_documents, packed_shards, dataset_version, training_run)}
PARTITIONED = ("raw_documents", "cleaned_documents", "dedup_signatures")
# Real prose shipped with the repo (sample_data/), which passes the default cleaning recipe: v1 holds
# 12 + 8 documents, v2 18 + 12 (~150 kB of text; the whole chain builds in ~6 s on 2 cores).
CORPUS_SIZES = {"v1": {"py": 12, "kernel": 8}, "v2": {"py": 18, "kernel": 12}}
SOURCE_MTIME = 1_700_000_000  # ingested_at is the file's mtime: fixed, so both projects agree


def write_sources(directory: Path, version: str) -> None:
    with gzip.open(REPO / "sample_data" / "real_docs.jsonl.gz", "rt") as f:
        docs = [json.loads(line) for line in f]
    prefixes = {"py": "python", "kernel": "linux"}
    directory.mkdir(parents=True, exist_ok=True)
    for source, n in CORPUS_SIZES[version].items():
        texts = [d["text"] for d in docs if d["source"].startswith(prefixes[source])][:n]
        path = directory / f"{source}.jsonl"
        path.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
        os.utime(path, (SOURCE_MTIME, SOURCE_MTIME))


@dataclass(frozen=True)
class Project:
    """A git + DVC repository holding the storage root, its pipeline config, remote and DAGSTER_HOME."""

    root: Path
    remote: Path
    home: Path

    @property
    def config_path(self) -> Path:
        return self.root / "configs" / "pipeline.yaml"

    @property
    def data(self) -> Path:
        return self.root / "data" / "platform"

    def output(self, asset: str, partition: str | None = None) -> Path:
        return self.data / asset / (partition or "_all")

    @property
    def checkpoints(self) -> Path:
        return self.root / "data" / "checkpoints"

    def instance(self) -> dg.DagsterInstance:
        return dg.DagsterInstance.from_config(str(self.home))

    def resources(self) -> dict[str, object]:
        return {"pipeline": PipelineResource(config_path=str(self.config_path)),
                "pipes_subprocess_client": dg.PipesSubprocessClient()}


def make_project(base: Path, sources: Path) -> Project:
    root, remote, home = base / "project", base / "remote", base / "dagster_home"
    init_dvc_project(root)
    home.mkdir()
    # the shipped instance config (SQLite in DAGSTER_HOME, the `dvc` and `gpu` pools)
    shutil.copy(REPO / "dagster_home" / "dagster.yaml", home / "dagster.yaml")
    write_tiny_run_config(root, checkpoint_interval=2)
    (root / "configs" / "pipeline.yaml").write_text(yaml.safe_dump({
        "storage": {"root": "../data/platform"},
        "sources": [{"name": s, "format": "jsonl", "path": str(sources / f"{s}.jsonl")} for s in SOURCES],
        "tokenizer": {"source": "train", "vocab_size": 400, "min_frequency": 1},
        "packing": {"seq_len": 64, "samples_per_shard": 16},
        "versioning": {"dvc_repo": "..", "remote": {"name": "store", "url": str(remote)}},
        "training": {"run_config": "run.yaml", "checkpoint_root": "../data/checkpoints"},
    }))
    with project_instance(Project(root, remote, home)) as instance:
        instance.add_dynamic_partitions(source_partitions.name, list(SOURCES))
    return Project(root, remote, home)


class project_instance:  # noqa: N801 - used as a context manager, like dg.instance_for_test
    """The project's DagsterInstance, opened for one block and disposed (SQLite handles do not cross
    a fork)."""

    def __init__(self, project: Project):
        self.project = project

    def __enter__(self) -> dg.DagsterInstance:
        self.instance = self.project.instance()
        return self.instance

    def __exit__(self, *exc) -> None:
        self.instance.dispose()


def materialize(project: Project, asset: str, partition: str | None = None) -> ExecuteInProcessResult:
    """One run of `asset` (of one partition; the band buckets without one: all 8 in one run, as the CLI)."""
    tags = ALL_BUCKETS_RUN_TAGS if asset == "dedup_band_buckets" and partition is None else None
    with project_instance(project) as instance:
        return dg.materialize([ASSETS[asset]], partition_key=partition, resources=project.resources(),
                              instance=instance, raise_on_error=False, tags=tags)


def build_chain(project: Project, until: str = "dataset_version") -> None:
    for name in ASSETS:
        for partition in SOURCES if name in PARTITIONED else (None,):
            result = materialize(project, name, partition)
            assert result.success, f"{name}[{partition}] failed in the clean build"
        if name == until:
            return


def _child(project: Project, asset: str, partition: str | None, env: dict[str, str]) -> None:
    os.environ.update(env)
    result = materialize(project, asset, partition)
    os._exit(0 if result.success else 1)


def run_killed(project: Project, asset: str, partition: str | None = None, kill_at: str | None = None,
               env: dict[str, str] | None = None,
               kill_when: Callable[[], bool] | None = None, timeout_s: float = 120) -> int:
    """Materialize `asset` in a forked child that dies: at the named storage fault point (`kill_at`,
    see storage.FAULT_KILL_AT_ENV), from inside a wrapper it runs (`env`), or from here as soon as
    `kill_when()` is true. Returns the child's exit code (-9: SIGKILL)."""
    env = {**(env or {}), **({FAULT_KILL_AT_ENV: kill_at} if kill_at else {})}
    proc = multiprocessing.get_context("fork").Process(target=_child, args=(project, asset, partition, env))
    proc.start()
    if kill_when is not None:
        import time

        deadline = time.monotonic() + timeout_s
        while not kill_when():
            assert proc.is_alive(), f"{asset} ended (exit {proc.exitcode}) before the kill point"
            assert time.monotonic() < deadline, f"{asset} never reached the kill point"
            time.sleep(0.02)
        os.kill(proc.pid, signal.SIGKILL)
    proc.join(timeout_s)
    assert proc.exitcode is not None, f"{asset} hung"
    return proc.exitcode


def snapshot(directory: Path) -> dict[str, bytes]:
    """Every file a reader lists (hidden staging/trash/tmp entries are not listed by Storage)."""
    if not directory.exists():
        return {}
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*"))
            if p.is_file() and not any(part.startswith(".") for part in p.relative_to(directory).parts)}


def manifest_problems(files: dict[str, bytes]) -> list[str]:
    """What a reader would find wrong in a listed output: a file the manifest does not list, or a
    listed file that is missing or whose size or sha256 differs."""
    if MANIFEST_FILE not in files:
        return [f"no {MANIFEST_FILE} among {sorted(files)[:5]}"]
    listed = json.loads(files[MANIFEST_FILE])["files"]
    problems = [f"unlisted {n}" for n in sorted(set(files) - set(listed) - {MANIFEST_FILE})]
    for name, info in sorted(listed.items()):
        data = files.get(name)
        if data is None:
            problems.append(f"missing {name}")
        elif len(data) != info["bytes"] or hashlib.sha256(data).hexdigest() != info["sha256"]:
            problems.append(f"{name} differs from its manifest entry")
    return problems


def copy_outputs(source: Project, target: Project, assets: list[str]) -> None:
    """Give `target` the committed outputs of `source` for these assets (upstream of the one under test)."""
    for name in assets:
        src, dst = source.data / name, target.data / name
        if dst.exists():
            shutil.rmtree(dst)
        shutil.copytree(src, dst)


DYING_DVC = """#!{python}
# A `dvc` that dies like a machine losing power: FAULT_DVC_KILL_AT=after:<command> runs the real command,
# then SIGKILLs its caller (the Dagster run) and itself; push:<n> copies <n> objects to the remote, writes
# half of the next one (into DVC's temporary name) and dies the same way.
import os, signal, sys

from dvc.cli import main


def die():
    os.kill(os.getppid(), signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)


point, command = os.environ["FAULT_DVC_KILL_AT"], sys.argv[1]
if point.startswith("push:") and command == "push":
    import dvc_objects.fs.local as local

    real_copyfile, copied, limit = local.copyfile, [], int(point.split(":")[1])

    def copyfile(src, dest, *args, **kwargs):
        if len(copied) == limit:
            with open(src, "rb") as f, open(dest, "wb") as out:
                out.write(f.read(os.path.getsize(src) // 2))
            die()
        copied.append(src)
        return real_copyfile(src, dest, *args, **kwargs)

    local.copyfile = copyfile
code = main(sys.argv[1:])
if point == f"after:{{command}}":
    die()
sys.exit(code)
"""


def dying_dvc(directory: Path) -> Path:
    """The wrapper above, as an executable the platform finds through $PLATFORM_DVC."""
    path = directory / "dvc"
    path.write_text(DYING_DVC.format(python=REPO / ".venv-dvc" / "bin" / "python"))
    path.chmod(0o755)
    return path
