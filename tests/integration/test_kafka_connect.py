"""A Kafka Connect 4.3 distributed worker moving data through a real kaflet broker.

The worker (tests/support/connect.py) keeps its configs, source offsets and statuses in compacted
topics of kaflet's, joins a Connect group through kaflet's group coordinator and runs Kafka's
FileStreamSource and FileStreamSink connectors: lines of a file go into a topic and back out into
another file. Then it is stopped with SIGTERM and started again, and takes up where its
committed offsets say. With exactly-once source support (KIP-618) the source task moves between
two workers, and a worker SIGKILLed inside a transaction leaves it aborted; a stopped sink's
offsets are reset through the REST API (KIP-875).
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource

from tests.support import cli
from tests.support.broker_process import BrokerProcess, running_broker
from tests.support.cli import free_port_range
from tests.support.connect import (
    FILE_SINK,
    FILE_SOURCE,
    ConnectWorker,
    append_lines,
    file_lines,
    running_worker,
)
from tests.support.raw_client import RawClient
from tests.support.topics import create_topic
from tests.support.transactions import consume_all, latest_offset


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with running_broker(tmp_path_factory.mktemp("connect") / "data") as b:
        yield b


def _producer_epoch(bootstrap: str, transactional_id: str) -> int:
    proc = cli.run("transactions", "--bootstrap-server", bootstrap, "--describe", "--transactional-id",
                   transactional_id)
    assert proc.returncode == 0, proc.stderr
    header, row = (line.split() for line in proc.stdout.splitlines()[:2])
    return int(row[header.index("ProducerEpoch")])


def _end_offset(bootstrap: str, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": uuid.uuid4().hex})
    try:
        return int(consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1])
    finally:
        consumer.close()


def test_file_source_to_file_sink_through_kaflet_and_a_worker_restart(
        connect_jars: list[Path], broker: BrokerProcess, tmp_path: Path) -> None:
    group, topic = f"connect-{uuid.uuid4().hex[:6]}", f"lines-{uuid.uuid4().hex[:6]}"
    # The sink's consumer group is named after it, so each test's connectors have names of their own.
    source, sink = f"{topic}-source", f"{topic}-sink"
    source_file, sink_file = tmp_path / "in.txt", tmp_path / "out.txt"
    first = [f"line {i} {uuid.uuid4().hex}" for i in range(2000)]
    source_file.write_text("".join(f"{line}\n" for line in first))
    worker = ConnectWorker(tmp_path / "worker", connect_jars, broker.bootstrap, group, free_port_range(1))
    with running_worker(worker):
        status, info = worker.rest("GET", "/")
        assert status == 200 and info["version"] == "4.3.0"
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        assert info["kafka_cluster_id"] == admin.list_topics(timeout=10).cluster_id
        status, plugins = worker.rest("GET", "/connector-plugins")
        assert {FILE_SOURCE, FILE_SINK} <= {p["class"] for p in plugins}

        worker.put_connector(source, {"connector.class": FILE_SOURCE, "file": str(source_file), "topic": topic})
        worker.put_connector(sink, {"connector.class": FILE_SINK, "file": str(sink_file), "topics": topic})
        worker.wait("every line in the sink's file", lambda: len(file_lines(sink_file)) >= len(first))
        worker.wait("connectors RUNNING", lambda: None not in (worker.task_worker(source), worker.task_worker(sink)))
        # Every line, in order, once.
        assert file_lines(sink_file) == first
        assert _end_offset(broker.bootstrap, topic) == len(first)

        # The worker's topics, created by the worker with CreateTopics: compacted, with Connect's
        # default partition counts.
        described = admin.list_topics(timeout=10).topics
        resources = [ConfigResource("topic", f"{group}-{kind}") for kind in ("configs", "offsets", "status")]
        for resource, future in admin.describe_configs(resources).items():
            assert future.result(10)["cleanup.policy"].value == "compact", resource
        assert {kind: len(described[f"{group}-{kind}"].partitions) for kind in ("configs", "offsets", "status")} \
            == {"configs": 1, "offsets": 25, "status": 5}

        # The source's position (bytes read) committed in the offsets topic, the sink's as the
        # group's committed offset; both read back through kaflet.
        size = source_file.stat().st_size
        worker.wait("committed offsets", lambda: worker.offsets(source) == [
            {"partition": {"filename": str(source_file)}, "offset": {"position": size}}]
            and worker.offsets(sink) == [
            {"partition": {"kafka_topic": topic, "kafka_partition": 0}, "offset": {"kafka_offset": len(first)}}])
        worker.stop()

    more = [f"after restart {i} {uuid.uuid4().hex}" for i in range(500)]
    append_lines(source_file, more)
    with running_worker(worker):
        worker.wait("the appended lines", lambda: len(file_lines(sink_file)) >= len(first) + len(more))
        size = source_file.stat().st_size
        worker.wait("committed offsets", lambda: worker.offsets(source)[0]["offset"] == {"position": size}
                    and worker.offsets(sink)[0]["offset"] == {"kafka_offset": len(first) + len(more)})
        assert None not in (worker.task_worker(source), worker.task_worker(sink))
        # The source took up at its committed position: nothing read twice into the topic, and
        # the sink at its committed offset: nothing written twice.
        assert _end_offset(broker.bootstrap, topic) == len(first) + len(more)
        assert file_lines(sink_file) == first + more
        worker.stop()


def test_exactly_once_source_moves_between_two_workers_and_sink_offsets_are_altered_through_rest(
        connect_jars: list[Path], broker: BrokerProcess, tmp_path: Path) -> None:
    """Two workers with exactly-once source support (KIP-618): the source task writes each poll's
    records and its offsets in one transaction; stopping the worker running it moves it to the
    other, whose producer takes the transactional id over with a higher epoch. Then the sink is
    stopped, its offsets set back through the REST API (KIP-875: Admin's group offset calls on
    kaflet) and resumed."""
    group, topic = f"connect-eos-{uuid.uuid4().hex[:6]}", f"eos-{uuid.uuid4().hex[:6]}"
    source, sink = f"{topic}-source", f"{topic}-sink"
    source_file, sink_file = tmp_path / "in.txt", tmp_path / "out.txt"
    first = [f"line {i} {uuid.uuid4().hex}" for i in range(2000)]
    source_file.write_text("".join(f"{line}\n" for line in first))
    port = free_port_range(2)
    # A worker that left is given a second, not Connect's default of five minutes, to come back
    # before its tasks go to the others.
    extra = {"exactly.once.source.support": "enabled", "scheduled.rebalance.max.delay.ms": "1000"}
    workers = {f"127.0.0.1:{port + i}": ConnectWorker(tmp_path / f"worker{i}", connect_jars, broker.bootstrap,
                                                     group, port + i, extra=extra) for i in range(2)}
    one, two = workers.values()
    with running_worker(one), running_worker(two):
        one.put_connector(source, {"connector.class": FILE_SOURCE, "file": str(source_file), "topic": topic,
                                   "exactly.once.support": "required", "transaction.boundary": "poll"})
        one.put_connector(sink, {"connector.class": FILE_SINK, "file": str(sink_file), "topics": topic,
                                 "consumer.override.isolation.level": "read_committed"})
        one.wait("every line in the sink's file", lambda: len(file_lines(sink_file)) >= len(first))
        assert file_lines(sink_file) == first
        running = one.task_worker(source)
        assert running in workers
        transactional_id = f"{group}-{source}-0"  # Connect's: the group, the connector, the task
        epoch = _producer_epoch(broker.bootstrap, transactional_id)

        workers[running].stop()
        other = next(w for address, w in workers.items() if address != running)
        more = [f"moved {i} {uuid.uuid4().hex}" for i in range(500)]
        append_lines(source_file, more)
        other.wait("the source task on the other worker", lambda: other.task_worker(source) == other.url[7:])
        other.wait("the appended lines", lambda: len(file_lines(sink_file)) >= len(first) + len(more))
        # The task went on from the offsets committed with its last transaction: nothing twice.
        assert file_lines(sink_file) == first + more
        # The task's producer on the other worker took the transactional id over with a higher
        # epoch (InitProducerId), fencing the first worker's producer.
        assert _producer_epoch(broker.bootstrap, transactional_id) > epoch

        # KIP-875: the stopped sink's committed offset set back to the start, then resumed: every
        # line once more.
        status, body = other.rest("PUT", f"/connectors/{sink}/stop")
        assert status == 204, body
        other.wait("the sink STOPPED",
                   lambda: other.rest("GET", f"/connectors/{sink}/status")[1]["connector"]["state"] == "STOPPED")
        status, body = other.rest("PATCH", f"/connectors/{sink}/offsets", {"offsets": [
            {"partition": {"kafka_topic": topic, "kafka_partition": 0}, "offset": {"kafka_offset": 0}}]})
        assert status == 200, body
        assert other.offsets(sink) == [
            {"partition": {"kafka_topic": topic, "kafka_partition": 0}, "offset": {"kafka_offset": 0}}]
        status, body = other.rest("PUT", f"/connectors/{sink}/resume")
        assert status == 202, body
        other.wait("the lines again", lambda: len(file_lines(sink_file)) >= 2 * (len(first) + len(more)))
        assert file_lines(sink_file) == 2 * (first + more)


def test_exactly_once_source_killed_mid_transaction_leaves_no_duplicate(
        connect_jars: list[Path], broker: BrokerProcess, tmp_path: Path) -> None:
    """A worker SIGKILLed while its exactly-once source task has a transaction open with records
    in the log: the restarted task's producer aborts it (InitProducerId with the same
    transactional id) and goes on from the offsets of the last committed transaction, so a
    read_committed consumer sees every line once, in order, and a read_uncommitted one the aborted
    records as well."""
    group, topic = f"connect-kill-{uuid.uuid4().hex[:6]}", f"kill-{uuid.uuid4().hex[:6]}"
    source, source_file = f"{topic}-source", tmp_path / "in.txt"
    lines = [f"line {i} {uuid.uuid4().hex}" for i in range(20000)]
    source_file.write_text("")
    create_topic(broker.bootstrap, topic)  # watched below before the task writes to it
    worker = ConnectWorker(tmp_path / "worker", connect_jars, broker.bootstrap, group, free_port_range(1),
                           extra={"exactly.once.source.support": "enabled"})
    # Transactions of five seconds each: the kill below lands inside one, not between two.
    config = {"connector.class": FILE_SOURCE, "file": str(source_file), "topic": topic,
              "exactly.once.support": "required", "transaction.boundary": "interval",
              "transaction.boundary.interval.ms": "5000"}
    raw = RawClient(broker.bootstrap)
    writer = threading.Thread(target=append_lines, args=(source_file, lines, 100, 0.05))
    try:
        with running_worker(worker):
            worker.put_connector(source, config)
            writer.start()
            # One transaction committed, and the next one's records in the log but not yet stable.
            worker.wait("an open transaction with records after a committed one",
                        lambda: 0 < latest_offset(raw, topic, 1) < latest_offset(raw, topic, 0))
            worker.kill()
        epoch = _producer_epoch(broker.bootstrap, f"{group}-{source}-0")
        writer.join()
        with running_worker(worker):
            committed = consume_all(broker.bootstrap, topic, "read_committed", len(lines), timeout_s=120)
            assert [v.decode() for v in committed] == lines
            assert _producer_epoch(broker.bootstrap, f"{group}-{source}-0") > epoch
            worker.stop()
    finally:
        raw.close()
        if writer.is_alive():
            writer.join()
    # The killed worker's open transaction stays in the log, aborted.
    everything = consume_all(broker.bootstrap, topic, "read_uncommitted", len(lines) + 1)
    assert len(everything) > len(lines)
    assert {v.decode() for v in everything} == set(lines)
