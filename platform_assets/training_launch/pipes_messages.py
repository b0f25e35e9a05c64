"""The training run's Dagster Pipes messages, read only as whole lines.

Dagster's file message reader tails the messages file with `readline()` and parses whatever it gets.
While the trainer is still writing a message, `readline()` at the end of the file returns the part
already written, without its newline; `json.loads` fails, the reader thread dies, and every later
message of the run is lost. CI hit this once under load (dagster 1.13: "Unterminated string starting
at char 1238", the killed-and-resumed training run's materialization never arrived). This reader keeps
a partial line until its newline is there.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from threading import Event

import dagster as dg
from dagster._utils import tail_file  # the tail Dagster's reader uses; private, as `_reader_thread` below

__all__ = ["WholeLineFileMessageReader", "WholeLineTempFileMessageReader", "whole_lines"]


def whole_lines(path: str, should_stop: Callable[[], bool]) -> Iterator[str]:
    """Lines appended to `path` until `should_stop()`, each only once its newline is written: Dagster's
    `tail_file`, whose pieces of a line are joined here. A last line without one (a writer killed
    mid-message) is yielded when reading stops."""
    pending = ""
    for piece in tail_file(path, should_stop):
        pending += piece
        if pending.endswith("\n"):
            yield pending
            pending = ""
    if pending:
        yield pending


class WholeLineFileMessageReader(dg.PipesFileMessageReader):
    def _reader_thread(self, handler, is_resource_complete: Event) -> None:
        try:
            for line in whole_lines(self._path, is_resource_complete.is_set):
                handler.handle_message(json.loads(line))
        except:  # noqa: E722 - reported to Dagster and re-raised, as its own reader does
            handler.report_pipes_framework_exception(f"{self.__class__.__name__} reader thread", sys.exc_info())
            raise


class WholeLineTempFileMessageReader(dg.PipesTempFileMessageReader):
    """`PipesTempFileMessageReader` (PipesSubprocessClient's default) over WholeLineFileMessageReader."""

    @contextmanager
    def read_messages(self, handler) -> Iterator[dict]:
        with tempfile.TemporaryDirectory() as tempdir:
            reader = WholeLineFileMessageReader(os.path.join(tempdir, "messages"),
                                                include_stdio_in_messages=self._include_stdio_in_messages)
            with reader.read_messages(handler) as params:
                yield params
