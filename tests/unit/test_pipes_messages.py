"""The training run's Pipes messages are parsed only as whole lines: a message caught half written
(the trainer mid-`write`) waits for its newline instead of killing Dagster's reader thread."""

from __future__ import annotations

import json
import time

import dagster as dg
from dagster_pipes import PipesDefaultMessageWriter

from platform_assets.training_launch.pipes_messages import WholeLineTempFileMessageReader, whole_lines


class _Handler:
    def __init__(self):
        self.messages, self.failures = [], []

    def handle_message(self, message):
        self.messages.append(message)

    def report_pipes_framework_exception(self, origin, exc_info):
        self.failures.append((origin, exc_info[0]))


def _half_written_message(reader) -> _Handler:
    """One message written in two parts 0.2 s apart (the reader polls every 10 ms), then a second."""
    handler = _Handler()
    first = json.dumps({"__dagster_pipes_version": "0.1", "method": "log", "params": {"message": "x" * 2000}})
    second = json.dumps({"__dagster_pipes_version": "0.1", "method": "log", "params": {"message": "done"}})
    with reader.read_messages(handler) as params:
        with open(params[PipesDefaultMessageWriter.FILE_PATH_KEY], "a", encoding="utf-8") as f:
            f.write(first[:1238])
            f.flush()
            time.sleep(0.2)
            f.write(first[1238:] + "\n" + second + "\n")
            f.flush()
        time.sleep(0.1)
    return handler


def test_a_message_caught_half_written_is_read_once_it_is_whole():
    handler = _half_written_message(WholeLineTempFileMessageReader())
    assert handler.failures == []
    assert [m["params"]["message"] for m in handler.messages] == ["x" * 2000, "done"]


def test_dagsters_own_reader_loses_the_run_on_the_same_message():
    """Why the reader exists: Dagster's parses the half line, its thread dies, the rest is lost."""
    handler = _half_written_message(dg.PipesTempFileMessageReader())
    assert [f[1] for f in handler.failures] == [json.JSONDecodeError] and handler.messages == []


def test_whole_lines_yields_a_last_line_without_newline_when_reading_stops(tmp_path):
    path = tmp_path / "messages"
    path.write_text('{"a": 1}\n{"b": ', encoding="utf-8")
    assert list(whole_lines(str(path), lambda: True)) == ['{"a": 1}\n', '{"b": ']
