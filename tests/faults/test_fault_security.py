"""Security: servers listen on loopback by default; a planted secret reaches no output, event log,
metadata or dataset card; nothing unpickles data; hostile paths (tar members, index and manifest
entries, symlinks in a source directory) are refused or quarantined, never followed.
"""

from __future__ import annotations

import ast
import gzip
import io
import json
import re
import secrets
import shutil
import subprocess
import tarfile
from pathlib import Path

import dagster as dg
import numpy as np
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest
import yaml
from dvc_project import init_dvc_project

from platform_assets import cli
from platform_assets.config import ConfigError, load_config
from platform_assets.defs.resources import PipelineResource, default_pipeline_resource
from platform_assets.ingest.run import QUARANTINE_FILE, ingest_source
from platform_assets.manifest_file import ManifestError, parse_manifest
from platform_assets.media_shards.formats import webdataset as media_webdataset
from platform_assets.packing.formats import webdataset as token_webdataset
from platform_assets.packing.shard_index import ShardSetError, load_index
from platform_assets.storage import Storage
from platform_assets.tar_members import UnsafeTarMember
from training.data.shard_index import ShardIndexError, read_flat_index

pytestmark = pytest.mark.faults

REPO = Path(__file__).resolve().parents[2]


# -- servers listen on 127.0.0.1 ---------------------------------------------------------------------------
SERVER_PROGRAMS = re.compile(r"dagster dev|dagster-webserver|redis-server|moto\.server|moto_server|http\.server"
                             r"|tensorboard|mlflow (?:ui|server)")
LOOPBACK_FLAG = re.compile(r"(?:-h|--host|-H|--bind)\s+127\.0\.0\.1")
STARTERS = {"Popen", "run", "call", "check_call", "check_output"}
# a command line that runs one of them: optional `$ `, VAR=value assignments, a path to the program
DOC_COMMAND = re.compile(r"\s*(?:\$\s+)?(?:\w+=\S+\s+)*(?:\S*/)?(?:dagster dev|dagster-webserver|redis-server"
                         r"|python3? -m (?:moto\.server|http\.server)|moto_server|tensorboard|mlflow (?:ui|server))\b")


def server_starts_in_python(tree: ast.Module) -> list[tuple[int, bool]]:
    """(line, binds loopback) of each subprocess call that starts a server program, named in the call or in a
    module-level constant it uses (`REDIS = shutil.which("redis-server")`)."""
    programs = {t.id for node in tree.body if isinstance(node, ast.Assign) and SERVER_PROGRAMS.search(ast.unparse(node))
                for t in node.targets if isinstance(t, ast.Name)}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and ast.unparse(node.func).rpartition(".")[2] in STARTERS:
            text = ast.unparse(node)
            names = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
            if SERVER_PROGRAMS.search(text) or names & programs:
                strings = [c.value for c in ast.walk(node) if isinstance(c, ast.Constant) and isinstance(c.value, str)]
                found.append((node.lineno, "127.0.0.1" in strings))
    return found


def server_starts_in_docs(text: str, shell: bool) -> list[tuple[str, bool]]:
    """(command, binds loopback) of each command line that starts a server: inside ``` blocks of Markdown,
    every non-comment line of a shell script; `\\` continuations joined."""
    out, in_code = [], shell
    for line in text.replace("\\\n", " ").splitlines():
        if not shell and line.strip().startswith("```"):
            in_code = not in_code
            continue
        command = line.split("#", 1)[0] if shell else line
        if in_code and DOC_COMMAND.match(command):
            out.append((command.strip(), bool(LOOPBACK_FLAG.search(command))))
    return out


def test_the_binding_checks_tell_loopback_from_every_interface():
    tree = ast.parse('REDIS = shutil.which("redis-server")\n'
                     'subprocess.Popen([REDIS, "--bind", "127.0.0.1"])\nsubprocess.Popen([REDIS, "--port", "1"])\n'
                     'subprocess.run(["dagster-webserver", "-h", "0.0.0.0"])\nsubprocess.run(["ls"])\n')
    assert server_starts_in_python(tree) == [(2, True), (3, False), (4, False)]
    doc = ("```bash\nDAGSTER_HOME=x .venv/bin/dagster dev -m m \\\n  -h 127.0.0.1\ndagster dev -m m\n"
           "ui.py     runs dagster dev for you\n```\ndagster dev in prose\n")
    assert server_starts_in_docs(doc, shell=False) == [
        ("DAGSTER_HOME=x .venv/bin/dagster dev -m m    -h 127.0.0.1", True), ("dagster dev -m m", False)]


def test_every_published_port_and_documented_or_tested_server_binds_loopback():
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    published = {name: svc.get("ports", []) for name, svc in compose["services"].items()}
    assert published["minio"] and published["dagster-webserver"]  # the UI and the MinIO console are published
    for name, ports in published.items():
        for port in ports:
            # host_ip:host_port:container_port; inside the container 0.0.0.0 is right, on the host it is not
            assert str(port).startswith("127.0.0.1:"), f"docker-compose.yml: {name} publishes {port!r} on all " \
                                                       f"interfaces"
    starts = []
    for path in [REPO / "README.md", REPO / "training" / "README.md", *REPO.glob("benchmarks/*.md"),
                 *REPO.glob("scripts/*.sh"), REPO / ".ci" / "run"]:
        if path.is_file():
            starts += [(f"{path.relative_to(REPO)}: {cmd}", ok)
                       for cmd, ok in server_starts_in_docs(path.read_text(), shell=path.suffix != ".md")]
    for path in sorted(REPO.glob("tests/**/*.py")):
        if path != Path(__file__):
            starts += [(f"{path.relative_to(REPO)}:{line}", ok)
                       for line, ok in server_starts_in_python(ast.parse(path.read_text()))]
    assert [where for where, ok in starts if not ok] == []
    # README's `dagster dev`, ui_helpers' dagster-webserver, test_dedup_redis's redis-server, test_s3's moto
    assert len(starts) >= 4, starts


# -- pickle ------------------------------------------------------------------------------------------------
def unsafe_deserialisation(tree: ast.AST) -> list[tuple[int, str]]:
    """Calls that may run code from the bytes they read: pickle/dill/cloudpickle/joblib/marshal loads,
    pandas.read_pickle, yaml.load without SafeLoader, torch.load without weights_only=True, numpy.load
    with allow_pickle=True."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = ast.unparse(node.func)
        kwargs = {k.arg: ast.unparse(k.value) for k in node.keywords if k.arg}
        owner, _, attr = name.rpartition(".")
        if owner.split(".")[-1] in {"pickle", "cPickle", "dill", "cloudpickle", "joblib", "marshal", "shelve"} \
                and attr in {"load", "loads", "open", "Unpickler"}:
            found.append((node.lineno, name))
        elif attr == "read_pickle" or name in {"yaml.unsafe_load", "yaml.full_load"}:
            found.append((node.lineno, name))
        elif name == "yaml.load" and "Safe" not in kwargs.get("Loader", "") and \
                not any("Safe" in ast.unparse(a) for a in node.args[1:]):
            found.append((node.lineno, name))
        elif name == "torch.load" and kwargs.get("weights_only") != "True":
            found.append((node.lineno, name))
        elif attr == "load" and owner in {"np", "numpy"} and kwargs.get("allow_pickle") == "True":
            found.append((node.lineno, name))
    return found


def test_the_lint_rule_flags_each_unsafe_load():
    planted = ("pickle.load(f)\npickle.loads(b)\ntorch.load(p)\ntorch.load(p, weights_only=False)\n"
               "np.load(p, allow_pickle=True)\nyaml.load(s)\npd.read_pickle(p)\njoblib.load(p)\n"
               "torch.load(p, weights_only=True)\nnp.load(p)\nyaml.load(s, Loader=yaml.SafeLoader)\n"
               "yaml.safe_load(s)\n")
    assert [line for line, _ in unsafe_deserialisation(ast.parse(planted))] == [1, 2, 3, 4, 5, 6, 7, 8]


def test_no_code_unpickles_data():
    roots = [REPO / d for d in ("platform_assets", "training", "benchmarks", "scripts", "tests")]
    offenders = []
    for path in sorted(p for root in roots for p in root.rglob("*.py") if ".venv" not in p.parts):
        if path == Path(__file__):
            continue  # the lint rule's own planted examples
        offenders += [f"{path.relative_to(REPO)}:{line}: {name}"
                      for line, name in unsafe_deserialisation(ast.parse(path.read_text(), str(path)))]
    assert offenders == []


# -- hostile tar members, index entries and manifest names ------------------------------------------------
def npy(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, array, allow_pickle=False)
    return buf.getvalue()


def hostile_tar(path: Path, member: str) -> None:
    """A one-sample token shard (input_ids + seqlens) whose second member is `member`: a name, or
    `symlink:` / `hardlink:` + name for a link to /etc/passwd."""
    with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as tar:
        for name, data in (("00000_0000000.input_ids.npy", npy(np.zeros(4, np.uint16))),
                           (member, npy(np.array([4], np.int32)))):
            kind, _, target_name = name.partition(":") if name.startswith(("symlink:", "hardlink:")) else ("", "", name)
            info = tarfile.TarInfo(target_name)
            if kind:
                info.type = tarfile.SYMTYPE if kind == "symlink" else tarfile.LNKTYPE
                info.linkname = "/etc/passwd"
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))


HOSTILE_MEMBERS = {
    "parent": ("../00000_0000000.seqlens.npy", "is not a plain <key>.<field> name"),
    "absolute": ("/tmp/00000_0000000.seqlens.npy", "is not a plain <key>.<field> name"),
    "nested": ("a/00000_0000000.seqlens.npy", "is not a plain <key>.<field> name"),
    "symlink": ("symlink:00000_0000000.seqlens.npy", "is a symlink to '/etc/passwd'"),
    "hardlink": ("hardlink:00000_0000000.seqlens.npy", "is a hard link to '/etc/passwd'"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE_MEMBERS))
def test_tar_readers_refuse_members_that_could_escape(tmp_path, case):
    member, message = HOSTILE_MEMBERS[case]
    tar = tmp_path / "shard-00000.tar"
    hostile_tar(tar, member)
    shard = {"name": "train/web/shard-00000", "samples": 1,
             "files": {"data": {"path": tar.name, "bytes": tar.stat().st_size}}}
    shown = member.partition(":")[2] or member
    with pytest.raises(UnsafeTarMember, match=rf"train/web/shard-00000: tar member '{re.escape(shown)}' {message}"):
        token_webdataset.read(pafs.LocalFileSystem(), str(tmp_path), {"has_loss_mask": False}, shard)
    with pytest.raises(UnsafeTarMember, match=re.escape(shown)):
        list(media_webdataset.read(pafs.LocalFileSystem(), str(tar), "media/shard-00000"))
    with pytest.raises(UnsafeTarMember, match=re.escape(shown)):
        media_webdataset.read_ids(pafs.LocalFileSystem(), str(tar))
    assert not (tmp_path.parent / "00000_0000000.seqlens.npy").exists()  # nothing was extracted anywhere


@pytest.mark.parametrize("path", ["../outside/shard-00000.tar", "/etc/passwd", "train/../../x.tar"])
def test_index_paths_that_leave_the_shard_directory_are_refused(tmp_path, path):
    platform = tmp_path / "webdataset"
    platform.mkdir()
    shard = {"name": "train/web/shard-00000", "samples": 1, "tokens": 4, "documents": 1, "bytes": 10,
             "files": {"data": {"path": path, "bytes": 10, "sha256": "0" * 64}}}
    (platform / "index.json").write_text(json.dumps({
        "format": "webdataset", "format_version": 1, "seq_len": 4, "token_dtype": "uint16", "has_loss_mask": False,
        "sets": [{"split": "train", "source": "web", "samples": 1, "tokens": 4, "shards": [shard]}]}))
    with pytest.raises(ShardSetError, match=rf"sets\[0\]\.shards\[0\]\.files\.data\.path: path '{re.escape(path)}' "
                                            rf"leaves its directory"):
        load_index(str(platform))

    flat = tmp_path / "flat"  # the training loader's own index reader
    flat.mkdir()
    file = {"path": path, "bytes": 8, "sha256": "0" * 64}
    (flat / "index.json").write_text(json.dumps({
        "format": "flat", "format_version": 1, "seq_len": 4, "token_dtype": "uint16", "vocab_size": 10,
        "pad_id": 0, "has_loss_mask": False, "sets": [{"split": "train", "source": "web", "samples": 1, "shards": [
            {"name": "s", "samples": 1, "files": {"tokens": file, "seqlens": {**file, "bytes": 4},
                                                  "seqptr": {**file, "bytes": 16}}}]}]}))
    with pytest.raises(ShardIndexError, match=r"\.path: must be relative to the index directory"):
        read_flat_index(flat)


@pytest.mark.parametrize("name", ["../raw_documents/web/_manifest.json", "/etc/passwd", "flat/../../index.json"])
def test_manifest_names_that_leave_the_output_are_refused(name):
    """The one manifest parser (the verifiers and the dataset card read through it)."""
    entry = {"bytes": 1, "sha256": "0" * 64}
    with pytest.raises(ManifestError, match=rf"out/_manifest\.json: files: path '{re.escape(name)}' leaves its "
                                            rf"directory"):
        parse_manifest(json.dumps({"files": {"flat/index.json": entry, name: entry}}).encode(), "out/_manifest.json")
    assert list(parse_manifest(json.dumps({"files": {"flat/index.json": entry}}).encode(), "m")) == ["flat/index.json"]


# -- symlinks in a source directory ------------------------------------------------------------------------
def test_ingest_quarantines_symlinks_that_lead_out_of_the_source_and_reads_none_of_them(tmp_path, write_config):
    outside = tmp_path / "outside"
    (outside / "dir").mkdir(parents=True)
    (outside / "private.jsonl").write_text(json.dumps({"text": "outside the root: private"}) + "\n")
    (outside / "dir" / "more.jsonl").write_text(json.dumps({"text": "outside the root: more"}) + "\n")
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.jsonl").write_text(json.dumps({"text": "inside the root"}) + "\n")
    (src / "leak.jsonl").symlink_to(outside / "private.jsonl")
    (src / "linked").symlink_to(outside / "dir", target_is_directory=True)
    (src / "alias.jsonl").symlink_to(src / "a.jsonl")  # a link that stays inside is a file like any other
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    (outside / "m.jsonl").write_text(json.dumps({"modality": "image", "file": "x.png"}) + "\n")
    (manifests / "m.jsonl").symlink_to(outside / "m.jsonl")
    cfg = write_config([{"name": "web", "format": "jsonl", "path": str(src)},
                        {"name": "media", "format": "manifest", "path": str(manifests)}])
    storage = Storage(str(tmp_path / "out"))

    result = ingest_source(cfg, "web", storage, "raw_documents/web")
    docs = pq.read_table(tmp_path / "out" / "raw_documents" / "web")["text"].to_pylist()
    assert docs == ["inside the root", "inside the root"] and result.rows == 2
    quarantine = pq.read_table(tmp_path / "out" / "raw_documents" / "web" / QUARANTINE_FILE).to_pylist()
    refused = {Path(q["uri"]).name: (q["reason"], q["detail"]) for q in quarantine}
    assert set(refused) == {"leak.jsonl", "more.jsonl"}
    assert refused["leak.jsonl"] == ("path_outside_root", f"{src / 'leak.jsonl'} leads to {outside / 'private.jsonl'} "
                                     f"(a symlink), outside the source root {src}: not opened")
    assert refused["more.jsonl"][0] == "path_outside_root" and str(outside / "dir") in refused["more.jsonl"][1]
    assert all("outside the root:" not in str(q["sample"]) for q in quarantine)  # no byte of them was read

    ingest_source(cfg, "media", storage, "raw_documents/media")
    quarantine = pq.read_table(tmp_path / "out" / "raw_documents" / "media" / QUARANTINE_FILE).to_pylist()
    assert [(Path(q["uri"]).name, q["reason"]) for q in quarantine] == [("m.jsonl", "path_outside_root")]


# -- a planted secret ---------------------------------------------------------------------------------------
SOURCES = {"py": "python", "kernel": "linux"}  # real prose from sample_data, 10 documents each


@pytest.fixture
def project(tmp_path):
    with gzip.open(REPO / "sample_data" / "real_docs.jsonl.gz", "rt") as f:
        docs = [json.loads(line) for line in f]
    sources = tmp_path / "sources"
    sources.mkdir()
    for name, prefix in SOURCES.items():
        texts = [d["text"] for d in docs if d["source"].startswith(prefix)][:10]
        (sources / f"{name}.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    root = tmp_path / "project"
    init_dvc_project(root, ("packed_shards", "media_shards"))
    (root / "configs" / "pipeline.yaml").write_text(yaml.safe_dump({
        "storage": {"root": "../data/platform"},
        "sources": [{"name": s, "format": "jsonl", "path": str(sources / f"{s}.jsonl")} for s in SOURCES],
        "tokenizer": {"source": "train", "vocab_size": 400, "min_frequency": 1},
        "packing": {"seq_len": 64, "samples_per_shard": 16},
        "versioning": {"dvc_repo": "..", "remote": {"name": "store", "url": str(tmp_path / "remote")}},
    }))
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(REPO / "dagster_home" / "dagster.yaml", home / "dagster.yaml")
    return root, home


@pytest.mark.slow  # the main command up to the dataset card: ~50 s measured beside other test runs on 2 cores
def test_a_planted_secret_reaches_no_output_event_log_metadata_or_card(project, monkeypatch, capsys):
    root, home = project
    secret = f"planted-{secrets.token_hex(16)}"
    key_id = f"AKIAPLANTED{secrets.token_hex(4).upper()}"
    # credentials only through the environment, as documented: dagster-aws's S3Resource gets dg.EnvVar refs
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", key_id)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
    monkeypatch.setenv("PLATFORM_CONFIG", str(root / "configs" / "pipeline.yaml"))
    pipeline = default_pipeline_resource()
    assert pipeline.s3.aws_secret_access_key == "AWS_SECRET_ACCESS_KEY"  # the definition holds a reference

    @dg.asset
    def secret_probe(pipeline: PipelineResource) -> None:
        # inside a run the reference is resolved: the secret does reach the storage settings
        assert pipeline.s3_settings().secret_key == secret and pipeline.s3_settings().access_key == key_id

    with dg.DagsterInstance.from_config(str(home)) as instance:
        assert dg.materialize([secret_probe], instance=instance, resources={"pipeline": pipeline}).success
    # the README's main command, in process: the definitions' own resources, its log file and console
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    log_file = home / "logs" / "run.log"
    assert cli.main(["run", "--config", str(root / "configs" / "pipeline.yaml"), "--until", "dataset_version",
                     "--log-file", str(log_file)]) == 0
    console = capsys.readouterr()
    with dg.DagsterInstance.from_config(str(home)) as instance:
        metadata = [repr(r.asset_materialization.metadata) for key in instance.get_asset_keys()
                    for r in instance.fetch_materializations(key, limit=100).records]
        logs = [repr(e) for run in instance.get_runs() for e in instance.all_logs(run.run_id)]
    # the probe, 2 sources x (raw, cleaned, dedup_signatures), the 8 band buckets, dedup, splits, tokenizer,
    # tokenized, packed and media shards, dataset_version
    assert len(metadata) == 1 + 2 * 3 + 8 + 7 and len(logs) > 100
    assert "RUN_SUCCESS" in log_file.read_text()
    card = next((root / "data" / "platform" / "dataset_version").rglob("*.md"))
    assert "dataset" in card.read_text().lower()

    leaks = [where for where, text in (("materialization metadata", "\n".join(metadata)),
                                       ("event log", "\n".join(logs)), ("dataset card", card.read_text()),
                                       ("console", console.out + console.err))
             if secret in text or key_id in text]
    # every file: outputs, card, DVC cache and config, the run log file, the instance's SQLite event log
    # and compute logs
    for base in (root, home):
        for path in base.rglob("*"):
            if path.is_file():
                data = path.read_bytes()
                if secret.encode() in data or key_id.encode() in data:
                    leaks.append(str(path))
    history = subprocess.run(["git", "log", "-p", "--all"], cwd=root, capture_output=True, text=True).stdout
    leaks += ["git history"] if secret in history else []  # git objects are compressed: read them through git
    assert leaks == []


def test_a_secret_put_in_the_config_file_is_refused_without_echoing_it(tmp_path):
    secret = f"planted-{secrets.token_hex(16)}"
    path = tmp_path / "pipeline.yaml"
    path.write_text(yaml.safe_dump({"storage": {"root": "s3://bucket/x", "s3": {"secret_access_key": secret}},
                                    "sources": [{"name": "web", "format": "jsonl", "path": str(tmp_path)}]}))
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert "secret_access_key" in str(err.value) and secret not in str(err.value)
