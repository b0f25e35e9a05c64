"""Dagster's partition backfill as the daemon runs it, in this process: the code location loaded from
`platform_assets.definitions` (its pipeline resource reads $PLATFORM_CONFIG), runs launched as soon as
the backfill submits them and executed here, one after the other, their steps in the run's process
(the default multiprocess executor's step processes cost ~60 s on 2 cores)."""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import dagster as dg

REPO = Path(__file__).resolve().parents[1]
_SYNC_LAUNCH = {"run_launcher": {"module": "dagster._core.launcher.sync_in_memory_run_launcher",
                                 "class": "SyncInMemoryRunLauncher"},
                "run_coordinator": {"module": "dagster._core.run_coordinator", "class": "DefaultRunCoordinator"}}


@contextmanager
def daemon_instance(monkeypatch, config_path: str | Path) -> Iterator[tuple[dg.DagsterInstance, object]]:
    """(instance, the daemon's workspace context) for `execute_backfill_iteration`."""
    from dagster._core.remote_origin import InProcessCodeLocationOrigin
    from dagster._core.test_utils import create_test_daemon_workspace_context
    from dagster._core.types.loadable_target_origin import LoadableTargetOrigin
    from dagster._core.workspace.load_target import InProcessWorkspaceLoadTarget

    monkeypatch.setenv("PLATFORM_CONFIG", str(config_path))
    origin = InProcessCodeLocationOrigin(
        loadable_target_origin=LoadableTargetOrigin(executable_path=sys.executable,
                                                     module_name="platform_assets.definitions",
                                                     working_directory=str(REPO)),
        location_name="platform_assets")
    with dg.instance_for_test(overrides=_SYNC_LAUNCH) as instance, \
            create_test_daemon_workspace_context(InProcessWorkspaceLoadTarget(origin), instance) as workspace:
        yield instance, workspace


def run_backfill(instance: dg.DagsterInstance, workspace, backfill_id: str, assets: Sequence[str],
                 partitions: Sequence[str]) -> list[dg.DagsterRun]:
    """Submit a backfill of `assets` over `partitions`, iterate the daemon until it is no longer
    requested, assert it completed, and return its runs."""
    from dagster._core.execution.backfill import BulkActionStatus, PartitionBackfill
    from dagster._daemon.backfill import execute_backfill_iteration

    from platform_assets.definitions import defs

    backfill = PartitionBackfill.from_asset_partitions(
        backfill_id=backfill_id, asset_graph=defs().resolve_asset_graph(), partition_names=list(partitions),
        asset_selection=[dg.AssetKey(a) for a in assets], backfill_timestamp=0.0, tags={},
        dynamic_partitions_store=instance, all_partitions=False, title=None, description=None,
        run_config={"execution": {"config": {"in_process": {}}}})
    instance.add_backfill(backfill)
    for _ in range(10):
        list(execute_backfill_iteration(workspace, logging.getLogger("backfill")))
        if instance.get_backfill(backfill_id).status != BulkActionStatus.REQUESTED:
            break
    assert instance.get_backfill(backfill_id).status == BulkActionStatus.COMPLETED_SUCCESS
    return list(instance.get_runs(dg.RunsFilter(tags={"dagster/backfill": backfill_id})))
