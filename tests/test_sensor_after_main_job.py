"""A fresh UI after the CLI's main job launches nothing: the README's command 1, then its command 3's
processes (dagster-webserver and dagster-daemon on the same DAGSTER_HOME). The file sensor's first
tick finds every source's files as their latest materialization read them (the fingerprint in its
metadata), so it requests no run; once a file changes, the sensor and the schedule want that source
only."""

import json
import os
import shutil
import subprocess
import sys
import time
from datetime import UTC, datetime

import dagster as dg
import pytest
import yaml
from dagster._core.instance.ref import InstanceRef
from ui_helpers import BIN, REPO, SELECTOR, free_port, graphql, start_webserver, stop

from platform_assets.defs.pipeline.schedules import daily_refresh
from platform_assets.defs.raw_documents.fingerprint import FINGERPRINT_KEY
from platform_assets.defs.raw_documents.sensors import source_files_sensor
from platform_assets.defs.resources import PipelineResource

pytestmark = pytest.mark.slow

SOURCES = ("web", "books")
# The daemon evaluates a sensor that has no tick yet on its first loop; the whole test took 60-102 s on
# 2 shared cores (load 6-8), most of it the CLI run and the processes' imports.
FIRST_TICK_S = 180


def _ticks(port: int, sensor: str) -> list[dict]:
    return graphql(port, """query($s: SensorSelector!) { sensorOrError(sensorSelector: $s) {
        ... on Sensor { sensorState { ticks(limit: 5) { status runIds skipReason } } } } }""",
                   {"s": {**SELECTOR, "sensorName": sensor}})["sensorOrError"]["sensorState"]["ticks"]


def _requested(instance: dg.DagsterInstance, config: str, cursor: str | None = None) -> tuple[list, list]:
    """Partitions the file sensor (from `cursor`) and the daily schedule request now."""
    resources = {"pipeline": PipelineResource(config_path=config)}
    with dg.build_sensor_context(instance=instance, cursor=cursor, resources=resources) as ctx:
        sensor = [r.partition_key for r in source_files_sensor(ctx).run_requests]
    when = datetime(2026, 11, 27, 3, 0, tzinfo=UTC)
    with dg.build_schedule_context(instance=instance, scheduled_execution_time=when, resources=resources) as ctx:
        schedule = [r.partition_key for r in daily_refresh(ctx)]
    return sensor, schedule


def test_fresh_ui_after_the_main_job_launches_nothing_until_a_file_changes(tmp_path):
    for name in SOURCES:
        (tmp_path / f"{name}.jsonl").write_text("".join(
            json.dumps({"text": f"{name} document {i} about the harbour town and the boats at dawn."}) + "\n"
            for i in range(5)))
    config = tmp_path / "pipeline.yaml"
    config.write_text(yaml.safe_dump({
        "storage": {"root": str(tmp_path / "out")},
        "sources": [{"name": n, "format": "jsonl", "path": str(tmp_path / f"{n}.jsonl")} for n in SOURCES],
        "cleaning": {"quality": []}}))
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(REPO / "dagster_home" / "dagster.yaml", home / "dagster.yaml")
    env = {**os.environ, "DAGSTER_HOME": str(home), "PLATFORM_CONFIG": str(config),
           "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "DAGSTER_DISABLE_TELEMETRY": "1"}
    # README command 1 (its per-source part: ingest and clean every source on this instance)
    res = subprocess.run([sys.executable, "-m", "platform_assets", "run", "--until", "cleaned_documents"],
                         env=env, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]

    instance = dg.DagsterInstance.from_ref(InstanceRef.from_dir(str(home)))
    runs_after_main_job = len(instance.get_runs())
    assert runs_after_main_job == len(SOURCES)  # one per-source run each
    for name in SOURCES:
        record = instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=dg.AssetKey("raw_documents"), asset_partitions=[name]), limit=1).records[0]
        assert FINGERPRINT_KEY in record.asset_materialization.metadata, name

    # README command 3's processes: the daemon evaluates the sensor (on by default) at once
    port = free_port()
    procs = []
    daemon_log = (tmp_path / "daemon.log").open("w")
    try:
        procs.append(start_webserver(env, port))
        procs.append(subprocess.Popen([str(BIN / "dagster-daemon"), "run", "-m", "platform_assets.definitions"],
                                      env=env, cwd=REPO, stdout=daemon_log, stderr=subprocess.STDOUT))
        deadline = time.time() + FIRST_TICK_S
        while not (done := [t for t in _ticks(port, "source_files_sensor") if t["status"] != "STARTED"]):
            if procs[-1].poll() is not None:
                pytest.fail(f"dagster-daemon exited: {(tmp_path / 'daemon.log').read_text()[-3000:]}")
            if time.time() > deadline:
                pytest.fail(f"no source_files_sensor tick in {FIRST_TICK_S} s: "
                            f"{(tmp_path / 'daemon.log').read_text()[-3000:]}")
            time.sleep(2)
        assert [(t["status"], t["runIds"]) for t in done] == [("SKIPPED", [])], done
        assert done[0]["skipReason"] == "no source changed"
        assert len(instance.get_runs()) == runs_after_main_job
    finally:
        for proc in reversed(procs):
            stop(proc)
        daemon_log.close()

    # the schedule, switched on, would skip both as well; a changed file is that source's run only
    assert _requested(instance, str(config)) == ([], [])
    with (tmp_path / "books.jsonl").open("a") as f:
        f.write(json.dumps({"text": "a new book about the lighthouse keeper and his long winter."}) + "\n")
    assert _requested(instance, str(config)) == (["books"], ["books"])
