"""One progress reporter for long jobs: a rich bar on a terminal, plain lines everywhere else.

A rich progress bar draws nothing useful when output is not a terminal (nohup, CI, a pipe), so
a job there would be silent for as long as it runs. :class:`ProgressReporter` draws the bar on
a terminal and otherwise writes one plain line every ``every_n`` items or ``every_s`` seconds,
whichever comes first (see :class:`LineSchedule`), and a last line when the job ends::

    with ProgressReporter("train", total=3000, console=console) as bar:
        for ...:
            bar.update(advance=1, info="return 0.41")

    # not a terminal:
    # train: 150/3000 (5%) 0:00:31 elapsed, ~0:09:51 left | return 0.41
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from types import TracebackType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress, TaskID


@dataclass(frozen=True)
class LineSchedule:
    """When a non-terminal reporter writes a line: after ``every_n`` more items (``None``: a
    twentieth of the total) or ``every_s`` seconds since the last line, whichever comes first;
    never sooner than ``min_s`` seconds after the last line (a fast job writes only its last line)."""

    every_n: int | None = None
    every_s: float = 30.0
    min_s: float = 5.0

    def items(self, total: int) -> int:
        return max(1, self.every_n if self.every_n is not None else total // 20)


ETA_AFTER = 50
"""A plain line estimates the time left once a fiftieth of the items (and at least two) are done."""


def _clock_text(seconds: float) -> str:
    return str(timedelta(seconds=round(max(0.0, seconds))))


class ProgressReporter:
    """Progress of ``total`` items under ``label``; a context manager (or ``start``/``stop``).

    ``enabled=False`` reports nothing. ``console`` is the rich console to write to (a new
    stdout console when omitted); whether it is a terminal decides between bar and lines.
    ``clock`` is injectable for tests.
    """

    def __init__(
        self,
        label: str,
        total: int,
        *,
        console: Console | None = None,
        enabled: bool = True,
        schedule: LineSchedule | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.label = label
        self.total = total
        self.enabled = enabled
        self.schedule = schedule if schedule is not None else LineSchedule()
        self._clock = clock
        self._console = console
        self._bar: Progress | None = None
        self._task: TaskID | None = None
        self.completed = 0
        self.info = ""
        self._start = 0.0
        self._last_line_at = 0.0
        self._last_line_done = 0
        self._running = False

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> ProgressReporter:
        if not self.enabled or self._running:
            return self
        from puppeteer.utils.consoles import output_console

        console = self._console if self._console is not None else output_console()
        self._console = console
        self._running = True
        self._start = self._last_line_at = self._clock()
        if console.is_terminal:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            self._bar = Progress(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TimeRemainingColumn(),
                TextColumn("{task.fields[info]}"),
                console=console,
                transient=False,
            )
            self._task = self._bar.add_task(self.label, total=self.total, info="")
            self._bar.start()
        return self

    def stop(self) -> None:
        if not self._running:
            return
        self._running = False
        if self._bar is not None:
            self._bar.stop()
            self._bar = None
        elif self.completed != self._last_line_done:
            self._write_line()

    def __enter__(self) -> ProgressReporter:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # ------------------------------------------------------------------ updates
    def update(
        self,
        completed: int | None = None,
        *,
        advance: int = 0,
        info: str | None = None,
        total: int | None = None,
    ) -> None:
        """Set ``completed`` (or add ``advance``), optionally the ``total`` and the ``info`` text."""
        self.completed = (self.completed if completed is None else completed) + advance
        if total is not None and total != self.total:
            self.total = total
            if self._bar is not None and self._task is not None:
                self._bar.update(self._task, total=total)
        if info is not None:
            self.info = info
        if not self._running:
            return
        if self._bar is not None:
            assert self._task is not None
            self._bar.update(self._task, completed=self.completed, info=self.info)
            return
        now = self._clock()
        since = now - self._last_line_at
        due_items = self.completed - self._last_line_done >= self.schedule.items(self.total)
        due = (due_items and since >= self.schedule.min_s) or since >= self.schedule.every_s
        if due and self.completed != self._last_line_done:
            self._write_line(now)

    def line(self, now: float | None = None) -> str:
        """The plain-text status line (what a non-terminal reporter writes)."""
        now = self._clock() if now is None else now
        elapsed = now - self._start
        text = f"{self.label}: {self.completed}/{self.total}"
        if self.total > 0:
            text += f" ({100 * self.completed / self.total:.0f}%)"
        text += f" {_clock_text(elapsed)} elapsed"
        if 0 < self.completed < self.total:
            # the first items carry the start-up (models, encoders, a whole first batch of calls): an
            # estimate from them alone said "~58 days left" after one episode of 65,536
            if self.completed >= max(2, self.total // ETA_AFTER):
                text += f", ~{_clock_text(elapsed / self.completed * (self.total - self.completed))} left"
            else:
                text += ", estimating time left"
        return f"{text} | {self.info}" if self.info else text

    def _write_line(self, now: float | None = None) -> None:
        now = self._clock() if now is None else now
        assert self._console is not None
        self._console.print(self.line(now), markup=False, highlight=False, soft_wrap=True)
        self._last_line_at = now
        self._last_line_done = self.completed
