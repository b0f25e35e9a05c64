"""raw_documents through Dagster: partitions, metadata, checks, sensor and schedule, in process."""

import json
import os
from datetime import UTC, datetime
from pathlib import Path

import dagster as dg
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from platform_assets.definitions import defs
from platform_assets.defs.pipeline.schedules import daily_refresh
from platform_assets.defs.raw_documents.assets import raw_documents
from platform_assets.defs.raw_documents.partitions import source_partitions
from platform_assets.defs.raw_documents.sensors import source_files_sensor
from platform_assets.defs.resources import PipelineResource


@pytest.fixture
def pipeline(tmp_path: Path) -> PipelineResource:
    web = tmp_path / "src" / "web"
    web.mkdir(parents=True)
    (web / "a.jsonl").write_text(
        "".join(json.dumps({"text": f"web page {i}", "url": f"u{i}"}) + "\n" for i in range(20)) + "{broken\n"
    )
    books = tmp_path / "src" / "books"
    books.mkdir()
    pq.write_table(pa.table({"text": ["a book", "another book"]}), books / "b.parquet")
    config = {
        "storage": {"root": str(tmp_path / "out")},
        "sources": [
            {"name": "web", "format": "jsonl", "path": str(web)},
            {"name": "books", "format": "parquet", "path": str(books)},
        ],
    }
    (tmp_path / "pipeline.yaml").write_text(yaml.safe_dump(config))
    return PipelineResource(config_path=str(tmp_path / "pipeline.yaml"))


@pytest.fixture
def instance():
    with dg.instance_for_test() as inst:
        yield inst


def _materialize(pipeline, instance, key):
    instance.add_dynamic_partitions(source_partitions.name, [key])
    return dg.materialize(
        [raw_documents], partition_key=key, resources={"pipeline": pipeline}, instance=instance, raise_on_error=False
    )


def test_definitions_load_with_every_piece():
    d = defs()
    assert d.resolve_assets_def("raw_documents").partitions_def == source_partitions
    assert d.resolve_job_def("per_source_job") is not None
    assert d.resolve_sensor_def("source_files_sensor").default_status == dg.DefaultSensorStatus.RUNNING
    assert d.resolve_schedule_def("daily_refresh").default_status == dg.DefaultScheduleStatus.STOPPED
    checks = {k.name for k in d.resolve_asset_graph().asset_check_keys}
    assert {"schema_matches", "ids_unique", "source_not_empty", "quarantine_rate_within_bounds"} <= checks


def test_materialize_a_partition_reports_metadata_and_checks(pipeline, instance, tmp_path):
    result = _materialize(pipeline, instance, "web")
    assert result.success
    mat = result.asset_materializations_for_node("raw_documents")[0]
    md = mat.metadata
    assert md["rows"].value == 20 and md["dagster/row_count"].value == 20
    assert md["quarantined"].value == 1
    assert [c.name for c in md["dagster/column_schema"].schema.columns][:3] == ["id", "source", "text"]
    assert md["uri"].value == str(tmp_path / "out" / "raw_documents" / "web")
    assert "web page 0" in md["preview"].value
    assert md["quarantine_by_reason"].value.records[0].data == {"reason": "malformed_json", "count": 1}
    evaluations = {e.check_name: e.passed for e in result.get_asset_check_evaluations()}
    assert evaluations == {
        "schema_matches": True,
        "ids_unique": True,
        "source_not_empty": True,
        "quarantine_rate_within_bounds": True,
        "media_decode_failures_within_bounds": True,  # no media: nothing failed to decode
        "pdf_text_coverage": True,
    }
    # the data version is the content hash of the output: the same input gives the same version
    version = mat.tags["dagster/data_version"]
    again = _materialize(pipeline, instance, "web")
    assert again.success
    assert again.asset_materializations_for_node("raw_documents")[0].tags["dagster/data_version"] == version
    (tmp_path / "src" / "web" / "a.jsonl").write_text('{"text": "changed"}\n')
    changed = _materialize(pipeline, instance, "web")
    assert changed.asset_materializations_for_node("raw_documents")[0].tags["dagster/data_version"] != version


def test_partitions_are_independent(pipeline, instance, tmp_path):
    assert _materialize(pipeline, instance, "books").success
    assert _materialize(pipeline, instance, "web").success
    out = tmp_path / "out" / "raw_documents"
    assert sorted(p.name for p in out.iterdir()) == ["books", "web"]
    assert pq.read_table(out / "books" / "part-00000-00000.parquet")["source"].unique().to_pylist() == ["books"]


def test_empty_source_fails_the_blocking_check(pipeline, instance, tmp_path):
    (tmp_path / "src" / "web" / "a.jsonl").write_text("{not json\n[1]\n")
    result = _materialize(pipeline, instance, "web")
    assert not result.success  # a blocking check failed
    evaluations = {e.check_name: e for e in result.get_asset_check_evaluations()}
    assert evaluations["source_not_empty"].passed is False
    assert evaluations["quarantine_rate_within_bounds"].passed is False
    assert evaluations["quarantine_rate_within_bounds"].severity == dg.AssetCheckSeverity.WARN


def test_missing_source_path_fails_with_the_source_name(pipeline, instance, tmp_path):
    for f in (tmp_path / "src" / "books").iterdir():
        f.unlink()
    (tmp_path / "src" / "books").rmdir()
    result = _materialize(pipeline, instance, "books")
    assert not result.success
    failure = next(e for e in result.all_events if e.event_type_value == "STEP_FAILURE")
    assert "source 'books': path" in str(failure.event_specific_data.error.message) + str(
        failure.event_specific_data.user_failure_data.description
    )


def test_unknown_partition_is_a_clear_failure(pipeline, instance):
    result = _materialize(pipeline, instance, "gone")
    assert not result.success
    failure = next(e for e in result.all_events if e.event_type_value == "STEP_FAILURE")
    assert "partition 'gone' is not a source" in failure.event_specific_data.user_failure_data.description
    # a config mistake fails at once: waiting through the retry policy (2 + 6 + 14 s) cannot fix it
    assert not [e for e in result.all_events if e.event_type_value == "STEP_UP_FOR_RETRY"]


def test_sensor_registers_sources_and_requests_changed_ones(pipeline, instance, tmp_path):
    with dg.build_sensor_context(instance=instance, resources={"pipeline": pipeline}) as ctx:
        first = source_files_sensor(ctx)
    assert [r.partition_key for r in first.run_requests] == ["web", "books"]
    assert first.dynamic_partitions_requests[0].partition_keys == ["web", "books"]
    instance.add_dynamic_partitions(source_partitions.name, ["web", "books"])

    with dg.build_sensor_context(instance=instance, cursor=first.cursor, resources={"pipeline": pipeline}) as ctx:
        quiet = source_files_sensor(ctx)
    assert quiet.run_requests == [] and quiet.dynamic_partitions_requests == []

    new_file = tmp_path / "src" / "web" / "b.jsonl"
    new_file.write_text('{"text": "fresh"}\n')
    with dg.build_sensor_context(instance=instance, cursor=quiet.cursor, resources={"pipeline": pipeline}) as ctx:
        changed = source_files_sensor(ctx)
    assert [r.partition_key for r in changed.run_requests] == ["web"]
    assert changed.run_requests[0].run_key.startswith("web:")


def test_sensor_skips_a_broken_config(tmp_path, instance):
    (tmp_path / "bad.yaml").write_text("sources: 3\n")
    resources = {"pipeline": PipelineResource(config_path=str(tmp_path / "bad.yaml"))}
    with dg.build_sensor_context(instance=instance, resources=resources) as ctx:
        result = source_files_sensor(ctx)
    assert result.run_requests == [] and "invalid pipeline config" in result.skip_reason.skip_message


def test_daily_schedule_requests_every_source(pipeline, instance):
    when = datetime(2026, 11, 22, 3, 0, tzinfo=UTC)
    with dg.build_schedule_context(
        instance=instance, scheduled_execution_time=when, resources={"pipeline": pipeline}
    ) as ctx:
        requests = daily_refresh(ctx)
    assert [(r.partition_key, r.run_key) for r in requests] == [
        ("web", "web:2026-11-22"),
        ("books", "books:2026-11-22"),
    ]
    assert set(instance.get_dynamic_partitions(source_partitions.name)) == {"web", "books"}


def test_job_runs_a_partition_on_the_instance(pipeline, instance, monkeypatch):
    monkeypatch.setenv("PLATFORM_CONFIG", pipeline.config_path)
    instance.add_dynamic_partitions(source_partitions.name, ["books"])
    job = dg.Definitions(
        assets=[raw_documents],
        jobs=[dg.define_asset_job("per_source_job", selection="raw_documents")],
        resources={"pipeline": pipeline},
    ).resolve_job_def("per_source_job")
    result = job.execute_in_process(partition_key="books", instance=instance)
    assert result.success
    assert instance.get_latest_materialization_event(dg.AssetKey("raw_documents")) is not None
    assert os.environ["PLATFORM_CONFIG"] == pipeline.config_path


def test_sensor_and_schedule_leave_sources_their_materializations_already_read(pipeline, instance, tmp_path):
    """A fresh sensor (no cursor: a new UI after the CLI's main job) requests nothing for sources whose
    latest materialization read the files as they are now; a changed file requests that source only.
    The daily schedule decides the same way."""
    for key in ("web", "books"):
        assert _materialize(pipeline, instance, key).success
    with dg.build_sensor_context(instance=instance, resources={"pipeline": pipeline}) as ctx:
        fresh = source_files_sensor(ctx)
    assert fresh.run_requests == [] and fresh.dynamic_partitions_requests == []
    when = datetime(2026, 11, 23, 3, 0, tzinfo=UTC)
    with dg.build_schedule_context(instance=instance, scheduled_execution_time=when,
                                   resources={"pipeline": pipeline}) as ctx:
        assert daily_refresh(ctx) == []

    pq.write_table(pa.table({"text": ["a third book"]}), tmp_path / "src" / "books" / "c.parquet")
    with dg.build_sensor_context(instance=instance, cursor=fresh.cursor, resources={"pipeline": pipeline}) as ctx:
        changed = source_files_sensor(ctx)
    assert [r.partition_key for r in changed.run_requests] == ["books"]
    with dg.build_schedule_context(instance=instance, scheduled_execution_time=when,
                                   resources={"pipeline": pipeline}) as ctx:
        assert [r.partition_key for r in daily_refresh(ctx)] == ["books"]
    assert _materialize(pipeline, instance, "books").success  # once read, quiet again
    with dg.build_sensor_context(instance=instance, resources={"pipeline": pipeline}) as ctx:
        assert source_files_sensor(ctx).run_requests == []


def test_sensor_requests_files_changed_back_again_under_a_new_run_key(pipeline, instance, tmp_path):
    """Files A (requested, materialized), then B (requested once while its run is pending, then
    materialized), then A again: A differs from the latest materialization, so it is requested again,
    under a run key Dagster has not seen (it drops a request whose run key a sensor used before)."""
    web = tmp_path / "src" / "web" / "a.jsonl"
    original, stat = web.read_bytes(), web.stat()

    def evaluate(cursor):
        with dg.build_sensor_context(instance=instance, cursor=cursor, resources={"pipeline": pipeline}) as ctx:
            result = source_files_sensor(ctx)
        return [r for r in result.run_requests if r.partition_key == "web"], result.cursor

    first, cursor = evaluate(None)
    assert len(first) == 1 and _materialize(pipeline, instance, "web").success
    assert evaluate(cursor)[0] == []
    web.write_text('{"text": "changed"}\n')
    changed, cursor = evaluate(cursor)
    assert len(changed) == 1
    assert evaluate(cursor)[0] == []  # its run pending: not requested twice
    assert _materialize(pipeline, instance, "web").success
    web.write_bytes(original)
    os.utime(web, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # the very files of the first run
    back, cursor = evaluate(cursor)
    assert len(back) == 1 and back[0].run_key not in {first[0].run_key, changed[0].run_key}
    assert back[0].run_key.split("@")[0] == first[0].run_key.split("@")[0]  # the same fingerprint
    assert evaluate(cursor)[0] == []
