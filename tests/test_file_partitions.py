"""A source split into file partitions (`file_partitions`) through Dagster, in process: the bucket keys,
each bucket's files, raw/cleaned outputs whose union is the unsplit source's, dedup and splits keeping the
same documents, the sensor requesting only a changed file's bucket, the CLI's `run`, and a backfill."""

import json
import os
import re
from datetime import UTC, datetime
from pathlib import Path

import dagster as dg
import pyarrow.parquet as pq
import pytest
import yaml
from test_cleaned_documents_asset import handbook

from platform_assets.cli import main as cli_main
from platform_assets.config import load_config
from platform_assets.defs.cleaned_documents.assets import cleaned_documents
from platform_assets.defs.dataset_splits.assets import dataset_splits
from platform_assets.defs.dedup_band_buckets.assets import ALL_BUCKETS_RUN_TAGS, dedup_band_buckets
from platform_assets.defs.dedup_signatures.assets import dedup_signatures
from platform_assets.defs.deduplicated_documents.assets import deduplicated_documents
from platform_assets.defs.pipeline.schedules import daily_refresh
from platform_assets.defs.raw_documents.assets import raw_documents
from platform_assets.defs.raw_documents.partitions import source_partitions, sync_source_keys
from platform_assets.defs.raw_documents.sensors import source_files_sensor
from platform_assets.defs.resources import PipelineResource
from platform_assets.ingest.file_partitions import files_of_bucket
from platform_assets.ingest.readers import source_files

SPLIT_KEYS = ["web.00", "web.01", "web.02", "web.03", "notes"]
# 8 files, two of them nested; these names hash into all 4 buckets (2 + 3 + 2 + 1 files)
WEB_FILES = [f"shard-{i:03d}.jsonl" for i in range(6)] + ["deep/shard-006.jsonl", "deep/shard-007.jsonl"]


def _pages() -> list[str]:
    """40 real pages: the Debian handbook in 8 languages."""
    return [page for lang in ("en", "de", "fr", "es", "it", "ja", "ru", "pt") for page in handbook(lang)]


def _write_corpus(src: Path) -> None:
    pages = _pages()
    web = src / "web"
    (web / "deep").mkdir(parents=True)
    files: dict[str, list[str]] = {name: [] for name in WEB_FILES}
    for i, page in enumerate(pages):
        files[WEB_FILES[i % len(WEB_FILES)]].append(f"{page}\n\nPage {i} of the web crawl.")
    # planted duplicates across files (so across buckets): two exact copies and a one-word edit
    files["deep/shard-007.jsonl"] += [files["shard-000.jsonl"][0], files["shard-001.jsonl"][0]]
    words = files["shard-002.jsonl"][0].split(" ")
    words[5] = "edited"
    files["shard-005.jsonl"].append(" ".join(words))
    for i, name in enumerate(WEB_FILES[::2]):  # too few words for gopher_quality: cleaning removes them
        files[name].append(f"short note {i}")
    for name, texts in files.items():
        (web / name).write_text("".join(json.dumps({"text": t}) + "\n" for t in texts) + "{broken\n")
    (src / "notes.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in handbook("en")[1:3]))


def _config(tmp: Path, src: Path, file_partitions: int | None, sources: tuple[str, ...] = ("web", "notes")) -> Path:
    all_sources = {"web": {"name": "web", "format": "jsonl", "path": str(src / "web"),
                           **({"file_partitions": file_partitions} if file_partitions else {})},
                   "notes": {"name": "notes", "format": "jsonl", "path": str(src / "notes.jsonl")}}
    config = {"storage": {"root": str(tmp / "out")},
              "sources": [all_sources[s] for s in sources],
              "cleaning": {"quality": [{"preset": "gopher_repetition"}, {"preset": "gopher_quality"}]},
              # the gates judge cleaning, not partitioning: a bucket of few pages may lose most to a rule
              "cleaning_gates": {"max_removal_rate": 1.0, "max_rule_removal_rate": 1.0},
              "splits": {"ratios": {"train": 0.6, "validation": 0.2, "test": 0.2}}}
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "pipeline.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    return tmp / "pipeline.yaml"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The same corpus through raw, cleaned, dedup and splits: unsplit, and split into 4 file partitions."""
    base = tmp_path_factory.mktemp("file_partitions")
    _write_corpus(base / "src")
    out = {}
    for label, n in (("unsplit", None), ("split", 4)):
        config = _config(base / label, base / "src", n)
        pipeline = PipelineResource(config_path=str(config))
        keys = load_config(config).partition_keys()
        with dg.instance_for_test() as instance:
            instance.add_dynamic_partitions(source_partitions.name, keys)
            for key in keys:
                result = dg.materialize([raw_documents, cleaned_documents, dedup_signatures], partition_key=key,
                                        instance=instance, resources={"pipeline": pipeline}, raise_on_error=False)
                assert result.success, key
            # the CLI's band_buckets_job: every bucket partition in one run
            assert dg.materialize([dedup_band_buckets], tags=ALL_BUCKETS_RUN_TAGS, instance=instance,
                                  resources={"pipeline": pipeline}).success
            result = dg.materialize([deduplicated_documents, dataset_splits], instance=instance,
                                    resources={"pipeline": pipeline}, raise_on_error=False)
            assert result.success
        out[label] = {"root": base / label / "out", "keys": keys, "config": config}
    out["src"] = base / "src"
    return out


def _table(root: Path, asset: str, key: str, columns: list[str]) -> dict:
    table = pq.read_table(root / asset / key, columns=columns)  # the parts (side files are named _*)
    return dict(zip(*table.to_pydict().values(), strict=True))


def _union(root: Path, asset: str, keys: list[str]) -> dict:
    out: dict = {}
    for key in keys:
        part = _table(root, asset, key, ["id", "text"])
        assert not out.keys() & part.keys(), f"{key} repeats documents of another partition"
        out |= part
    return out


def test_keys_and_bucket_files_cover_the_source_once(runs):
    cfg = load_config(runs["split"]["config"])
    assert runs["split"]["keys"] == SPLIT_KEYS and runs["unsplit"]["keys"] == ["web", "notes"]
    _, root, files = source_files(cfg, "web")
    buckets = [files_of_bucket(files, root, cfg.source_partition(k)) for k in SPLIT_KEYS[:4]]
    assert [len(b) for b in buckets] == [2, 3, 2, 1]  # every bucket holds files (the names are chosen so)
    assert sorted(f.path for b in buckets for f in b) == [f.path for f in files]
    # what each bucket read is what source_files lists for it
    for key, bucket in zip(SPLIT_KEYS, buckets, strict=False):
        _, _, listed = source_files(cfg, "web", part=cfg.source_partition(key))
        assert listed == bucket


def test_split_outputs_hold_the_unsplit_documents_with_the_same_ids(runs):
    split, unsplit = runs["split"], runs["unsplit"]
    for asset in ("raw_documents", "cleaned_documents"):
        whole = _union(unsplit["root"], asset, ["web"])
        parts = _union(split["root"], asset, SPLIT_KEYS[:4])
        assert parts == whole and len(whole) >= 40, asset  # same ids, same texts
        assert _union(split["root"], asset, ["notes"]) == _union(unsplit["root"], asset, ["notes"])
    # cleaning removed the same documents (the 4 short notes) from the buckets as from the whole source
    removed = [pq.read_table(split["root"] / "cleaned_documents" / k / "_exclusions.parquet", columns=["id"])
               for k in SPLIT_KEYS[:4]]
    whole_removed = pq.read_table(unsplit["root"] / "cleaned_documents" / "web" / "_exclusions.parquet")
    assert sorted(i for t in removed for i in t["id"].to_pylist()) == sorted(whole_removed["id"].to_pylist())
    assert whole_removed.num_rows == 4
    raw = pq.read_table(split["root"] / "raw_documents" / "web.02")
    assert set(raw["source"].to_pylist()) == {"web"}  # the source column names the source, not the bucket
    # every bucket quarantined its own files' broken last lines: 8 in all, as unsplit
    quarantined = sum(pq.read_table(split["root"] / "raw_documents" / k / "_quarantine.parquet").num_rows
                      for k in SPLIT_KEYS[:4])
    assert quarantined == pq.read_table(unsplit["root"] / "raw_documents" / "web" / "_quarantine.parquet").num_rows == 8


def test_dedup_and_splits_keep_the_same_documents_split_or_not(runs):
    split, unsplit = runs["split"], runs["unsplit"]
    kept = {label: _table(r["root"], "dataset_splits", "_all", ["id", "split"]) for label, r in runs.items()
            if label != "src"}
    assert kept["split"] == kept["unsplit"]  # the same ids, in the same splits
    assert set(kept["split"].values()) == {"train", "validation", "test"}
    removed = {label: _table(r["root"], "deduplicated_documents", "_all/_duplicates.parquet",
                             ["removed_id", "rule"]) for label, r in (("split", split), ("unsplit", unsplit))}
    assert removed["split"] == removed["unsplit"]
    # the planted copies (2 exact, 1 near) sit in other buckets than their originals and are found
    assert sorted(removed["split"].values()).count("exact_duplicate") >= 2
    assert "near_duplicate" in removed["split"].values()


def test_a_bucket_without_files_passes_and_one_without_documents_fails(tmp_path):
    """Files hash into buckets, so a bucket may hold none (2 files over 4 buckets leave 2 empty): that
    bucket commits an empty output and passes `source_not_empty`; a bucket whose files hold no document
    still fails it."""
    web = tmp_path / "web"
    web.mkdir()
    (web / "one.jsonl").write_text("{broken\n")  # bucket 0
    (web / "two.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in handbook("en")))  # bucket 2
    config = {"storage": {"root": str(tmp_path / "out")},
              "sources": [{"name": "web", "format": "jsonl", "path": str(web), "file_partitions": 4}]}
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(config))
    pipeline = PipelineResource(config_path=str(tmp_path / "p.yaml"))
    outcome = {}
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions(source_partitions.name, SPLIT_KEYS[:4])
        for key in SPLIT_KEYS[:4]:
            result = dg.materialize([raw_documents, cleaned_documents], partition_key=key, instance=instance,
                                    resources={"pipeline": pipeline}, raise_on_error=False)
            check = next(e for e in result.get_asset_check_evaluations() if e.check_name == "source_not_empty")
            md = result.asset_materializations_for_node("raw_documents")[0].metadata
            outcome[key] = (result.success, check.passed, md["input_files"].value, md["rows"].value)
    assert outcome == {"web.00": (False, False, 1, 0), "web.01": (True, True, 0, 0),
                       "web.02": (True, True, 1, 5), "web.03": (True, True, 0, 0)}
    assert pq.read_table(tmp_path / "out" / "cleaned_documents" / "web.01").num_rows == 0


def test_sensor_registers_bucket_keys_and_requests_only_a_changed_files_bucket(runs, tmp_path):
    pipeline = PipelineResource(config_path=str(runs["split"]["config"]))
    cfg = pipeline.config()
    with dg.instance_for_test() as instance:
        with dg.build_sensor_context(instance=instance, resources={"pipeline": pipeline}) as ctx:
            first = source_files_sensor(ctx)
        assert first.dynamic_partitions_requests[0].partition_keys == SPLIT_KEYS
        assert [r.partition_key for r in first.run_requests] == SPLIT_KEYS
        instance.add_dynamic_partitions(source_partitions.name, SPLIT_KEYS)
        with dg.build_sensor_context(instance=instance, cursor=first.cursor, resources={"pipeline": pipeline}) as ctx:
            quiet = source_files_sensor(ctx)
        assert quiet.run_requests == []
        changed = runs["src"] / "web" / "deep" / "shard-006.jsonl"
        _, root, files = source_files(cfg, "web")
        bucket = next(k for k in SPLIT_KEYS[:4]
                      if any(f.path == str(changed) for f in files_of_bucket(files, root, cfg.source_partition(k))))
        before, stat = changed.read_bytes(), changed.stat()
        try:
            changed.write_bytes(before + b'{"text": "one more line"}\n')
            with dg.build_sensor_context(instance=instance, cursor=quiet.cursor,
                                         resources={"pipeline": pipeline}) as ctx:
                after = source_files_sensor(ctx)
        finally:  # as it was, mtime too: it is the documents' `ingested_at`, which later tests compare
            changed.write_bytes(before)
            os.utime(changed, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert [r.partition_key for r in after.run_requests] == [bucket]
    assert after.dynamic_partitions_requests == []


def test_daily_schedule_registers_and_requests_every_bucket(runs):
    pipeline = PipelineResource(config_path=str(runs["split"]["config"]))
    when = datetime(2026, 11, 27, 3, 0, tzinfo=UTC)
    with dg.instance_for_test() as instance:
        with dg.build_schedule_context(instance=instance, scheduled_execution_time=when,
                                       resources={"pipeline": pipeline}) as ctx:
            requests = daily_refresh(ctx)
        assert instance.get_dynamic_partitions(source_partitions.name) == SPLIT_KEYS
    assert [(r.partition_key, r.run_key) for r in requests] == [(k, f"{k}:2026-11-27") for k in SPLIT_KEYS]


def test_removed_source_and_old_split_keys_are_not_read_by_dedup(runs, tmp_path):
    """A config without `notes`, and with `web` unsplit again: dedup reads `web` alone, although the
    split run's bucket folders and notes' output are still on disk beside it."""
    root = runs["split"]["root"]
    config = _config(tmp_path, runs["src"], None, sources=("web",))
    data = yaml.safe_load(config.read_text())
    data["storage"]["root"] = str(root)
    config.write_text(yaml.safe_dump(data))
    cfg = load_config(config)
    assert cfg.partition_keys() == ["web"]
    pipeline = PipelineResource(config_path=str(config))
    with dg.instance_for_test() as instance:
        missing = dg.materialize([deduplicated_documents], instance=instance, resources={"pipeline": pipeline},
                                 raise_on_error=False)
        assert not missing.success  # `web` itself was never materialized in this storage root
        failure = next(e for e in missing.all_events if e.event_type_value == "STEP_FAILURE")
        assert "has no documents for: web " in failure.event_specific_data.user_failure_data.description
        instance.add_dynamic_partitions(source_partitions.name, ["web", "web.01"])
        stale = dg.materialize([raw_documents], partition_key="web.01", instance=instance,
                               resources={"pipeline": pipeline}, raise_on_error=False)
        assert not stale.success  # an old bucket key is refused, with what the config has instead
        failure = next(e for e in stale.all_events if e.event_type_value == "STEP_FAILURE")
        assert "'web', which has 1 file partition(s) (web)" in failure.event_specific_data.user_failure_data.description


def test_cli_run_materializes_every_bucket(runs, tmp_path, monkeypatch, capsys):
    config = _config(tmp_path, runs["src"], 4)
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PLATFORM_CONFIG", str(config))  # cmd_run exports it; the monkeypatch restores it
    (tmp_path / "home").mkdir()
    code = cli_main(["run", "--config", str(config), "--until", "cleaned_documents", "--progress", "off",
                     "--log-file", str(tmp_path / "run.log")])
    printed = capsys.readouterr().out
    assert code == 0, printed
    rows = {line.split()[0]: line.split()[1] for line in printed.splitlines() if line.split()}
    assert [k for k in rows if k in SPLIT_KEYS] == SPLIT_KEYS and all(rows[k] == "ok" for k in SPLIT_KEYS)
    # the same bytes as the fixture's split run (another storage root, another instance)
    for asset in ("raw_documents", "cleaned_documents"):
        for key in SPLIT_KEYS:
            parts = sorted(p.name for p in (tmp_path / "out" / asset / key).glob("part-*.parquet"))
            assert parts and parts == sorted(p.name for p in (runs["split"]["root"] / asset / key).glob("part-*"))
            assert all((tmp_path / "out" / asset / key / p).read_bytes()
                       == (runs["split"]["root"] / asset / key / p).read_bytes() for p in parts), (asset, key)
    # `--sources web.02` runs that bucket alone; `--sources web` all four
    capsys.readouterr()
    assert cli_main(["run", "--config", str(config), "--until", "raw_documents", "--progress", "off",
                     "--sources", "web.02", "--log-file", str(tmp_path / "run.log")]) == 0
    assert [line.split()[0] for line in capsys.readouterr().out.splitlines()[1:2]] == ["web.02"]


def test_backfill_over_the_bucket_keys_runs_each_once(runs, tmp_path, monkeypatch):
    """Dagster's partition backfill (the daemon's iteration, in process) over the split source's keys."""
    from backfill_daemon import daemon_instance, run_backfill

    config = _config(tmp_path, runs["src"], 4)
    with daemon_instance(monkeypatch, config) as (instance, workspace):
        instance.add_dynamic_partitions(source_partitions.name, SPLIT_KEYS[:4])
        runs_done = run_backfill(instance, workspace, "filerange", ["raw_documents", "cleaned_documents"],
                                 SPLIT_KEYS[:4])
        assert sorted(r.tags["dagster/partition"] for r in runs_done) == SPLIT_KEYS[:4]
        assert all(r.status == dg.DagsterRunStatus.SUCCESS for r in runs_done)
    assert _union(tmp_path / "out", "cleaned_documents", SPLIT_KEYS[:4]) == \
        _union(runs["split"]["root"], "cleaned_documents", SPLIT_KEYS[:4])


def test_query_reads_the_configs_keys_not_a_stale_unsplit_folder(runs, tmp_path, capsys):
    """`web` re-split into 4 file partitions over a root where its unsplit run left raw_documents/web and
    cleaned_documents/web: `query` and `spot-check` count each document once."""
    import shutil

    root = tmp_path / "out"
    shutil.copytree(runs["split"]["root"], root)
    for asset in ("raw_documents", "cleaned_documents"):
        shutil.copytree(runs["unsplit"]["root"] / asset / "web", root / asset / "web")
    config = _config(tmp_path, runs["src"], 4)
    expected = {asset: sum(pq.ParquetFile(p).metadata.num_rows for key in SPLIT_KEYS
                           for p in (root / asset / key).glob("part-*.parquet"))
                for asset in ("raw_documents", "cleaned_documents")}
    stale = sum(pq.ParquetFile(p).metadata.num_rows for p in (root / "raw_documents" / "web").glob("part-*"))
    assert stale > 0 and expected["raw_documents"] > 0
    for asset, rows in expected.items():
        capsys.readouterr()
        assert cli_main(["query", "--config", str(config), f"SELECT count(*) AS n FROM {asset}"]) == 0
        printed = capsys.readouterr().out
        assert re.findall(r"│\s+(\d+)\s+│", printed) == [str(rows)], printed  # not rows + the stale folder's
    capsys.readouterr()
    assert cli_main(["spot-check", "--config", str(config), "--rule", "language", "-n", "100"]) == 0
    listed = capsys.readouterr().out
    removed = sum(pq.read_table(root / "cleaned_documents" / key / "_exclusions.parquet", columns=["rule"])
                  .column("rule").to_pylist().count("language.low_confidence") for key in SPLIT_KEYS)
    assert removed > 0
    assert listed.count("language.low_confidence") == removed, listed  # once each, not twice


def test_keys_the_config_dropped_are_retired_by_the_sensor_the_schedule_and_the_cli(runs, tmp_path, monkeypatch):
    """Split into 4 after an unsplit run: `web` goes, web.00..03 come; unsplit again: the reverse. The
    materializations of a retired key stay in the event log."""
    split = PipelineResource(config_path=str(runs["split"]["config"]))
    unsplit = PipelineResource(config_path=str(runs["unsplit"]["config"]))
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions(source_partitions.name, ["web", "notes", "gone"])
        with dg.build_sensor_context(instance=instance, resources={"pipeline": split}) as ctx:
            result = source_files_sensor(ctx)
        add, delete = result.dynamic_partitions_requests
        assert add.partition_keys == SPLIT_KEYS[:4] and delete.partition_keys == ["gone", "web"]
        assert isinstance(delete, dg.DeleteDynamicPartitionsRequest)

        when = datetime(2026, 11, 27, 3, tzinfo=UTC)
        with dg.build_schedule_context(instance=instance, scheduled_execution_time=when,
                                       resources={"pipeline": split}) as ctx:
            daily_refresh(ctx)
        assert sorted(instance.get_dynamic_partitions(source_partitions.name)) == sorted(SPLIT_KEYS)

        raw = dg.materialize([raw_documents], partition_key="web.02", instance=instance,
                             resources={"pipeline": split})
        assert raw.success
        with dg.build_sensor_context(instance=instance, resources={"pipeline": unsplit}) as ctx:
            back = source_files_sensor(ctx)
        assert [r.partition_keys for r in back.dynamic_partitions_requests] == [["web"], SPLIT_KEYS[:4]]
        sync_source_keys(instance, load_config(runs["unsplit"]["config"]).partition_keys())
        assert sorted(instance.get_dynamic_partitions(source_partitions.name)) == ["notes", "web"]
        history = instance.fetch_materializations(dg.AssetKey("raw_documents"), limit=10).records
        assert [r.partition_key for r in history] == ["web.02"]

    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    config = _config(tmp_path / "cli", runs["src"], None)
    monkeypatch.setenv("PLATFORM_CONFIG", str(config))
    with dg.DagsterInstance.get() as instance:
        instance.add_dynamic_partitions(source_partitions.name, SPLIT_KEYS)
    assert cli_main(["run", "--config", str(config), "--until", "raw_documents", "--sources", "notes",
                     "--progress", "off", "--log-file", str(tmp_path / "run.log")]) == 0
    with dg.DagsterInstance.get() as instance:
        assert instance.get_dynamic_partitions(source_partitions.name) == ["notes", "web"]
