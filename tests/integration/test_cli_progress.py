"""Progress of the long commands: a bar drawn on stderr when it is a terminal; when it is not,
plain lines every KAFLET_PROGRESS_INTERVAL_S seconds for a job that lasts longer than that, and
nothing at all for one that does not (stdout identical either way)."""

from __future__ import annotations

import os
import re
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


#: Longer than any of these jobs takes, even on a loaded machine: they print no progress lines.
QUIET = "600"
#: Shorter than any of them: they print lines.
CHATTY = "0.01"


def run_plain(args: list[str], stdin: Path | None = None, interval: str = QUIET) -> subprocess.CompletedProcess[bytes]:
    """Run with stderr to a pipe, progress lines every `interval` seconds."""
    env = {**os.environ, "KAFLET_PROGRESS_INTERVAL_S": interval}
    with open(stdin or "/dev/null", "rb") as source:
        return subprocess.run([*CLI, *args], stdin=source, capture_output=True, timeout=120, env=env)


def progress_lines(stderr: bytes, description: str) -> list[int]:
    """The percentages of the plain progress lines, checking that every line of stderr is one."""
    lines = stderr.decode().splitlines()
    assert lines, "no progress lines"
    percents = []
    for line in lines:
        m = re.fullmatch(rf"{re.escape(description)}: [\d,]+ \w+, [\d.]+ (?:bytes|KiB|MiB) of [\d.]+ (?:KiB|MiB) "
                         rf"\((\d+)%\)(?: in [\d.]+ s)?", line)
        assert m, line
        percents.append(int(m.group(1)))
    assert percents == sorted(percents) and percents[-1] == 100, lines
    assert lines[-1].endswith(" s"), lines  # the closing line says how long it took
    return percents


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
    lines = run_plain(args, data, CHATTY)
    assert lines.returncode == 0 and lines.stdout == b"", lines
    progress_lines(lines.stderr, f"producing to {topic}")
    assert f"{LINES:,} records" in lines.stderr.decode().splitlines()[-1]
    assert consumed(bootstrap, topic, 3 * LINES) == 3 * LINES  # the progress changed nothing about what was sent


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
    lines = run_plain(args, interval=CHATTY)
    assert lines.returncode == 0 and lines.stdout == plain.stdout
    progress_lines(lines.stderr, segment.name)
    text = "\n".join(plain_lines(drawn))
    assert segment.name in text and "100%" in text, text
