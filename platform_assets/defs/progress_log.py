"""Stage progress into the Dagster run's log, where the UI's run view shows it while the step runs.

A line per phase at most every RUN_LOG_INTERVAL_S, and its final line (count, bytes, rate, time):
bounded whatever the corpus (a 1-hour step writes ~120 lines, not one per batch).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import dagster as dg

from platform_assets.progress import ProgressSnapshot, format_line, listening, step_scope

# 30 s: a run view that shows movement twice a minute, ~2 lines a minute per phase at most
RUN_LOG_INTERVAL_S = 30.0


class RunLogProgress:
    """A progress listener writing to a Dagster log (context.log): the first line once a phase has run
    for RUN_LOG_INTERVAL_S, then one per interval, and each phase's final line."""

    def __init__(self, log, interval_s: float = RUN_LOG_INTERVAL_S):
        self.log, self.interval_s = log, interval_s
        self._last_logged: dict[str, float] = {}

    def __call__(self, snapshot: ProgressSnapshot) -> None:
        if snapshot.finished:
            self._last_logged.pop(snapshot.label, None)
            self.log.info(format_line(snapshot))
            return
        last = self._last_logged.get(snapshot.label, 0.0)
        if snapshot.elapsed_s - last >= self.interval_s:
            self._last_logged[snapshot.label] = snapshot.elapsed_s
            self.log.info(format_line(snapshot))


def step_label(context: dg.AssetExecutionContext, asset: str) -> str:
    return f"{asset}[{context.partition_key}]" if context.has_partition_key else asset


@contextmanager
def run_log_progress(asset: str) -> Iterator[None]:
    """Around a stage call inside an asset: its trackers are labelled with the asset (and partition)
    and their progress goes to the run's log."""
    try:
        context = dg.AssetExecutionContext.get()
    except dg.DagsterInvariantViolationError:  # called outside an asset (a direct test of the wrapper)
        with step_scope(asset):
            yield
        return
    with step_scope(step_label(context, asset)), listening(RunLogProgress(context.log)):
        yield
