"""Progress bars of the long commands: drawn on stderr when it is a terminal, and nothing at all
changes for a script (stdout identical, stderr empty) when it is not."""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path

from confluent_kafka import Consumer

from tests.support.broker_process import BrokerProcess
from tests.support.cli import CLI
from tests.support.terminal import Terminal, plain_lines
from tests.support.topics import create_topic

LINES = 20_000


def run_with_stderr_on_a_terminal(args: list[str], stdin: Path | None = None) -> tuple[int, bytes, bytes]:
    """Exit code, stdout (a pipe) and what was drawn on the terminal that stderr was."""
    term = Terminal(rows=24, cols=80)
    try:
        with open(stdin or "/dev/null", "rb") as source:
            proc = subprocess.Popen([*CLI, *args], stdin=source, stdout=subprocess.PIPE, stderr=term.slave)
            try:
                out, _ = proc.communicate(timeout=120)
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
        return proc.returncode, out, term.drain(0.5)
    finally:
        term.close()


def run_plain(args: list[str], stdin: Path | None = None) -> subprocess.CompletedProcess[bytes]:
    with open(stdin or "/dev/null", "rb") as source:
        return subprocess.run([*CLI, *args], stdin=source, capture_output=True, timeout=120)


def consumed(bootstrap: str, topic: str, n: int) -> int:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex[:6]}",
                  "auto.offset.reset": "earliest"})
    try:
        c.subscribe([topic])
        got = 0
        for _ in range(60):
            got += sum(1 for m in c.consume(num_messages=n, timeout=1) if m.error() is None)
            if got >= n:
                break
        return got
    finally:
        c.close()


def test_produce_of_a_file_draws_a_bar_only_on_a_terminal(bootstrap: str, tmp_path: Path) -> None:
    data = tmp_path / "records.txt"
    data.write_text("".join(f"record-{i:06d}\n" for i in range(LINES)))
    topic = f"prog-{uuid.uuid4().hex[:6]}"
    create_topic(bootstrap, topic, 1)
    args = ["produce", "--bootstrap-server", bootstrap, "--topic", topic]
    code, out, drawn = run_with_stderr_on_a_terminal(args, data)
    assert code == 0 and out == b"", drawn
    text = "\n".join(plain_lines(drawn))
    assert f"producing to {topic}" in text and "100%" in text, text
    assert all(len(line) <= 80 for line in plain_lines(drawn))
    plain = run_plain(args, data)
    assert plain.returncode == 0 and plain.stdout == b"" and plain.stderr == b"", plain
    assert consumed(bootstrap, topic, 2 * LINES) == 2 * LINES  # the bar changed nothing about what was sent


def test_dump_log_draws_a_bar_and_leaves_stdout_alone(kaflet_broker: BrokerProcess, tmp_path: Path) -> None:
    bootstrap = kaflet_broker.bootstrap
    data = tmp_path / "records.txt"
    data.write_text("".join(f"record-{i:06d}\n" for i in range(LINES)))
    topic = f"dump-{uuid.uuid4().hex[:6]}"
    create_topic(bootstrap, topic, 1)
    assert run_plain(["produce", "--bootstrap-server", bootstrap, "--topic", topic], data).returncode == 0
    [segment] = (kaflet_broker.data_dir / f"{topic}-0").glob("*.log")
    args = ["dump-log", "--files", str(segment), "--print-data-log"]
    plain = run_plain(args)
    assert plain.returncode == 0 and plain.stderr == b"", plain
    assert plain.stdout.count(b"| offset: ") == LINES
    code, out, drawn = run_with_stderr_on_a_terminal(args)
    assert code == 0
    assert out == plain.stdout  # byte for byte what a script gets without a terminal
    text = "\n".join(plain_lines(drawn))
    assert segment.name in text and "100%" in text, text
