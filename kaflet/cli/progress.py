"""Progress of the long command-line jobs on stderr: a bar on a terminal, plain lines otherwise.

On a terminal, a rich progress bar. Elsewhere (CI logs, a pipe, a file) a line every
``KAFLET_PROGRESS_INTERVAL_S`` seconds (default 5) while the job runs, e.g. ``producing to t:
120,000 records, 45.1 MB of 132.0 MB (34%)``, and one when it ends; a job done before the first
interval prints nothing, so scripts that run small jobs still see at most a one-line error.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Callable, Iterator

from kaflet.cli.common import CliError

# rich is imported only when there is a terminal to draw on: the scripted runs pay nothing.

#: Seconds between two plain progress lines (and before the first); the environment may change it.
INTERVAL_ENV = "KAFLET_PROGRESS_INTERVAL_S"
DEFAULT_INTERVAL_S = 5.0


@contextlib.contextmanager
def progress(description: str, total: int | None, unit: str = "bytes", shown: bool = True,
             each: str | None = None) -> Iterator[Callable[[int], None]]:
    """Yields ``advance(n)``: n more of ``total`` (None: unknown) ``unit`` are done; ``each``
    names what one call is (e.g. "records"), counted in the plain lines."""
    if not shown:
        yield lambda _n: None
        return
    if not sys.stderr.isatty():
        lines = _Lines(description, total, unit, each, _interval())
        yield lines.advance
        lines.finish()
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        MofNCompleteColumn,
        Progress,
        TaskProgressColumn,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )

    amount = DownloadColumn() if unit == "bytes" else MofNCompleteColumn()
    speed = [TransferSpeedColumn()] if unit == "bytes" else []
    with Progress(TextColumn("{task.description}"), BarColumn(), TaskProgressColumn(), amount, *speed,
                  TimeElapsedColumn(), TimeRemainingColumn(), console=Console(stderr=True),
                  # Output meant for a file or a pipe must never be drawn on the terminal instead;
                  # output meant for the terminal is printed above the bar.
                  redirect_stdout=sys.stdout.isatty()) as bar:
        task = bar.add_task(description, total=total)
        pending = 0
        step = max((total or 0) // 500, 1)

        def advance(n: int) -> None:
            # Handing rich every line of a large file would cost more than producing it: batch.
            nonlocal pending
            pending += n
            if pending >= step:
                bar.advance(task, pending)
                pending = 0

        yield advance
        bar.advance(task, pending)


def _interval() -> float:
    raw = os.environ.get(INTERVAL_ENV)
    if raw is None:
        return DEFAULT_INTERVAL_S
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value >= 0:  # also NaN
        raise CliError(f"{INTERVAL_ENV}={raw!r} is not a number of seconds (0 or more)")
    return value


def _amount(n: int, unit: str) -> str:
    if unit != "bytes":
        return f"{n:,} {unit}"
    for size, name in ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
        if n >= size:
            return f"{n / size:.1f} {name}"
    return f"{n} bytes"


class _Lines:
    """Plain progress lines, at most one an interval, the first after one interval."""

    def __init__(self, description: str, total: int | None, unit: str, each: str | None, interval_s: float) -> None:
        self.description = description
        self.total = total
        self.unit = unit
        self.each = each
        self.interval_s = interval_s
        self.began = time.monotonic()
        self.next_at = self.began + interval_s
        self.done = 0
        self.calls = 0
        self.printed = False

    def advance(self, n: int) -> None:
        self.done += n
        self.calls += 1
        if time.monotonic() >= self.next_at:
            self._print()
            self.next_at = time.monotonic() + self.interval_s

    def finish(self) -> None:
        if self.printed:
            self._print(f" in {time.monotonic() - self.began:.1f} s")

    def _print(self, suffix: str = "") -> None:
        counted = f"{self.calls:,} {self.each}, " if self.each else ""
        amount = _amount(self.done, self.unit)
        if self.total:
            amount += f" of {_amount(self.total, self.unit)} ({min(100, self.done * 100 // self.total)}%)"
        print(f"{self.description}: {counted}{amount}{suffix}", file=sys.stderr, flush=True)
        self.printed = True
