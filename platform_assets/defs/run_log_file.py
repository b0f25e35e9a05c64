"""A Dagster logger that appends a run's event stream to a file: the CLI keeps the console for its
progress lines and summary table, and the ~280 DEBUG lines of a main job go here (and, as always,
to the instance, where the UI's run view shows them).

Runs select it through run config (`loggers: {run_log_file: {config: {path: ...}}}`); runs that name
no logger (the UI's, the daemon's) keep Dagster's default console logger.
"""

from __future__ import annotations

import logging
from pathlib import Path

import dagster as dg

FORMAT = "%(asctime)s %(levelname)s %(message)s"  # the message names job, run id and step


@dg.logger(
    config_schema={"path": dg.Field(str, description="file the run's events are appended to"),
                   "log_level": dg.Field(str, default_value="DEBUG")},
    description="Appends the run's events to a file (the CLI points it at $DAGSTER_HOME/logs/platform-run.log).",
)
def run_log_file(init_context: dg.InitLoggerContext) -> logging.Logger:
    path = Path(init_context.logger_config["path"])
    path.parent.mkdir(parents=True, exist_ok=True)
    # one python logger per file, its handler added once: every run of a CLI invocation appends to it
    log = logging.getLogger(f"platform_assets.run_log_file.{path}")
    log.setLevel(init_context.logger_config["log_level"].upper())
    log.propagate = False  # never to the root logger's console handler
    if not any(isinstance(h, logging.FileHandler) and Path(h.baseFilename) == path.resolve() for h in log.handlers):
        handler = logging.FileHandler(path, encoding="utf-8")
        handler.setFormatter(logging.Formatter(FORMAT))
        log.addHandler(handler)
    return log


@dg.definitions
def loggers() -> dg.Definitions:
    # `console` stays available under its usual key: a run config naming loggers replaces the default
    return dg.Definitions(loggers={"console": dg.colored_console_logger, "run_log_file": run_log_file})
