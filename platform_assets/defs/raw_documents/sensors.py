"""Notices new or changed files under each source's path and requests that source's partition."""


import hashlib
import json

import dagster as dg

from platform_assets.config import ConfigError, HuggingFaceSource, PipelineConfig
from platform_assets.defs.pipeline.jobs import per_source_job
from platform_assets.defs.raw_documents.partitions import source_partitions
from platform_assets.defs.resources import PipelineResource
from platform_assets.ingest.readers import source_files


def source_fingerprint(cfg: PipelineConfig, name: str, pipeline: PipelineResource | None = None) -> str | None:
    """A hash of the source's file list with sizes and mtimes; None for sources that can't be
    listed (hub datasets; a path that does not exist yet)."""
    src = cfg.source(name)
    if isinstance(src, HuggingFaceSource):
        return None
    try:
        cfg.check_source_paths([name])
        _, _, files = source_files(cfg, name, pipeline.s3_settings(cfg) if pipeline else None)
    except (ConfigError, OSError):
        return None
    h = hashlib.sha256()
    for f in files:
        h.update(f"{f.path}\x00{f.size}\x00{f.mtime_s}\n".encode())
    return h.hexdigest()[:16]


@dg.sensor(
    job=per_source_job,
    minimum_interval_seconds=60,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Registers configured sources as partitions and re-ingests a source when its files change.",
)
def source_files_sensor(context: dg.SensorEvaluationContext, pipeline: PipelineResource) -> dg.SensorResult:
    try:
        cfg = pipeline.config()
    except ConfigError as err:
        return dg.SensorResult(skip_reason=str(err))
    cursor: dict[str, str] = json.loads(context.cursor) if context.cursor else {}
    known = set(context.instance.get_dynamic_partitions(source_partitions.name))
    new_partitions = [n for n in cfg.source_names() if n not in known]
    requests = []
    for name in cfg.source_names():
        fingerprint = source_fingerprint(cfg, name, pipeline)
        if fingerprint is None or cursor.get(name) == fingerprint:
            continue
        cursor[name] = fingerprint
        requests.append(dg.RunRequest(run_key=f"{name}:{fingerprint}", partition_key=name))
    return dg.SensorResult(
        run_requests=requests,
        cursor=json.dumps(cursor, sort_keys=True),
        dynamic_partitions_requests=[source_partitions.build_add_request(new_partitions)] if new_partitions else [],
        skip_reason=None if requests or new_partitions else "no source changed",
    )
