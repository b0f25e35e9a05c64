"""Runs whose process was killed (SIGKILL, the OOM killer, a power cut) never record their end: they stay
STARTED in the instance, and a step in a pool (`dvc`, `gpu`, default limit 1) keeps its slot, so every
later dataset_version or training_run waits for it forever ("Step blocked by limit for pool dvc").
Dagster's run monitoring cannot see it either: the DefaultRunLauncher has no worker health check, and
the daemon frees the slots of finished runs only.

On the local instance (SQLite in DAGSTER_HOME: every run worker is a process of this machine) a run is
dead when the process that started it (the pid of its RUN_START event) is gone, a zombie, or a newer
process reusing the pid. Such runs are marked failed, with the reason, and their slots freed.
"""

from __future__ import annotations

import os
from pathlib import Path

import dagster as dg
from dagster._core.storage.runs import SqliteRunStorage


def _process_alive_since(pid: int, started_at: float) -> bool:
    """Whether `pid` is a live process that started no later than `started_at` (epoch seconds)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    stat = Path(f"/proc/{pid}/stat")
    if not stat.exists():  # no procfs (macOS): the signal test is all there is
        return True
    fields = stat.read_text().rsplit(")", 1)[1].split()
    if fields[0] == "Z":  # killed, not yet reaped by its parent
        return False
    boot = next(int(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines()
                if line.startswith("btime"))
    process_start = boot + int(fields[19]) / os.sysconf("SC_CLK_TCK")
    # a pid reused by a process started after the run began is not the run's worker (+1 s: btime is
    # whole seconds)
    return process_start <= started_at + 1


def run_worker_pid(instance: dg.DagsterInstance, run_id: str) -> int | None:
    starts = instance.all_logs(run_id, of_type=dg.DagsterEventType.RUN_START)
    event = starts[-1].dagster_event if starts else None
    return event.pid if event is not None else None


def fail_dead_runs(instance: dg.DagsterInstance) -> list[str]:
    """Mark failed every STARTED run of this machine whose worker process is gone; free its pool slots.
    Returns their run ids. Does nothing on a shared instance (Postgres), where workers live elsewhere."""
    if not isinstance(instance.run_storage, SqliteRunStorage):
        return []
    dead = []
    for record in instance.get_run_records(dg.RunsFilter(statuses=[dg.DagsterRunStatus.STARTED])):
        run, pid = record.dagster_run, run_worker_pid(instance, record.dagster_run.run_id)
        started_at = record.start_time or record.create_timestamp.timestamp()
        if pid is None or _process_alive_since(pid, started_at):
            continue
        instance.report_run_failed(run, f"the run's process (pid {pid}) ended without recording an end: it was "
                                        "killed (SIGKILL, out of memory, power loss). Outputs are committed "
                                        "atomically: re-run the failed assets.")
        instance.event_log_storage.free_concurrency_slots_for_run(run.run_id)
        dead.append(run.run_id)
    return dead
