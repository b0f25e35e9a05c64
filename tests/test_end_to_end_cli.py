"""The real command lines: Dagster's CLI, the README's main job, and the web UI in a browser."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from ui_helpers import (
    BIN,
    REPO,
    SELECTOR,
    Browser,
    artifacts_dir,
    assert_screenshot,
    chromium_or_skip,
    free_port,
    graphql,
    rendered_dom,
    start_webserver,
    stop,
)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    """A sample corpus, a config whose storage is in tmp, and a fresh DAGSTER_HOME."""
    tmp = tmp_path_factory.mktemp("e2e")
    subprocess.run([sys.executable, "-m", "platform_assets", "sample", "--out", str(tmp / "sample")], check=True)
    config = yaml.safe_load((REPO / "configs" / "sample.yaml").read_text())
    config["storage"]["root"] = str(tmp / "platform")
    for src in config["sources"]:
        src["path"] = str(tmp / "sample" / Path(src["path"]).relative_to("../data/sample"))
    # tmp is the DVC (and git) repository: no dvc.yaml stage owns the shards there, so the version
    # is recorded with `dvc add`; 10 training steps keep the test short
    subprocess.run(["git", "init", "-q", str(tmp)], check=True)
    config["versioning"] = {"dvc_repo": str(tmp), "remote": {"name": "local", "url": str(tmp / "dvc-remote")}}
    config["training"] = {"run_config": str(REPO / "configs" / "training_sample.yaml"), "max_steps": 10,
                          "more_run_configs": [str(REPO / "configs" / f"training_{m}_sample.yaml")
                                               for m in ("whisper", "llava")],
                          "checkpoint_root": str(tmp / "checkpoints"), "overrides": {"checkpoint.interval": 5}}
    (tmp / "pipeline.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    home = tmp / "dagster_home"
    home.mkdir()
    shutil.copy(REPO / "dagster_home" / "dagster.yaml", home / "dagster.yaml")
    env = {**os.environ, "DAGSTER_HOME": str(home), "PLATFORM_CONFIG": str(tmp / "pipeline.yaml")}
    return tmp, env


def _run(args, env, timeout=300, cwd=REPO):
    return subprocess.run(args, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)


def test_dagster_definitions_validate_and_dg_check(workspace):
    _, env = workspace
    res = _run([str(BIN / "dagster"), "definitions", "validate", "-m", "platform_assets.definitions"], env)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "All code locations passed validation" in res.stdout + res.stderr
    res = _run([str(BIN / "dg"), "check", "defs"], env)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]


def test_main_job_runs_every_source_and_reruns_identically(workspace):
    tmp, env = workspace
    res = _run([sys.executable, "-m", "platform_assets", "run"], env)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    # the console holds the summary, not Dagster's event stream (that is on the instance; --verbose prints it)
    assert " - DEBUG - " not in res.stdout + res.stderr and " - INFO - " not in res.stdout + res.stderr
    lines = {line.split()[0]: line.split() for line in res.stdout.splitlines() if line.split()}
    for source, raw, quarantined, cleaned in [("docs", "67", "6", "54"), ("kernel", "40", "1", "31"),
                                              ("handbook", "40", "0", "40"), ("pages", "9", "2", "6"),
                                              ("notes", "40", "0", "40"), ("sft", "40", "1", "40"),
                                              ("hub-mirror", "15", "0", "13"),
                                              # media: 2 bad images, an encrypted PDF, a broken WAV, 3 bad
                                              # manifest rows; a blank image and a silent clip cleaned away
                                              ("images", "16", "2", "15"), ("pdfs", "4", "1", "4"),
                                              ("audio", "5", "1", "4"), ("multimodal", "10", "3", "10")]:
        assert lines[source][1:5] == ["ok", raw, quarantined, cleaned], res.stdout
        assert "12/12 checks passed" in " ".join(lines[source]), res.stdout  # dedup_signatures' one with them
    # dedup across sources (hub-mirror copies kernel docs; planted copies in docs; the manifest shares
    # images with images/; a resized circle), splits, tokens, shards; the text shards are what they were
    # before media arrived (the pinned md5 below)
    corpus = " ".join(lines["corpus"])
    assert corpus.startswith("corpus ok dedup 257 -> 225 documents, split 225, tokens "), res.stdout
    assert "media samples 21" in corpus and corpus.endswith("18/18 checks passed"), res.stdout
    md5 = lines["release"][4]
    assert lines["release"][:4] == ["release", "ok", "dvc", "md5"] and md5.endswith(".dir"), res.stdout
    # the sample's dataset version is the one pinned in the committed dvc.lock: built in another
    # directory, by another DAGSTER_HOME, it is byte for byte the same data (a changed output needs
    # a deliberate `dvc repro` / `run` and a dvc.lock commit)
    lock = yaml.safe_load((REPO / "dvc.lock").read_text())["stages"]
    pinned = lock["packed_shards"]["outs"][0]["md5"]
    assert md5 == pinned
    # the media shard set is a DVC version of its own, pinned the same way
    version = json.loads((tmp / "platform" / "dataset_version" / "_all" / "version.json").read_text())
    assert version["media"]["md5"] == lock["media_shards"]["outs"][0]["md5"]
    assert version["media"]["totals"]["samples"] == 21 and version["media"]["formats"] == ["parquet", "webdataset"]
    assert " ".join(lines["training"]).startswith("training ok steps 10, final loss "), res.stdout
    # then a Whisper on the 4 training clips and a LLaVA on the 12 training images and pages (global
    # batches of 4 and 2), on the media shard set's version, each with its checkpoints
    whisper, llava = " ".join(lines["training:whisper"]), " ".join(lines["training:llava"])
    assert whisper.startswith("training:whisper ok steps 10, final loss ") and "samples 40 audio " in whisper, whisper
    mix = re.search(r"samples (\d+) image \+ (\d+) pdf ", llava)
    assert llava.startswith("training:llava ok steps 10") and mix and sum(map(int, mix.groups())) == 20, llava
    for model in ("whisper", "llava"):
        assert (tmp / "checkpoints" / f"{version['media']['md5'].removesuffix('.dir')}-{model}" / "latest").is_file()
    assert (tmp / "platform" / "packed_shards" / "_all.dvc").is_file()
    assert (tmp / "checkpoints" / md5.removesuffix(".dir") / "latest").is_file()
    out = tmp / "platform" / "raw_documents"
    first = {p: p.read_bytes() for p in sorted(out.rglob("*.parquet"))}
    data_files = ("*.parquet", "*.bin", "*.tar", "index.json", "tokenizer.json")  # media shards included
    everything = {p: p.read_bytes() for pattern in data_files for p in sorted((tmp / "platform").rglob(pattern))}
    res = _run([sys.executable, "-m", "platform_assets", "run"], env)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    again = {p: p.read_bytes() for pattern in data_files for p in sorted((tmp / "platform").rglob(pattern))}
    assert again == everything  # the same bytes, hence the same DVC version
    rerun = {line.split()[0]: line.split() for line in res.stdout.splitlines() if line.split()}
    assert rerun["release"][4] == md5 and rerun["training"][:4] == ["training", "ok", "steps", "10,"]
    assert rerun["training"] == lines["training"]  # resumed at its last checkpoint: nothing retrained
    assert rerun["training:whisper"] == lines["training:whisper"] and rerun["training:llava"] == lines["training:llava"]
    res = _run([sys.executable, "-m", "platform_assets", "run", "--sources", "docs,pages"], env)
    assert res.returncode == 0 and "deduplication and later stages skipped: --sources given" in res.stdout
    assert {p: p.read_bytes() for p in sorted(out.rglob("*.parquet"))} == first

    # the quarantine is one DuckDB query away
    res = _run([sys.executable, "-m", "platform_assets", "query",
                "SELECT reason, count(*) AS n FROM quarantine GROUP BY reason ORDER BY reason"], env)
    assert res.returncode == 0, res.stderr
    for reason in ("binary_file", "empty_file", "invalid_utf8", "malformed_json", "ragged_csv_row"):
        assert reason in res.stdout
    res = _run([sys.executable, "-m", "platform_assets", "query",
                "SELECT removed_source, count(*) FROM duplicates WHERE rule = 'exact_duplicate' GROUP BY ALL"], env)
    assert res.returncode == 0 and "hub-mirror" in res.stdout

    # why a document is in the shards, or not: provenance and every removal table in one command
    res = _run([sys.executable, "-m", "platform_assets", "query",
                "SELECT document_id FROM provenance WHERE source = 'sft' AND split = 'train' "
                "ORDER BY document_id LIMIT 1"], env)
    packed_id = next(w for w in res.stdout.split() if len(w) == 32)
    res = _run([sys.executable, "-m", "platform_assets", "query",
                "SELECT removed_id FROM duplicates ORDER BY removed_id LIMIT 1"], env)
    duplicate_id = next(w for w in res.stdout.split() if len(w) == 32)
    res = _run([sys.executable, "-m", "platform_assets", "explain", packed_id, duplicate_id], env)
    assert res.returncode == 0, res.stderr
    assert f"{packed_id}: packed, " in res.stdout and "train/sft/shard-00000" in res.stdout
    assert f"{duplicate_id}: removed by deduplicated_documents/_all" in res.stdout


def test_dagster_cli_materializes_a_partition(workspace):
    import dagster as dg

    _, env = workspace
    # the partition exists once the main job (or the sensor) registered the sources: the main job's test
    # did on this instance; run alone, this test registers it with a CLI run of its own (~5 s)
    with dg.DagsterInstance.from_config(env["DAGSTER_HOME"]) as instance:
        registered = "notes" in instance.get_dynamic_partitions("source")
    if not registered:
        _run([sys.executable, "-m", "platform_assets", "run", "--sources", "notes"], env)
    res = _run([str(BIN / "dagster"), "asset", "materialize", "-m", "platform_assets.definitions",
                "--select", "raw_documents", "--partition", "notes"], env, timeout=400)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "RUN_SUCCESS" in res.stderr + res.stdout


def test_config_error_fails_fast_with_the_key(workspace, tmp_path):
    _, env = workspace
    bad = tmp_path / "bad.yaml"
    bad.write_text("sources:\n  - {name: web, format: jsonl, path: x, txt_field: body}\n")
    res = _run([sys.executable, "-m", "platform_assets", "validate", "--config", str(bad)], env)
    assert res.returncode == 2 and "sources[0] (name='web').txt_field: unknown key" in res.stderr
    bad.write_text("sources:\n  - {name: web, format: jsonl, path: nowhere}\n")
    res = _run([sys.executable, "-m", "platform_assets", "run", "--config", str(bad)], env)
    assert res.returncode == 2 and "source 'web': path 'nowhere' does not exist" in res.stderr


def test_web_ui_shows_and_drives_the_sensor_and_schedule(workspace):
    tmp, env = workspace
    port = free_port()
    server = start_webserver(env, port)
    try:
        data = graphql(port, """query($s: RepositorySelector!) { repositoryOrError(repositorySelector: $s) {
            ... on Repository { sensors { name sensorState { status } }
                                schedules { name cronSchedule scheduleState { status } }
                                assetNodes { assetKey { path } partitionDefinition { type } } } } }""",
                        {"s": SELECTOR})["repositoryOrError"]
        sensors = {s["name"]: s["sensorState"]["status"] for s in data["sensors"]}
        schedules = {s["name"]: (s["cronSchedule"], s["scheduleState"]["status"]) for s in data["schedules"]}
        # ours, and Dagster's own sensor that evaluates the eager automation of dedup and splits
        assert sensors["source_files_sensor"] == "RUNNING" and "default_automation_condition_sensor" in sensors
        assert schedules == {"daily_refresh": ("0 3 * * *", "STOPPED")}
        nodes = {tuple(n["assetKey"]["path"]): n["partitionDefinition"] for n in data["assetNodes"]}
        assert nodes[("raw_documents",)]["type"] == "DYNAMIC"

        # usable: switching the schedule on is the mutation the UI's toggle sends
        started = graphql(port, """mutation($s: ScheduleSelector!) { startSchedule(scheduleSelector: $s) {
            ... on ScheduleStateResult { scheduleState { status } } } }""",
                           {"s": {**SELECTOR, "scheduleName": "daily_refresh"}})
        assert started["startSchedule"]["scheduleState"]["status"] == "RUNNING"

        chromium = chromium_or_skip()
        dom = rendered_dom(chromium, f"http://127.0.0.1:{port}/automation", tmp / "chromium")
        assert "source_files_sensor" in dom and "daily_refresh" in dom, dom[-2000:]
        # the dedup stage's cluster-size chart renders as an image in its metadata (an earlier test
        # of this module materialized the whole pipeline on this instance)
        dom = rendered_dom(chromium, f"http://127.0.0.1:{port}/assets/deduplicated_documents", tmp / "chromium")
        assert "cluster_size_chart" in dom and '<img src="data:image/svg+xml;base64,' in dom

        # The release's dataset card, a markdown metadata entry of dataset_version: past 1,000
        # characters the UI keeps markdown behind "[Show Markdown]", so a reader clicks it open.
        version = json.loads((tmp / "platform" / "dataset_version" / "_all" / "version.json").read_text())
        with Browser(chromium, tmp / "chromium-cdp") as browser:
            browser.open(f"http://127.0.0.1:{port}/assets/dataset_version", "dataset_card", version["md5"])
            browser.click("[Show Markdown]", selector="a", row="dataset_card")
            # the dialog renders the card: its title is the entry's label, its text states the DVC md5
            browser.wait_for("Copy", "Close")
            dialog = browser.dialog_text()
            assert version["md5"] in dialog and "dataset_card" in dialog, dialog[:2000]
            # the dialog opens scrolled to its Close button; the card's title and summary are at the top
            browser.scroll_to(f"Dataset version {version['md5'][:12]}", block="start")
            assert_screenshot(browser.screenshot(artifacts_dir() / "dataset_card.png"))
    finally:
        stop(server)
