"""Notices new or changed files under each source's path and requests that source's partition: a
source whose files are what its latest materialization read (fingerprint.py) is left alone. A source
split into file partitions (`file_partitions`) is one partition per bucket here: a changed file
requests its own bucket only."""


import json

import dagster as dg

from platform_assets.config import ConfigError
from platform_assets.defs.pipeline.jobs import per_source_job
from platform_assets.defs.raw_documents.fingerprint import latest_materialization, source_fingerprint
from platform_assets.defs.raw_documents.partitions import key_changes
from platform_assets.defs.resources import PipelineResource

__all__ = ["source_files_sensor", "source_fingerprint"]


@dg.sensor(
    job=per_source_job,
    minimum_interval_seconds=60,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Registers configured sources (and file partitions of split ones) as partitions, retires keys the "
                "config no longer has, and re-ingests a partition when its files change.",
)
def source_files_sensor(context: dg.SensorEvaluationContext, pipeline: PipelineResource) -> dg.SensorResult:
    try:
        cfg = pipeline.config()
    except ConfigError as err:
        return dg.SensorResult(skip_reason=str(err))
    cursor: dict[str, str] = json.loads(context.cursor) if context.cursor else {}
    keys = cfg.partition_keys()
    changes = key_changes(context.instance, keys)  # new keys added, keys the config dropped retired
    requests = []
    for name in keys:
        fingerprint = source_fingerprint(cfg, name, pipeline)
        if fingerprint is None:
            continue
        # Already read by the latest materialization (any run: CLI, UI, backfill): nothing to do.
        read, materialization_id = latest_materialization(context.instance, name)
        if read == fingerprint:
            continue
        # Already requested since that materialization (the run is queued, running, or failed: a
        # failed run is not retried in a loop): nothing to do until the files or the latest
        # materialization change. Keyed by both, files changed back to what an older run read (A, B, A)
        # are requested again, under a run key Dagster has not seen.
        requested = f"{fingerprint}@{materialization_id}"
        if cursor.get(name) == requested:
            continue
        cursor[name] = requested
        requests.append(dg.RunRequest(run_key=f"{name}:{requested}", partition_key=name))
    return dg.SensorResult(
        run_requests=requests,
        cursor=json.dumps(cursor, sort_keys=True),
        dynamic_partitions_requests=changes.requests(),
        skip_reason=None if requests or changes.added or changes.retired else "no source changed",
    )
