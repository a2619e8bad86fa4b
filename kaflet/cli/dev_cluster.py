"""`kaflet dev-cluster`: a ZooKeeper and N brokers on this machine, for development.

Broker ``i`` (1..N) gets ``broker.id=i``, a PLAINTEXT listener on 127.0.0.1:BASE+i-1, its data in
``DIR/broker-i`` and its output in ``DIR/broker-i.log``. Without ``--zookeeper`` a ZooKeeper
server from Debian's package runs with its data in ``DIR/zookeeper``, so a second run on the same
directory finds the cluster as it was left. Every process is stopped by its PID: brokers with
SIGTERM (their controlled shutdown), SIGKILL after ``--stop-timeout``, then ZooKeeper.
"""

from __future__ import annotations

import contextlib
import re
import signal
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

import click

from kaflet.cli.broker_process import BrokerProcess, stop_brokers
from kaflet.cli.common import CliError, parse_key_values
from kaflet.metadata.zk_testing import ZooKeeperServer, zookeeper_unavailable_reason

DEFAULT_CHROOT = "/kaflet"
DEFAULT_ZOOKEEPER_PORT = 2181
# Keys the tool sets itself for each broker; an --override of them would break the layout.
_OWN_KEYS = {"broker.id": "broker ids are 1..N",
             "listeners": "use --port",
             "log.dirs": "use --data-dir",
             "log.dir": "use --data-dir",
             "zookeeper.connect": "use --zookeeper"}
_ZK_CONNECT = re.compile(r"^(?P<hosts>[^/,:\s]+:\d{1,5}(?:,[^/,:\s]+:\d{1,5})*)(?P<chroot>/\S*)?$")
_LOG_LINES = 20


class _Stop(Exception):
    """SIGTERM or SIGINT arrived: shut the cluster down."""


# While a process is being spawned a signal must not interrupt Popen between the fork and the
# assignment of its result (the child would run on, unknown to the shutdown): it is held back
# and raised right after.
_spawning = False
_held: str | None = None


def _on_signal(signum: int, _frame: FrameType | None) -> None:
    global _held
    name = signal.Signals(signum).name
    if _spawning:
        _held = name
        return
    raise _Stop(name)


@contextlib.contextmanager
def _spawn() -> Iterator[None]:
    global _spawning, _held
    _spawning = True
    try:
        yield
    finally:
        _spawning = False
        held, _held = _held, None
        if held is not None:
            raise _Stop(held)


def _parse_zookeeper(value: str | None) -> tuple[str, str] | None:
    if value is None:
        return None
    m = _ZK_CONNECT.match(value.strip())
    if m is None:
        raise click.BadParameter(f"expected HOST:PORT[,HOST:PORT...][/chroot], got {value!r}",
                                 param_hint="--zookeeper")
    chroot = (m.group("chroot") or "").rstrip("/")
    return m.group("hosts"), chroot or DEFAULT_CHROOT


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _echo_log_tail(broker_id: int, broker: BrokerProcess) -> None:
    click.echo(f"Last lines of {broker.log_path} (broker {broker_id}):", err=True)
    for line in broker.log_tail(_LOG_LINES):
        click.echo(f"    {line}", err=True)


@click.command("dev-cluster")
@click.option("--brokers", "count", type=click.IntRange(min=1, max=100), default=3, show_default=True,
              help="Number of brokers (broker.id 1..N).")
@click.option("--zookeeper", "zookeeper", metavar="HOST:PORT[/chroot]",
              help="Use this ZooKeeper instead of starting one (chroot default /kaflet).")
@click.option("--port", "base_port", type=click.IntRange(min=1, max=65535), default=9092, show_default=True,
              help="Listener port of broker 1; broker i listens on PORT+i-1.")
@click.option("--data-dir", "data_dir", type=click.Path(file_okay=False, path_type=Path),
              default=Path("dev-cluster"), show_default=True,
              help="Where the brokers' data, their logs and ZooKeeper's data go (kept between runs).")
@click.option("--override", "overrides", multiple=True, metavar="KEY=VALUE",
              help="A server.properties key for every broker (repeatable).")
@click.option("--start-timeout", type=click.FloatRange(min=1), default=60.0, show_default=True,
              metavar="SECONDS", help="How long each process may take to start.")
@click.option("--stop-timeout", type=click.FloatRange(min=0), default=30.0, show_default=True,
              metavar="SECONDS", help="How long brokers may take to stop before they are killed.")
def dev_cluster(count: int, zookeeper: str | None, base_port: int, data_dir: Path, overrides: tuple[str, ...],
                start_timeout: float, stop_timeout: float) -> None:
    """Run a local cluster: ZooKeeper and N brokers, until Ctrl-C or SIGTERM."""
    extra = parse_key_values(overrides, "--override")
    for key in extra:
        if key in _OWN_KEYS:
            raise click.BadParameter(f"{key} is set by dev-cluster ({_OWN_KEYS[key]})", param_hint="--override")
    if base_port + count - 1 > 65535:
        raise click.BadParameter(f"{count} brokers from port {base_port} go past 65535", param_hint="--port")
    external = _parse_zookeeper(zookeeper)
    busy = [p for p in range(base_port, base_port + count) if not _port_free(p)]
    if busy:
        raise CliError(f"Port {busy[0]} on 127.0.0.1 is in use (another broker running?); choose --port.")
    if external is None:
        reason = zookeeper_unavailable_reason()
        if reason:
            raise CliError(f"Cannot start ZooKeeper: {reason}.")
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CliError(f"Cannot create {data_dir}: {exc.strerror or exc}.") from exc
    data_dir = data_dir.resolve()

    # From here on every started process is stopped on the way out, however we leave.
    previous = {sig: signal.signal(sig, _on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    zk: ZooKeeperServer | None = None
    brokers: dict[int, BrokerProcess] = {}
    failed = False
    try:
        if external is None:
            # Known before it starts: a signal during its start-up still finds it to stop.
            port = DEFAULT_ZOOKEEPER_PORT if _port_free(DEFAULT_ZOOKEEPER_PORT) else None
            zk = ZooKeeperServer(port=port, tick_time_ms=2000, data_dir=data_dir / "zookeeper")
            with _spawn():  # held back until ZooKeeper is up (about a second) or failed
                _start_zookeeper(zk, start_timeout)
            hosts, chroot = zk.connect_string, DEFAULT_CHROOT
        else:
            hosts, chroot = external
        connect = hosts + chroot
        click.echo(f"zookeeper.connect={connect}")
        for i in range(1, count + 1):
            config = {"broker.id": str(i), "listeners": f"PLAINTEXT://127.0.0.1:{base_port + i - 1}",
                      "zookeeper.connect": connect, **extra}
            brokers[i] = BrokerProcess(data_dir / f"broker-{i}", config, log_path=data_dir / f"broker-{i}.log",
                                       own_session=True)
            with _spawn():
                brokers[i].launch()
        deadline = time.monotonic() + start_timeout
        for i, broker in brokers.items():
            try:
                broker.wait_started(max(1.0, deadline - time.monotonic()))
            except (RuntimeError, TimeoutError):
                code = broker.proc.returncode if broker.proc is not None else None
                _echo_log_tail(i, broker)
                what = f"exited with code {code}" if code is not None else "did not listen in time"
                raise CliError(f"Broker {i} {what} before listening; see {broker.log_path}.") from None
            click.echo(f"Broker {i} listening on 127.0.0.1:{broker.port} (pid {broker.pid}), "
                       f"data in {broker.data_dir}, log {broker.log_path}")
        click.echo(f"Bootstrap servers: {','.join(b.bootstrap for b in brokers.values())}")
        click.echo(f"Logs in {data_dir}. Press Ctrl-C to stop.")
        _watch(brokers, zk)
    except _Stop as stop:
        click.echo(f"{stop.args[0]} received: stopping the cluster.")
    except CliError:
        failed = True
        raise
    finally:
        # A second Ctrl-C must not interrupt the shutdown itself.
        for sig in previous:
            signal.signal(sig, signal.SIG_IGN)
        try:
            _shutdown(brokers, zk, stop_timeout, quiet=failed)
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


def _start_zookeeper(zk: ZooKeeperServer, timeout: float) -> None:
    try:
        zk.start(timeout)
    except RuntimeError as exc:
        lines = str(exc).splitlines()
        raise CliError(f"ZooKeeper did not start: {lines[0] if lines else exc} (log: {zk.log_path}).") from None
    click.echo(f"ZooKeeper listening on {zk.connect_string} (pid {zk.pid}), data in {zk.base_dir}, "
               f"log {zk.log_path}")


def _watch(brokers: dict[int, BrokerProcess], zk: ZooKeeperServer | None) -> None:
    """Wait for a signal; a process that exits on its own stops the whole cluster."""
    while True:
        for i, broker in brokers.items():
            if not broker.alive:
                code = broker.proc.returncode if broker.proc is not None else None
                _echo_log_tail(i, broker)
                raise CliError(f"Broker {i} exited with code {code}; stopping the cluster.")
        if zk is not None and not zk.alive:
            raise CliError(f"ZooKeeper exited; stopping the cluster (log: {zk.log_path}).")
        time.sleep(0.2)


def _shutdown(brokers: dict[int, BrokerProcess], zk: ZooKeeperServer | None, timeout: float,
              quiet: bool) -> None:
    killed = stop_brokers(list(brokers.values()), timeout)
    for broker in killed:
        click.echo(f"Broker {broker.overrides['broker.id']} did not stop within {timeout:g} s: killed.", err=True)
    if zk is not None:
        zk.stop()
    if not quiet:
        click.echo("Stopped.")
    sys.stdout.flush()
