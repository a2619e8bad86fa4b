"""End-to-end tests of `kaflet topics|produce|consume`, run as subprocesses.

They need only a `bootstrap` fixture ("127.0.0.1:PORT" of a running broker). The
assertions describe Kafka behaviour.
"""

from __future__ import annotations

import re
import socket
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from kaflet.cli.common import parse_properties_file
from tests.support.cli import CLI, assert_one_line_error, assert_usage_error, run

# Every command gets this broker timeout so a hung broker fails the test quickly.
BROKER_TIMEOUT = "5"


def new_topic_name() -> str:
    return f"cli-{uuid.uuid4().hex[:10]}"


def topics(bootstrap: str, *args: str) -> subprocess.CompletedProcess[str]:
    return run("topics", "--bootstrap-server", bootstrap, "--timeout", BROKER_TIMEOUT, *args)


def produce(bootstrap: str, topic: str, lines: str, *args: str) -> subprocess.CompletedProcess[str]:
    return run("produce", "--bootstrap-server", bootstrap, "--topic", topic, "--timeout", BROKER_TIMEOUT,
               *args, stdin=lines)


def consume(bootstrap: str, topic: str, *args: str) -> subprocess.CompletedProcess[str]:
    return run("consume", "--bootstrap-server", bootstrap, "--topic", topic, "--timeout", BROKER_TIMEOUT, *args)


def create_topic(bootstrap: str, partitions: int = 1) -> str:
    name = new_topic_name()
    proc = topics(bootstrap, "--create", "--topic", name, "--partitions", str(partitions))
    assert proc.returncode == 0, proc
    return name


def closed_port() -> int:
    """A 127.0.0.1 port nobody listens on (bound then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# ---------------------------------------------------------------- no broker needed


def test_help_lists_commands() -> None:
    proc = run("--help")
    assert proc.returncode == 0
    for command in ("topics", "produce", "consume"):
        assert command in proc.stdout


@pytest.mark.parametrize(
    "args",
    [
        ["topics", "--list"],  # missing --bootstrap-server
        ["topics", "--bootstrap-server", "127.0.0.1:1", "--no-such-flag"],
        ["topics", "--bootstrap-server", "127.0.0.1:1"],  # no action
        ["topics", "--bootstrap-server", "127.0.0.1:1", "--list", "--delete", "--topic", "t"],
        ["topics", "--bootstrap-server", "127.0.0.1:1", "--create"],  # no --topic
        ["topics", "--bootstrap-server", "127.0.0.1:1", "--create", "--topic", "t", "--partitions", "0"],
        ["topics", "--bootstrap-server", "127.0.0.1:1", "--create", "--topic", "t", "--config", "novalue"],
        ["topics", "--bootstrap-server", "127.0.0.1:1", "--alter", "--topic", "t"],  # no --partitions
        ["produce", "--bootstrap-server", "127.0.0.1:1"],  # no --topic
        ["produce", "--bootstrap-server", "127.0.0.1:1", "--topic", "t", "--property", "no.such=1"],
        ["produce", "--bootstrap-server", "127.0.0.1:1", "--topic", "t", "--compression-codec", "brotli"],
        ["consume", "--bootstrap-server", "127.0.0.1:1", "--topic", "t", "--offset", "3"],  # no --partition
        ["consume", "--bootstrap-server", "127.0.0.1:1", "--topic", "t", "--partition", "0", "--offset", "x"],
        ["consume", "--bootstrap-server", "127.0.0.1:1", "--topic", "t", "--partition", "0", "--offset", "2",
         "--from-beginning"],
        ["consume", "--bootstrap-server", "127.0.0.1:1", "--topic", "t", "--max-messages", "0"],
        ["consume", "--bootstrap-server", "127.0.0.1:1", "--topic", "t", "--property", "print.key"],
    ],
)
def test_bad_flags_are_usage_errors(args: list[str]) -> None:
    assert_usage_error(run(*args))


@pytest.mark.parametrize(
    ("args", "stdin"),
    [
        (["topics", "--list"], None),
        (["topics", "--describe", "--topic", "t"], None),
        (["topics", "--create", "--topic", "t", "--partitions", "1"], None),
        (["topics", "--delete", "--topic", "t"], None),
        (["produce", "--topic", "t"], "hello\n"),
        (["consume", "--topic", "t", "--from-beginning"], None),
    ],
)
def test_broker_down_is_one_line_error_within_timeout(args: list[str], stdin: str | None) -> None:
    start = time.monotonic()
    proc = run(args[0], "--bootstrap-server", f"127.0.0.1:{closed_port()}", "--timeout", "2", *args[1:],
               stdin=stdin, timeout=30)
    elapsed = time.monotonic() - start
    assert_one_line_error(proc, "could not reach")
    assert elapsed < 10, f"took {elapsed:.1f} s with --timeout 2"


def test_properties_file_parsing(tmp_path: Path) -> None:
    path = tmp_path / "client.properties"
    path.write_text(
        "# a comment\n! another comment\n\nclient.id = cli-test\nsocket.keepalive.enable:true\n"
        "sasl.jaas.config=a=b\\\n  c=d\n"
    )
    assert parse_properties_file(path) == {
        "client.id": "cli-test",
        "socket.keepalive.enable": "true",
        "sasl.jaas.config": "a=bc=d",
    }


# ---------------------------------------------------------------- topics


def test_topic_lifecycle(bootstrap: str) -> None:
    name = new_topic_name()
    created = topics(bootstrap, "--create", "--topic", name, "--partitions", "3", "--replication-factor", "1")
    assert created.returncode == 0, created
    assert f"Created topic {name}." in created.stdout

    listed = topics(bootstrap, "--list")
    assert listed.returncode == 0
    assert name in listed.stdout.splitlines()

    described = topics(bootstrap, "--describe", "--topic", name)
    assert described.returncode == 0, described
    header, *partition_lines = described.stdout.strip().splitlines()
    assert re.match(
        rf"Topic: {name}\tTopicId: [A-Za-z0-9_-]{{22}}\tPartitionCount: 3\tReplicationFactor: 1\tConfigs: ", header
    ), header
    assert len(partition_lines) == 3
    for i, line in enumerate(partition_lines):
        assert re.fullmatch(rf"\tTopic: {name}\tPartition: {i}\tLeader: \d+\tReplicas: \d+\tIsr: \d+", line), line

    deleted = topics(bootstrap, "--delete", "--topic", name)
    assert deleted.returncode == 0, deleted
    # Deletion may complete asynchronously on the broker; allow it a moment.
    deadline = time.monotonic() + 10
    while name in topics(bootstrap, "--list").stdout.splitlines():
        assert time.monotonic() < deadline, "topic still listed 10 s after delete"
        time.sleep(0.2)
    assert_one_line_error(topics(bootstrap, "--describe", "--topic", name), name, "does not exist")


def test_describe_all_includes_every_topic(bootstrap: str) -> None:
    first, second = create_topic(bootstrap, 1), create_topic(bootstrap, 2)
    proc = topics(bootstrap, "--describe")
    assert proc.returncode == 0, proc
    headers = [line for line in proc.stdout.splitlines() if line.startswith("Topic: ")]
    assert any(line.startswith(f"Topic: {first}\t") and "PartitionCount: 1" in line for line in headers)
    assert any(line.startswith(f"Topic: {second}\t") and "PartitionCount: 2" in line for line in headers)


def test_create_existing_topic(bootstrap: str) -> None:
    name = create_topic(bootstrap)
    assert_one_line_error(topics(bootstrap, "--create", "--topic", name, "--partitions", "1"), name, "already exists")
    quiet = topics(bootstrap, "--create", "--topic", name, "--partitions", "1", "--if-not-exists")
    assert quiet.returncode == 0, quiet


def test_create_with_config_shows_in_describe(bootstrap: str) -> None:
    name = new_topic_name()
    proc = topics(bootstrap, "--create", "--topic", name, "--partitions", "1",
                  "--config", "retention.ms=3600000", "--config", "cleanup.policy=compact")
    assert proc.returncode == 0, proc
    header = topics(bootstrap, "--describe", "--topic", name).stdout.splitlines()[0]
    configs = header.split("Configs: ", 1)[1].split(",")
    assert "retention.ms=3600000" in configs
    assert "cleanup.policy=compact" in configs


@pytest.mark.parametrize("action", ["--describe", "--delete"])
def test_unknown_topic(bootstrap: str, action: str) -> None:
    name = new_topic_name()
    assert_one_line_error(topics(bootstrap, action, "--topic", name), name, "does not exist")
    assert topics(bootstrap, action, "--topic", name, "--if-exists").returncode == 0


def test_alter_unknown_topic(bootstrap: str) -> None:
    name = new_topic_name()
    assert_one_line_error(topics(bootstrap, "--alter", "--topic", name, "--partitions", "4"), name, "does not exist")


def test_alter_adds_partitions(bootstrap: str) -> None:
    name = create_topic(bootstrap, 3)
    proc = topics(bootstrap, "--alter", "--topic", name, "--partitions", "6")
    assert proc.returncode == 0, proc
    assert "PartitionCount: 6" in topics(bootstrap, "--describe", "--topic", name).stdout
    # Kafka never shrinks a topic.
    assert_one_line_error(topics(bootstrap, "--alter", "--topic", name, "--partitions", "2"), name)


def test_command_config_file(bootstrap: str, tmp_path: Path) -> None:
    good = tmp_path / "good.properties"
    good.write_text("# client settings\nclient.id=kaflet-cli-test\n")
    assert topics(bootstrap, "--list", "--command-config", str(good)).returncode == 0
    bad = tmp_path / "bad.properties"
    bad.write_text("no.such.client.setting=1\n")
    assert_one_line_error(topics(bootstrap, "--list", "--command-config", str(bad)), "configuration")


# ---------------------------------------------------------------- produce / consume


def test_produce_keys_then_consume_with_print_key(bootstrap: str) -> None:
    name = create_topic(bootstrap, 1)
    lines = "".join(f"k{i}:value {i}\n" for i in range(5))
    proc = produce(bootstrap, name, lines, "--property", "parse.key=true", "--property", "key.separator=:")
    assert proc.returncode == 0, proc
    assert proc.stderr == ""

    out = consume(bootstrap, name, "--from-beginning", "--max-messages", "5", "--timeout-ms", "15000",
                  "--property", "print.key=true", "--property", "key.separator=|")
    assert out.returncode == 0, out
    assert out.stdout.splitlines() == [f"k{i}|value {i}" for i in range(5)]


def test_values_only_and_null_key(bootstrap: str) -> None:
    name = create_topic(bootstrap, 1)
    assert produce(bootstrap, name, "alpha\nbeta\n\ngamma\n").returncode == 0
    plain = consume(bootstrap, name, "--from-beginning", "--max-messages", "4", "--timeout-ms", "15000")
    assert plain.stdout.splitlines() == ["alpha", "beta", "", "gamma"]
    keyed = consume(bootstrap, name, "--from-beginning", "--max-messages", "1", "--timeout-ms", "15000",
                    "--property", "print.key=true")
    assert keyed.stdout == "null\talpha\n"


def test_max_messages_stops_early(bootstrap: str) -> None:
    name = create_topic(bootstrap, 3)
    assert produce(bootstrap, name, "".join(f"m{i}\n" for i in range(30))).returncode == 0
    out = consume(bootstrap, name, "--from-beginning", "--max-messages", "7", "--timeout-ms", "15000")
    assert out.returncode == 0, out
    assert len(out.stdout.splitlines()) == 7


def test_consume_all_partitions_without_group(bootstrap: str) -> None:
    name = create_topic(bootstrap, 4)
    values = {f"v{i}" for i in range(40)}
    # Distinct keys spread the records over the partitions.
    proc = produce(bootstrap, name, "".join(f"key{i}\tv{i}\n" for i in range(40)), "--property", "parse.key=true")
    assert proc.returncode == 0, proc
    out = consume(bootstrap, name, "--from-beginning", "--max-messages", "40", "--timeout-ms", "15000",
                  "--property", "print.partition=true")
    assert {line.split("\t")[1] for line in out.stdout.splitlines()} == values
    assert len({line.split("\t")[0] for line in out.stdout.splitlines()}) > 1, "all records in one partition"


def test_partition_and_offset(bootstrap: str) -> None:
    name = create_topic(bootstrap, 1)
    assert produce(bootstrap, name, "a\nb\nc\nd\ne\n").returncode == 0
    from_two = consume(bootstrap, name, "--partition", "0", "--offset", "2", "--max-messages", "3",
                       "--timeout-ms", "15000", "--property", "print.offset=true")
    assert from_two.stdout.splitlines() == ["Offset:2\tc", "Offset:3\td", "Offset:4\te"]
    earliest = consume(bootstrap, name, "--partition", "0", "--offset", "earliest", "--max-messages", "5",
                       "--timeout-ms", "15000")
    assert earliest.stdout.splitlines() == ["a", "b", "c", "d", "e"]


def test_offset_latest_sees_nothing_old(bootstrap: str) -> None:
    name = create_topic(bootstrap, 1)
    assert produce(bootstrap, name, "a\nb\nc\n").returncode == 0
    start = time.monotonic()
    out = consume(bootstrap, name, "--partition", "0", "--offset", "latest", "--timeout-ms", "2000")
    assert out.returncode == 0, out
    assert out.stdout == ""
    assert time.monotonic() - start < 20


def test_default_start_is_latest(bootstrap: str) -> None:
    name = create_topic(bootstrap, 1)
    assert produce(bootstrap, name, "old\n").returncode == 0
    consumer = subprocess.Popen(
        [*CLI, "consume", "--bootstrap-server", bootstrap, "--topic", name, "--max-messages", "1",
         "--timeout-ms", "20000"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    try:
        # The consumer's start-up time is unknown, so keep producing until it reads one.
        deadline = time.monotonic() + 30
        i = 0
        while consumer.poll() is None and time.monotonic() < deadline:
            produce(bootstrap, name, f"new{i}\n")
            i += 1
            time.sleep(0.3)
        stdout, _ = consumer.communicate(timeout=10)
    finally:
        if consumer.poll() is None:
            consumer.kill()
            consumer.wait()
    assert consumer.returncode == 0
    assert stdout.decode().startswith("new")


def test_print_partition_offset_timestamp(bootstrap: str) -> None:
    name = create_topic(bootstrap, 1)
    before_ms = int(time.time() * 1000) - 60_000
    assert produce(bootstrap, name, "k:v\n", "--property", "parse.key=true",
                   "--property", "key.separator=:").returncode == 0
    out = consume(bootstrap, name, "--from-beginning", "--max-messages", "1", "--timeout-ms", "15000",
                  "--property", "print.timestamp=true", "--property", "print.partition=true",
                  "--property", "print.offset=true", "--property", "print.key=true")
    match = re.fullmatch(r"CreateTime:(\d+)\tPartition:0\tOffset:0\tk\tv\n", out.stdout)
    assert match, out.stdout
    assert int(match.group(1)) >= before_ms


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_compression_codecs_round_trip(bootstrap: str, codec: str) -> None:
    name = create_topic(bootstrap, 1)
    lines = [f"{codec} record {i} " + "x" * 200 for i in range(20)]
    proc = produce(bootstrap, name, "\n".join(lines) + "\n", "--compression-codec", codec,
                   "--producer-property", "linger.ms=50")
    assert proc.returncode == 0, proc
    out = consume(bootstrap, name, "--from-beginning", "--max-messages", "20", "--timeout-ms", "15000")
    assert out.stdout.splitlines() == lines


def test_acks_all_producer_property(bootstrap: str) -> None:
    name = create_topic(bootstrap, 1)
    proc = produce(bootstrap, name, "durable\n", "--producer-property", "acks=all")
    assert proc.returncode == 0, proc
    out = consume(bootstrap, name, "--from-beginning", "--max-messages", "1", "--timeout-ms", "15000")
    assert out.stdout == "durable\n"


def test_missing_key_separator_is_reported(bootstrap: str) -> None:
    name = create_topic(bootstrap, 1)
    proc = produce(bootstrap, name, "k1:v1\nno separator here\n", "--property", "parse.key=true",
                   "--property", "key.separator=:")
    assert_one_line_error(proc, "separator")


def test_delivery_failure_is_reported(bootstrap: str) -> None:
    name = create_topic(bootstrap, 1)
    # The client refuses records above message.max.bytes: the delivery-failure path, deterministically.
    proc = produce(bootstrap, name, "small\n" + "x" * 5000 + "\n",
                   "--producer-property", "message.max.bytes=2000", "--producer-property", "batch.size=1000")
    assert_one_line_error(proc, "1 of 2 records were not delivered")


def test_consume_unknown_topic(bootstrap: str) -> None:
    name = new_topic_name()
    assert_one_line_error(consume(bootstrap, name, "--from-beginning", "--timeout-ms", "2000"), name, "does not exist")


def test_consume_unknown_partition(bootstrap: str) -> None:
    name = create_topic(bootstrap, 2)
    assert_one_line_error(consume(bootstrap, name, "--partition", "5", "--timeout-ms", "2000"), "partition 5")


def test_timeout_ms_exits_when_idle(bootstrap: str) -> None:
    name = create_topic(bootstrap, 1)
    start = time.monotonic()
    out = consume(bootstrap, name, "--from-beginning", "--timeout-ms", "1500")
    assert out.returncode == 0, out
    assert out.stdout == ""
    assert time.monotonic() - start < 15


def test_consume_with_group(bootstrap: str) -> None:
    name = create_topic(bootstrap, 2)
    assert produce(bootstrap, name, "g1\ng2\ng3\n").returncode == 0
    out = consume(bootstrap, name, "--group", f"grp-{name}", "--from-beginning", "--max-messages", "3",
                  "--timeout-ms", "20000")
    assert out.returncode == 0, out
    assert sorted(out.stdout.splitlines()) == ["g1", "g2", "g3"]
