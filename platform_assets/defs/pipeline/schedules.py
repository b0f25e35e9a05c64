"""A daily refresh of every configured source; off by default, switched on in the UI."""


import dagster as dg

from platform_assets.defs.pipeline.jobs import per_source_job
from platform_assets.defs.raw_documents.fingerprint import materialized_fingerprint, source_fingerprint
from platform_assets.defs.raw_documents.partitions import sync_source_keys
from platform_assets.defs.resources import PipelineResource


@dg.schedule(
    job=per_source_job,
    cron_schedule="0 3 * * *",
    execution_timezone="UTC",
    default_status=dg.DefaultScheduleStatus.STOPPED,
    description="03:00 UTC: one run per configured source whose files changed since its latest materialization "
                "(registering new sources as partitions).",
)
def daily_refresh(context: dg.ScheduleEvaluationContext, pipeline: PipelineResource):
    cfg = pipeline.config()
    names = cfg.partition_keys()  # a source split into file partitions: one run per partition
    sync_source_keys(context.instance, names)
    day = context.scheduled_execution_time.strftime("%Y-%m-%d")
    # A source whose files are what its latest materialization read is not re-ingested; one that cannot be
    # listed (a hub dataset) is refreshed every day, since only reading it tells whether it changed.
    changed = [n for n in names if (fp := source_fingerprint(cfg, n, pipeline)) is None
               or fp != materialized_fingerprint(context.instance, n)]
    return [dg.RunRequest(run_key=f"{name}:{day}", partition_key=name) for name in changed]
