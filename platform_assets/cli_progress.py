"""The CLI's progress display: one live line per running phase in a terminal (rich), plain lines at a
bounded rate when stdout is a file or a pipe (CI logs, `| tee`), where a redrawn line would be noise.
Listeners of platform_assets.progress; the run's own log gets its lines from defs/progress_log.py.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

from platform_assets.progress import ProgressSnapshot, format_line, listening

# Plain lines: one per phase every 10 s, and the final line of phases that ran at least that long;
# a main job whose steps take a second each prints nothing but its summary table.
PLAIN_INTERVAL_S = 10.0
BAR_STEPS = 1000  # the bar's resolution: 0.1%


class PlainProgress:
    def __init__(self, out: TextIO, interval_s: float = PLAIN_INTERVAL_S):
        self.out, self.interval_s = out, interval_s
        self._last: dict[str, float] = {}
        self._lock = threading.Lock()

    def __call__(self, s: ProgressSnapshot) -> None:
        with self._lock:
            if s.finished:
                self._last.pop(s.label, None)
                if s.elapsed_s < self.interval_s:
                    return
            elif s.elapsed_s - self._last.get(s.label, 0.0) < self.interval_s or s.fraction == 1.0:
                return  # (all done but not finished yet: the final line follows)
            else:
                self._last[s.label] = s.elapsed_s
            print(format_line(s), file=self.out, flush=True)


class LiveProgress:
    """A rich progress bar per running phase, removed when the phase finishes; the summary lines the
    CLI prints meanwhile appear above the bars (rich redirects stdout while it draws)."""

    def __init__(self, out: TextIO):
        from rich.console import Console
        from rich.progress import BarColumn, Progress, TextColumn

        self.progress = Progress(TextColumn("{task.description}"), BarColumn(bar_width=24),
                                 TextColumn("{task.fields[figures]}"), console=Console(file=out),
                                 transient=True, refresh_per_second=4)
        self._tasks: dict[str, int] = {}
        self._lock = threading.Lock()

    def __call__(self, s: ProgressSnapshot) -> None:
        figures = format_line(s).removeprefix(f"{s.label}: ")
        completed = None if s.fraction is None else round(s.fraction * BAR_STEPS)
        with self._lock:
            task = self._tasks.get(s.label)
            if s.finished:
                if task is not None:
                    self.progress.remove_task(self._tasks.pop(s.label))
                return
            if task is None:
                # total None: an indeterminate (pulsing) bar for phases with nothing to count against
                self._tasks[s.label] = self.progress.add_task(
                    s.label, total=BAR_STEPS if completed is not None else None, figures=figures)
            else:
                self.progress.update(task, completed=completed, figures=figures)


@contextmanager
def console_progress(mode: str = "auto", out: TextIO | None = None) -> Iterator[None]:
    """`auto`: live bars in a terminal, plain lines otherwise; `live`, `plain`, or `off`."""
    out = out or sys.stdout
    if mode == "auto":
        mode = "live" if out.isatty() else "plain"
    if mode == "off":
        yield
    elif mode == "plain":
        with listening(PlainProgress(out)):
            yield
    else:
        live = LiveProgress(out)
        with live.progress, listening(live):
            yield
