"""Progress bars for the long command-line jobs, on stderr and only when it is a terminal.

Scripts and CI logs read stdout and expect stderr to carry at most a one-line error, so when
stderr is not a terminal the job runs exactly as it would without a bar: nothing is printed.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator

# rich is imported only when there is a terminal to draw on: the scripted runs pay nothing.


@contextlib.contextmanager
def progress(description: str, total: int | None, unit: str = "bytes",
             shown: bool = True) -> Iterator[Callable[[int], None]]:
    """Yields ``advance(n)``: n more of ``total`` (None: unknown) ``unit`` are done."""
    if not shown or not sys.stderr.isatty():
        yield lambda _n: None
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
