"""`kaflet top` against a real broker: the plain snapshot, its errors, and the live view on a pty."""

from __future__ import annotations

import fcntl
import os
import subprocess
import termios
import threading
import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from tests.support.cli import CLI, assert_one_line_error, assert_usage_error, free_port_range, run
from tests.support.terminal import Terminal, plain_lines
from tests.support.topics import create_topic

TITLES = ("BROKERS", "TOPICS", "REPLICATION:", "CONSUMER GROUPS")


def section(out: str, title: str) -> list[list[str]]:
    """The rows (split on whitespace) of one section of a snapshot, without its header row."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(title))
    rows = []
    for line in lines[start + 2:]:
        if line.startswith(TITLES):
            break
        if line.strip():
            rows.append(line.split())
    return rows


@pytest.fixture
def traffic(bootstrap: str) -> Iterator[str]:
    """A topic a producer thread writes to for as long as the test runs."""
    topic = f"busy-{uuid.uuid4().hex[:6]}"
    create_topic(bootstrap, topic, 2)
    stop = threading.Event()

    def produce() -> None:
        p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
        while not stop.is_set():
            for i in range(20):
                p.produce(topic, f"r{i}".encode())
            p.poll(0)
            time.sleep(0.02)
        p.flush(10)

    thread = threading.Thread(target=produce, daemon=True)
    thread.start()
    try:
        yield topic
    finally:
        stop.set()
        thread.join(20)


def lagging_group(bootstrap: str, records: int, committed: int) -> tuple[str, str]:
    """A topic of ``records`` records and a group that committed offset ``committed``: lag is the difference."""
    topic, group = f"lag-{uuid.uuid4().hex[:6]}", f"grp-{uuid.uuid4().hex[:6]}"
    create_topic(bootstrap, topic, 1)
    p = Producer({"bootstrap.servers": bootstrap})
    for i in range(records):
        p.produce(topic, f"v{i}".encode(), partition=0)
    assert p.flush(30) == 0
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        c.commit(offsets=[TopicPartition(topic, 0, committed)], asynchronous=False)
    finally:
        c.close()
    return topic, group


def test_once_shows_brokers_rates_and_lag(bootstrap: str, traffic: str) -> None:
    topic, group = lagging_group(bootstrap, 50, 13)
    proc = run("top", "--bootstrap-server", bootstrap, "--once", "--interval", "1.5")
    assert proc.returncode == 0, proc
    assert proc.stderr == ""
    out = proc.stdout
    assert "\x1b[" not in out  # a snapshot for scripts: no escape sequences
    assert all(len(line) <= 80 for line in out.splitlines()), out
    [broker] = section(out, "BROKERS")
    assert broker[1] == bootstrap and broker[-1] == "controller", out
    topics = {row[0]: row for row in section(out, "TOPICS")}
    assert float(topics[traffic][2].replace(",", "")) > 0, out  # records went in during the interval
    assert topics[topic][1:] == ["1", "0.0", "0.0"], out  # nothing produced or consumed since
    groups = {row[0]: row for row in section(out, "CONSUMER GROUPS")}
    assert groups[group][-1] == "37" and groups[group][-2] == "1", out
    assert "REPLICATION: 0 under-replicated, 0 offline" in out


def test_once_is_the_default_without_a_terminal(bootstrap: str) -> None:
    proc = run("top", "--bootstrap-server", bootstrap, "--interval", "0.2")
    assert proc.returncode == 0, proc
    assert section(proc.stdout, "BROKERS")[0][1] == bootstrap


def test_unreachable_broker_and_bad_arguments() -> None:
    port = free_port_range(1)
    proc = run("top", "--bootstrap-server", f"127.0.0.1:{port}", "--timeout", "1", "--once")
    assert_one_line_error(proc, "could not reach")
    assert_usage_error(run("top", "--bootstrap-server", f"127.0.0.1:{port}", "--interval", "0"))
    assert_usage_error(run("top"))


@pytest.mark.parametrize("key", [b"q", b"\x03"], ids=["q", "ctrl-c"])
def test_live_view_quits_and_restores_the_terminal(bootstrap: str, key: bytes) -> None:
    topic, group = lagging_group(bootstrap, 5, 2)
    term = Terminal(rows=40, cols=80)
    before = termios.tcgetattr(term.slave)

    def controlling_terminal() -> None:
        # Ctrl-C is a SIGINT only from the process's controlling terminal.
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    proc = subprocess.Popen([*CLI, "top", "--bootstrap-server", bootstrap, "--interval", "0.3"],
                            stdin=term.slave, stdout=term.slave, stderr=term.slave, start_new_session=True,
                            preexec_fn=controlling_terminal, env={**os.environ, "TERM": "xterm"})
    try:
        term.read_until(b"BROKERS", b"CONSUMER GROUPS", group.encode())
        # Raw keys are read one by one: the terminal is in cbreak mode, without echo, while top runs.
        during = termios.tcgetattr(term.slave)
        assert not during[3] & termios.ICANON and not during[3] & termios.ECHO
        os.write(term.master, key)
        assert proc.wait(timeout=60) == 0
        term.drain(0.2)
    except BaseException:
        term.close()
        raise
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    try:
        assert termios.tcgetattr(term.slave) == before
        out = term.output
        assert out.rfind(b"\x1b[?25h") > out.rfind(b"\x1b[?25l") >= 0  # the cursor is shown again
        assert b"\x1b[?1049h" not in out and b"\x1b[?1000h" not in out  # no alternate screen, no mouse
        lines = plain_lines(out)
        assert all(len(line) <= 80 for line in lines), [line for line in lines if len(line) > 80]
        assert any(line.split()[:1] == [group] and line.split()[-1] == "3" for line in lines), lines
        assert "Traceback" not in out.decode(errors="replace")
    finally:
        term.close()
