"""Progress of running stages reaches the run's log (the UI's run view) and the CLI's log file, not
the console's summary table."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import dagster as dg
import yaml

from platform_assets.defs.cleaned_documents.assets import cleaned_documents
from platform_assets.defs.raw_documents.assets import raw_documents
from platform_assets.defs.raw_documents.partitions import source_partitions
from platform_assets.defs.resources import PipelineResource

REPO = Path(__file__).resolve().parents[1]
DOCS = [f"Document {i} talks about the weather in the harbour town and the boats that sail at dawn." for i in range(5)]


def _config(tmp_path: Path) -> Path:
    (tmp_path / "in.jsonl").write_text("".join(json.dumps({"text": d}) + "\n" for d in DOCS))
    cfg = {"storage": {"root": str(tmp_path / "out")},
           "sources": [{"name": "web", "format": "jsonl", "path": str(tmp_path / "in.jsonl")}],
           "cleaning": {"quality": []}}
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(cfg))
    return tmp_path / "p.yaml"


def test_stage_progress_is_logged_into_the_run(tmp_path):
    pipeline = PipelineResource(config_path=str(_config(tmp_path)))
    size = (tmp_path / "in.jsonl").stat().st_size
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions(source_partitions.name, ["web"])
        result = dg.materialize([raw_documents, cleaned_documents], partition_key="web",
                                resources={"pipeline": pipeline}, instance=instance)
        messages = [e.user_message for e in instance.all_logs(result.run_id)]
    read = [m for m in messages if m.startswith("raw_documents[web] read: ")]
    clean = [m for m in messages if m.startswith("cleaned_documents[web] clean: ")]
    # one final line per phase (the phases are shorter than the 30 s between intermediate lines)
    assert len(read) == 1 and read[0].startswith(f"raw_documents[web] read: 5 documents (100%), {size} B of {size} B")
    assert len(clean) == 1 and clean[0].startswith("cleaned_documents[web] clean: 5/5 documents (100%), ")
    assert "done in 0:00:0" in clean[0]


def test_cli_keeps_the_event_stream_off_the_console_and_in_the_log_file(tmp_path):
    config = _config(tmp_path)
    # batches of 2 rows: cleaning spawns its 2 workers under the CLI's process (spawned workers re-import
    # a script's main module; multiprocessing skips a package's __main__, so no second run starts)
    cfg = yaml.safe_load(config.read_text())
    config.write_text(yaml.safe_dump({**cfg, "io": {"batch_rows": 2, "workers": 2}}))
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(REPO / "dagster_home" / "dagster.yaml", home / "dagster.yaml")
    env = {**os.environ, "DAGSTER_HOME": str(home), "PLATFORM_CONFIG": str(config),
           "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    res = subprocess.run([sys.executable, "-m", "platform_assets", "run", "--until", "cleaned_documents"],
                         env=env, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    console = res.stdout + res.stderr
    assert "RUN_START" not in console and "STEP_SUCCESS" not in console
    log_file = home / "logs" / "platform-run.log"
    assert f"their events also in {log_file}" in res.stdout
    log = log_file.read_text()
    # the run's whole event stream, with the progress lines the run view shows
    for event in ("RUN_START", "STEP_SUCCESS", "ASSET_MATERIALIZATION", "RUN_SUCCESS"):
        assert f" - {event} - " in log, event
    assert "cleaned_documents[web] clean: 5/5 documents (100%)" in log
    assert log.count(" - RUN_START - ") == 1  # the per-source run, once
    # --verbose puts the same stream on the console as well
    res = subprocess.run([sys.executable, "-m", "platform_assets", "run", "--until", "raw_documents", "--verbose"],
                         env=env, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0 and "RUN_START" in res.stdout + res.stderr
