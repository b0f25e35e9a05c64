"""platform_assets.progress and its displays: counts, rates, ETA, bounded notification rates."""

import io
import threading

import pyarrow as pa
import pytest

from platform_assets import progress
from platform_assets.cli_progress import LiveProgress, PlainProgress, console_progress
from platform_assets.defs.progress_log import RunLogProgress
from platform_assets.progress import ProgressSnapshot, Tracker, format_line, listening, step_scope, track


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def snap(label="s clean", done=0, total=None, done_bytes=0, total_bytes=None, elapsed=0.0, finished=False):
    return ProgressSnapshot(label, "documents", done, total, done_bytes, total_bytes, elapsed, finished)


def test_line_has_count_share_bytes_rate_and_eta():
    line = format_line(snap(done=12_000, total=48_000, done_bytes=30_000_000, elapsed=5.0))
    assert line == "s clean: 12,000/48,000 documents (25%), 30.0 MB, 6.0 MB/s, ETA 0:00:15"
    # bytes known in advance drive the share (documents vary in size): 3 of 4 MB done after 30 s
    line = format_line(snap(done=10, done_bytes=3_000_000, total_bytes=4_000_000, elapsed=30.0))
    assert "(75%)" in line and "3.0 MB of 4.0 MB" in line and line.endswith("ETA 0:00:10")
    # nothing to count against: a rate, no ETA; a finished phase says how long it took
    assert format_line(snap(done=500, elapsed=2.0)) == "s clean: 500 documents, 250 documents/s"
    assert format_line(snap(done=4, total=4, elapsed=3725, finished=True)).endswith("done in 1:02:05")


def test_tracker_notifies_at_a_bounded_rate_and_always_the_end(monkeypatch):
    clock, heard = Clock(), []
    tracker = Tracker("x", "rows", 1000, None, clock)
    with listening(heard.append):
        for _ in range(1000):  # 1,000 advances within 0.1 s of each other: few notices
            tracker.advance(1)
            clock.now += 0.0001
        tracker.finish()
    assert len(heard) == 2 and heard[0].done == 1 and heard[-1].finished and heard[-1].done == 1000
    clock.now += 1.0
    with listening(heard.append):
        tracker.advance(0)
    assert len(heard) == 3  # a second notice once NOTIFY_INTERVAL_S passed


def test_track_labels_with_the_step_scope_and_finishes_on_error():
    heard = []
    with listening(heard.append), step_scope("cleaned_documents[web]"):
        with pytest.raises(RuntimeError), track("clean", total=3) as tracker:
            tracker.advance(2)
            raise RuntimeError("boom")
    assert {s.label for s in heard} == {"cleaned_documents[web] clean"}
    assert heard[-1].finished and heard[-1].done == 2  # a display drops the line of a failed phase too
    with listening(heard.append):
        with track("alone"):
            pass
    assert heard[-1].label == "alone"  # outside a scope: the phase alone


def test_advance_from_many_threads_counts_every_item():
    tracker = Tracker("x", "documents", None, None)

    def work():
        for _ in range(10_000):
            tracker.advance(1, 3)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert (tracker.done, tracker.done_bytes) == (40_000, 120_000)


def test_tracked_batches_counts_rows_and_bytes_after_each_batch():
    batches = [pa.record_batch({"text": ["a" * 10] * n}) for n in (3, 4)]
    heard = []
    with listening(heard.append):
        out = list(progress.tracked_batches(iter(batches), "tokenize", total=7))
    assert out == batches
    last = heard[-1]
    assert last.finished and (last.done, last.total) == (7, 7)
    assert last.done_bytes == sum(b.nbytes for b in batches)


def test_tracked_batches_holds_no_finished_batch_while_the_next_is_read():
    """A generator's loop variable held the consumer's finished batch while the next one was read (two
    batches at a write pass's peak): dropped once the consumer is done."""
    import weakref

    class Batch:
        num_rows, nbytes = 2, 16

    alive = []

    def source():
        for _ in range(3):
            batch = Batch()
            yield batch
            del batch
            alive.append(len([r for r in refs if r() is not None]))

    refs: list[weakref.ref] = []
    for batch in progress.tracked_batches(source(), "split", total=6):
        refs.append(weakref.ref(batch))
        del batch
    assert alive == [0, 0, 0]  # when the next batch is made, no earlier one is referenced


def test_plain_lines_every_interval_and_only_for_long_phases():
    out = io.StringIO()
    plain = PlainProgress(out, interval_s=10)
    for elapsed in (0, 1, 9.9, 10.0, 15, 20.5, 25):
        plain(snap(done=int(elapsed), elapsed=elapsed))
    plain(snap(done=30, elapsed=30, finished=True))
    plain(snap(label="quick", done=2, elapsed=0.5, finished=True))  # a short phase prints nothing
    lines = out.getvalue().splitlines()
    assert [line.split(": ")[1].split(" ")[0] for line in lines] == ["10", "20", "30"]
    assert lines[-1].endswith("done in 0:00:30")


def test_run_log_lines_are_bounded_for_a_long_phase():
    class Log:
        def __init__(self):
            self.lines = []

        def info(self, msg):
            self.lines.append(msg)

    log = Log()
    listener = RunLogProgress(log, interval_s=30)
    for second in range(3600):  # an hour of notices, 4 a second in real life; one a second here
        listener(snap(done=second, total=3600, elapsed=float(second)))
    listener(snap(done=3600, total=3600, elapsed=3600.0, finished=True))
    assert len(log.lines) == 119 + 1  # at 30, 60, ..., 3570 s, and the final line
    assert log.lines[0].startswith("s clean: 30/3,600 documents") and "done in 1:00:00" in log.lines[-1]


def test_live_display_shows_running_phases_and_drops_finished_ones():
    out = io.StringIO()
    live = LiveProgress(out)
    live(snap(label="a read", done=1, total_bytes=100, done_bytes=10, elapsed=1))
    live(snap(label="b clean", done=5, elapsed=1))
    live(snap(label="a read", done=2, total_bytes=100, done_bytes=50, elapsed=2))
    tasks = {t.description: t for t in live.progress.tasks}
    assert set(tasks) == {"a read", "b clean"}
    assert tasks["a read"].completed == 500 and tasks["a read"].total == 1000
    assert tasks["b clean"].total is None  # nothing to count against: a pulsing bar
    assert "50 B of 100 B" in tasks["a read"].fields["figures"]
    live(snap(label="a read", done=2, elapsed=3, finished=True))
    assert [t.description for t in live.progress.tasks] == ["b clean"]


def test_console_progress_is_plain_when_not_a_terminal():
    out = io.StringIO()
    with console_progress("auto", out), track("long") as tracker:
        tracker._start -= 60  # a phase that ran for a minute
    assert out.getvalue().startswith("long: 0 documents, done in 0:01:00")
    with console_progress("off", out):
        with track("silent") as tracker:
            tracker._start -= 60
    assert "silent" not in out.getvalue()
