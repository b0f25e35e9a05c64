"""Progress of long stage work, reported while it runs: documents (or files, samples), bytes, rate, ETA.

Stage logic stays free of Dagster and of any display: it opens a tracker around its main loop and
advances it,

    with track("clean", total=source.num_rows, unit="documents") as tracker:
        for batch in source.batches():
            ...
            tracker.advance(batch.num_rows, nbytes=text_bytes)

and whoever runs the stage decides where the figures go by listening: the Dagster assets write them
into the run's log at a bounded rate (the UI's run view), the CLI draws one live line per running
step (defs/progress_log.py, cli_progress.py). With no listener a tracker costs a counter update.

A step's label comes from the scope the runner opened (`step_scope("cleaned_documents[web]")`), so
stage code names only its phase ("clean", "signatures", "verify").
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

__all__ = ["ProgressSnapshot", "Tracker", "format_line", "listening", "step_scope", "track", "tracked_batches"]

# Listeners hear at most this often per tracker (the last update always): a batch loop advancing
# 1,000 times a second must not call a display or the run log 1,000 times.
NOTIFY_INTERVAL_S = 0.25


@dataclass(frozen=True)
class ProgressSnapshot:
    """What a tracker knows at one moment; `total`/`total_bytes` are None where the stage cannot know
    them in advance (then there is a rate but no ETA)."""

    label: str
    unit: str
    done: int
    total: int | None
    done_bytes: int
    total_bytes: int | None
    elapsed_s: float
    finished: bool = False

    @property
    def fraction(self) -> float | None:
        """Done share by bytes where both are known (rows differ wildly in size), else by count."""
        if self.total_bytes:
            return min(1.0, self.done_bytes / self.total_bytes)
        if self.total:
            return min(1.0, self.done / self.total)
        return None

    @property
    def eta_s(self) -> float | None:
        fraction = self.fraction
        if fraction is None or fraction <= 0 or self.finished:
            return None
        return self.elapsed_s * (1 - fraction) / fraction


Listener = Callable[[ProgressSnapshot], None]

_listeners: list[Listener] = []
_listeners_lock = threading.Lock()
_scope: ContextVar[str] = ContextVar("progress_scope", default="")


@contextmanager
def listening(listener: Listener) -> Iterator[None]:
    """Send every tracker's updates to `listener` while the block runs (any thread's trackers)."""
    with _listeners_lock:
        _listeners.append(listener)
    try:
        yield
    finally:
        with _listeners_lock:
            _listeners.remove(listener)


@contextmanager
def step_scope(label: str) -> Iterator[None]:
    """Name the step whose trackers open inside the block: `cleaned_documents[web]`."""
    token = _scope.set(label)
    try:
        yield
    finally:
        _scope.reset(token)


class Tracker:
    """Counts one phase of a step. `advance` is thread-safe: ingest's worker threads share one."""

    def __init__(self, label: str, unit: str, total: int | None, total_bytes: int | None,
                 clock: Callable[[], float] = time.monotonic):
        self.label, self.unit, self.total, self.total_bytes = label, unit, total, total_bytes
        self._clock = clock
        self._start = clock()
        self._last_notice = float("-inf")
        self._lock = threading.Lock()
        self.done = 0
        self.done_bytes = 0

    def snapshot(self, finished: bool = False) -> ProgressSnapshot:
        return ProgressSnapshot(self.label, self.unit, self.done, self.total, self.done_bytes, self.total_bytes,
                                self._clock() - self._start, finished)

    def advance(self, n: int = 0, nbytes: int = 0) -> None:
        with self._lock:
            self.done += n
            self.done_bytes += nbytes
            now = self._clock()
            if now - self._last_notice < NOTIFY_INTERVAL_S:
                return
            self._last_notice = now
            snapshot = self.snapshot()
        _notify(snapshot)

    def finish(self) -> None:
        with self._lock:
            snapshot = self.snapshot(finished=True)
        _notify(snapshot)


def _notify(snapshot: ProgressSnapshot) -> None:
    with _listeners_lock:
        listeners = list(_listeners)
    for listener in listeners:
        listener(snapshot)


@contextmanager
def track(phase: str, total: int | None = None, unit: str = "documents",
          total_bytes: int | None = None) -> Iterator[Tracker]:
    """A tracker for one phase of the current step; listeners hear it start, advance and finish
    (also when the phase raises: a display must not keep a dead line)."""
    scope = _scope.get()
    label = f"{scope} {phase}" if scope else phase
    tracker = Tracker(label, unit, total, total_bytes)
    _notify(tracker.snapshot())
    try:
        yield tracker
    finally:
        tracker.finish()


def _size(nbytes: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if nbytes < 1000 or unit == "TB":
            return f"{nbytes:.0f} {unit}" if unit == "B" else f"{nbytes:.1f} {unit}"
        nbytes /= 1000
    raise AssertionError("unreachable")


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def format_line(s: ProgressSnapshot) -> str:
    """One plain line: `cleaned_documents[web] clean: 12,000/50,000 documents (24%), 31.5 MB, 6.2 MB/s,
    ETA 0:00:15` (a finished phase ends with `done in 0:00:05`)."""
    count = f"{s.done:,}/{s.total:,}" if s.total is not None else f"{s.done:,}"
    parts = [f"{count} {s.unit}"]
    if s.fraction is not None:
        parts[0] += f" ({s.fraction:.0%})"
    if s.done_bytes or s.total_bytes:
        parts.append(_size(s.done_bytes) + (f" of {_size(s.total_bytes)}" if s.total_bytes else ""))
    if s.elapsed_s > 0 and (s.done or s.done_bytes):
        rate = s.done_bytes / s.elapsed_s
        parts.append(f"{_size(rate)}/s" if s.done_bytes else f"{s.done / s.elapsed_s:,.0f} {s.unit}/s")
    if s.finished:
        parts.append(f"done in {_duration(s.elapsed_s)}")
    elif (eta := s.eta_s) is not None:
        parts.append(f"ETA {_duration(eta)}")
    return f"{s.label}: " + ", ".join(parts)


def tracked_batches(batches: Iterable[Any], phase: str, total: int | None = None,
                    unit: str = "documents") -> Iterator[Any]:
    """Pass record batches through, advancing a tracker by each batch's rows and Arrow bytes once
    the consumer is done with it (so the rate is the stage's, not the reader's)."""
    with track(phase, total, unit) as tracker:
        for batch in batches:
            rows, nbytes = batch.num_rows, batch.nbytes
            yield batch
            # dropped before the next is read: a generator's loop variable would otherwise hold the
            # consumer's finished batch while the next one is read (two batches at the peak)
            del batch
            tracker.advance(rows, nbytes)
