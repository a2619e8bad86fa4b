"""`kaflet topics --describe` with kafka-topics' partition reports, on one broker (RF=1 topics).

The reports on a cluster with a dead broker are in tests/cluster/test_cli_cluster.py.
"""

from __future__ import annotations

import re
import time
import uuid

import pytest
from confluent_kafka import Consumer

from tests.support.cli import assert_usage_error
from tests.support.cli import run as cli

TIMEOUT = "10"


def topics(bootstrap: str, *args: str) -> list[str]:
    proc = cli("topics", "--bootstrap-server", bootstrap, "--timeout", TIMEOUT, *args)
    assert proc.returncode == 0, proc
    assert proc.stderr == "", proc.stderr
    return proc.stdout.splitlines()


@pytest.fixture(scope="module")
def described(bootstrap: str) -> dict[str, str]:
    """Two RF=1 topics: ``plain`` (defaults, 2 partitions) and ``strict`` (min.insync.replicas=2)."""
    names = {"plain": f"plain-{uuid.uuid4().hex[:8]}", "strict": f"strict-{uuid.uuid4().hex[:8]}"}
    topics(bootstrap, "--create", "--topic", names["plain"], "--partitions", "2", "--replication-factor", "1")
    topics(bootstrap, "--create", "--topic", names["strict"], "--partitions", "1", "--replication-factor", "1",
           "--config", "min.insync.replicas=2")
    return names


def test_describe_layout(bootstrap: str, described: dict[str, str]) -> None:
    plain, strict = described["plain"], described["strict"]
    lines = topics(bootstrap, "--describe", "--topic", strict)
    assert len(lines) == 2
    assert re.fullmatch(rf"Topic: {strict}\tTopicId: [A-Za-z0-9_-]{{22}}\tPartitionCount: 1\tReplicationFactor: 1"
                        r"\tConfigs: min\.insync\.replicas=2", lines[0]), lines[0]
    assert re.fullmatch(rf"\tTopic: {strict}\tPartition: 0\tLeader: (\d+)\tReplicas: \1\tIsr: \1", lines[1]), lines[1]
    lines = topics(bootstrap, "--describe", "--topic", plain)
    assert lines[0].endswith("\tConfigs: ") and len(lines) == 3
    assert "Offline:" not in "\n".join(lines)  # the only broker is live


def test_under_min_isr_and_at_min_isr(bootstrap: str, described: dict[str, str]) -> None:
    plain, strict = described["plain"], described["strict"]
    # ISR 1 < min.insync.replicas 2: under; the defaults (min ISR 1) are exactly at it.
    under = [topics(bootstrap, "--describe", "--under-min-isr-partitions", "--topic", t) for t in (plain, strict)]
    assert under[0] == []
    assert len(under[1]) == 1 and under[1][0].startswith(f"\tTopic: {strict}\tPartition: 0\tLeader: ")
    at = [topics(bootstrap, "--describe", "--at-min-isr-partitions", "--topic", t) for t in (plain, strict)]
    assert [line.split("\t")[2] for line in at[0]] == ["Partition: 0", "Partition: 1"]
    assert at[1] == []
    # Across all topics: no topic header lines, only the matching partitions.
    everything = topics(bootstrap, "--describe", "--under-min-isr-partitions")
    assert all(line.startswith("\tTopic: ") for line in everything), everything
    assert any(f"\tTopic: {strict}\t" in line for line in everything)
    assert not any(f"\tTopic: {plain}\t" in line for line in everything)


def test_healthy_single_broker_has_no_under_replicated_or_unavailable(bootstrap: str,
                                                                     described: dict[str, str]) -> None:
    for report in ("--under-replicated-partitions", "--unavailable-partitions"):
        for name in described.values():
            assert topics(bootstrap, "--describe", report, "--topic", name) == []


def test_topics_with_overrides(bootstrap: str, described: dict[str, str]) -> None:
    lines = topics(bootstrap, "--describe", "--topics-with-overrides")
    assert any(line.startswith(f"Topic: {described['strict']}\t") for line in lines)
    assert not any(described["plain"] in line for line in lines)
    assert not any(line.startswith("\t") for line in lines)  # no partition lines


def test_exclude_internal(bootstrap: str, described: dict[str, str]) -> None:
    # A consumer group makes the broker create __consumer_offsets (an internal topic).
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex[:6]}",
                         "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe([described["plain"]])
        deadline = time.monotonic() + 30
        while not consumer.assignment() and time.monotonic() < deadline:
            consumer.poll(0.2)
        assert consumer.assignment()
    finally:
        consumer.close()
    headers = [line for line in topics(bootstrap, "--describe") if not line.startswith("\t")]
    assert any(line.startswith("Topic: __consumer_offsets\t") for line in headers)
    excluded = topics(bootstrap, "--describe", "--exclude-internal")
    assert not any("__consumer_offsets" in line for line in excluded)
    assert any(line.startswith(f"Topic: {described['plain']}\t") for line in excluded)
    assert "__consumer_offsets" not in topics(bootstrap, "--list", "--exclude-internal")


@pytest.mark.parametrize("args", [
    ["--list", "--under-replicated-partitions"],
    ["--create", "--topic", "x", "--unavailable-partitions"],
    ["--describe", "--under-replicated-partitions", "--at-min-isr-partitions"],
    ["--describe", "--topics-with-overrides", "--under-min-isr-partitions"],
])
def test_report_option_misuse(args: list[str]) -> None:
    assert_usage_error(cli("topics", "--bootstrap-server", "127.0.0.1:1", *args))
