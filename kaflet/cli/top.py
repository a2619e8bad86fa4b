"""`kaflet top`: a live view of a cluster in a terminal (brokers, topic rates, replication, lag).

On a terminal it redraws in place every interval (plain ANSI cursor movement, no mouse, no
alternate screen, so it works over SSH in 80 columns) until q or Ctrl-C; otherwise, or with
--once, it prints one plain snapshot and exits.
"""

from __future__ import annotations

import contextlib
import os
import select
import sys
import termios
import time
import tty
from collections.abc import Iterator

import click
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

from kaflet.cli.common import Admin, CliError, bootstrap_option, config_file_option, timeout_option
from kaflet.cli.top_sample import Sample, View, collect, view

#: Rows per section on the live screen; a snapshot (--once) lists everything.
_LIVE_ROWS = {"topics": 8, "replication": 4, "groups": 5}


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f}"


def _table(title: str, *columns: tuple[str, str]) -> Table:
    # No box: the plain snapshot stays easy to read with awk, and nothing but ASCII reaches the terminal.
    table = Table(title=title, title_justify="left", title_style="bold", box=None, header_style="bold",
                  pad_edge=False, show_edge=False)
    for name, justify in columns:
        table.add_column(name, justify="right" if justify == "r" else "left", no_wrap=True,
                         overflow="ellipsis")
    return table


def _more(table: Table, shown: int, total: int) -> None:
    if total > shown:
        table.add_row(f"... {total - shown} more")


def render(v: View, bootstrap: str, limits: dict[str, int] | None = None, error: str | None = None) -> RenderableType:
    """One frame: a heading, then brokers, topics, replication problems and lagging groups."""

    def limit(section: str, total: int) -> int:
        return min(total, limits[section]) if limits else total

    parts: list[RenderableType] = []
    heading = Text(f"kaflet top  {bootstrap}  {len(v.brokers)} brokers, {len(v.topics)} topics, "
                   f"{v.total_partitions} partitions  {time.strftime('%H:%M:%S')}", style="bold")
    parts.append(heading)
    if error:
        parts.append(Text(f"refresh failed: {error}", style="red"))

    brokers = _table("BROKERS", ("ID", "r"), ("ADDRESS", "l"), ("RACK", "l"), ("ROLE", "l"))
    for b in v.brokers:
        brokers.add_row(str(b.id), f"{b.host}:{b.port}", b.rack or "-",
                        "controller" if b.id == v.controller else "")
    parts.append(brokers)

    topics = _table("TOPICS (records/s)", ("TOPIC", "l"), ("PARTITIONS", "r"), ("IN", "r"), ("OUT", "r"))
    n = limit("topics", len(v.topics))
    for t in v.topics[:n]:
        topics.add_row(t.topic, str(t.partitions), _rate(t.in_rate), _rate(t.out_rate))
    _more(topics, n, len(v.topics))
    parts.append(topics)

    problems = [*(("offline", tp, st) for tp, st in v.offline),
                *(("under-replicated", tp, st) for tp, st in v.under_replicated)]
    title = f"REPLICATION: {len(v.under_replicated)} under-replicated, {len(v.offline)} offline"
    replication = _table(title, ("TOPIC", "l"), ("PARTITION", "r"), ("LEADER", "r"), ("REPLICAS", "l"),
                         ("ISR", "l"), ("STATE", "l"))
    n = limit("replication", len(problems))
    for state, (topic, p), st in problems[:n]:
        replication.add_row(topic, str(p), str(st.leader) if st.leader >= 0 else "none",
                            ",".join(map(str, st.replicas)), ",".join(map(str, st.isr)) or "-", state)
    _more(replication, n, len(problems))
    parts.append(replication)

    groups = _table("CONSUMER GROUPS by lag", ("GROUP", "l"), ("STATE", "l"), ("PARTITIONS", "r"), ("LAG", "r"))
    n = limit("groups", len(v.groups))
    for g in v.groups[:n]:
        groups.add_row(g.group, g.state, str(g.partitions), str(g.lag))
    _more(groups, n, len(v.groups))
    parts.append(groups)
    return Group(*parts)


@contextlib.contextmanager
def _keys() -> Iterator[int | None]:
    """stdin in cbreak mode (keys arrive one by one, unechoed; Ctrl-C still interrupts), restored
    on the way out whatever happens; yields its fd, or None when stdin is not a terminal."""
    if not sys.stdin.isatty():
        yield None
        return
    fd = sys.stdin.fileno()
    saved = termios.tcgetattr(fd)
    try:
        tty.setcbreak(fd)
        yield fd
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


def _quit_pressed(fd: int | None, timeout: float) -> bool:
    """Wait up to ``timeout`` seconds for q (or Q); other keys are ignored."""
    deadline = time.monotonic() + timeout
    while (left := deadline - time.monotonic()) > 0:
        if fd is None:
            time.sleep(left)
            return False
        ready, _, _ = select.select([fd], [], [], left)
        if ready:
            key = os.read(fd, 1)
            if key in (b"q", b"Q", b""):  # b"": the terminal went away
                return True
    return False


def _live(admin: Admin, bootstrap: str, interval: float) -> None:
    console = Console()
    prev: Sample | None = None
    cur = collect(admin)  # a cluster that never answers is a one-line error before the screen is touched
    with _keys() as fd, Live(render(view(None, cur), bootstrap, _LIVE_ROWS), console=console,
                             auto_refresh=False, transient=False, redirect_stderr=False) as live:
        while not _quit_pressed(fd, interval):
            error = None
            try:
                prev, cur = cur, collect(admin)
            except CliError as exc:
                # A broker restarting must not end the session: keep the last figures, say why.
                error = exc.message
            live.update(render(view(prev, cur), bootstrap, _LIVE_ROWS, error), refresh=True)


def _once(admin: Admin, bootstrap: str, interval: float) -> None:
    first = collect(admin)
    time.sleep(interval)
    frame = render(view(first, collect(admin)), bootstrap)
    # Plain text whatever the environment says about colours: this is what scripts read.
    console = Console(no_color=True, highlight=False, force_terminal=False)
    with console.capture() as captured:
        console.print(frame)
    click.echo("\n".join(line.rstrip() for line in captured.get().splitlines()))


@click.command("top")
@bootstrap_option()
@config_file_option()
@click.option("--interval", type=click.FloatRange(min=0.1), default=1.0, show_default=True, metavar="SECONDS",
              help="Seconds between refreshes (and, with --once, between the two samples rates come from).")
@click.option("--once", is_flag=True,
              help="Print one snapshot and exit (the default when stdout is not a terminal).")
@timeout_option()
def top(bootstrap: str, config_file: str | None, interval: float, once: bool, timeout_s: float) -> None:
    """Watch brokers, topic rates, under-replicated partitions and lagging groups live (q quits)."""
    admin = Admin(bootstrap, config_file, timeout_s)
    if once or not sys.stdout.isatty():
        _once(admin, bootstrap, interval)
        return
    try:
        _live(admin, bootstrap, interval)
    except KeyboardInterrupt:
        pass  # Ctrl-C is how many people leave a top: a normal exit, the terminal already restored
