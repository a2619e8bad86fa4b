"""A Kafka Connect 4.3 distributed worker on a 3-broker kaflet cluster, losing a broker mid-stream.

The worker's topics are replicated three times. In one test the broker SIGKILLed leads the data
topic, in the other it coordinates the source task's transactions; either way every line
arrives once, in order.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from kaflet.coordinator.group.hashing import partition_for
from tests.support.cli import free_port_range
from tests.support.cluster import Cluster
from tests.support.connect import (
    FILE_SINK,
    FILE_SOURCE,
    ConnectWorker,
    append_lines,
    file_lines,
    running_worker,
)
from tests.support.transactions import consume_all

pytestmark = pytest.mark.timeout(300)

OFFSETS_PARTITIONS = 3


def test_worker_on_three_brokers_survives_the_loss_of_the_data_topics_leader(
        connect_jars: list[Path], cluster_factory: Callable[..., Cluster], tmp_path: Path) -> None:
    cluster = cluster_factory(3, overrides={"offsets.topic.num.partitions": str(OFFSETS_PARTITIONS),
                                            "min.insync.replicas": "2"})
    cluster.wait_for_registered([1, 2, 3])
    group, topic = f"connect-{uuid.uuid4().hex[:6]}", f"lines-{uuid.uuid4().hex[:6]}"
    source, sink = f"{topic}-source", f"{topic}-sink"
    source_file, sink_file = tmp_path / "in.txt", tmp_path / "out.txt"
    first = [f"line {i} {uuid.uuid4().hex}" for i in range(2000)]
    source_file.write_text("".join(f"{line}\n" for line in first))
    worker = ConnectWorker(tmp_path / "worker", connect_jars, cluster.bootstrap, group, free_port_range(1),
                           replication=3)
    with running_worker(worker):
        # The worker joined its group, so __consumer_offsets exists. The broker to lose leads the
        # data topic and coordinates neither group: losing a coordinator may legitimately
        # redeliver to the sink (at least once), which is not what this test is about.
        coordinators = {cluster.wait_for_leader("__consumer_offsets", partition_for(g, OFFSETS_PARTITIONS))
                        for g in (group, f"connect-{sink}")}
        victim = min({1, 2, 3} - coordinators)
        replicas = [victim, *sorted({1, 2, 3} - {victim})]
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        admin.create_topics([NewTopic(topic, num_partitions=1, replica_assignment=[replicas])])[topic].result(60)
        cluster.wait_for_isr(topic, 0, [1, 2, 3], timeout=60)
        for kind, partitions in (("configs", 1), ("offsets", 25), ("status", 5)):
            for p in range(partitions):
                assert sorted(cluster.isr(f"{group}-{kind}", p)) == [1, 2, 3], (kind, p)

        worker.put_connector(source, {"connector.class": FILE_SOURCE, "file": str(source_file), "topic": topic})
        worker.put_connector(sink, {"connector.class": FILE_SINK, "file": str(sink_file), "topics": topic})
        worker.wait("every line in the sink's file", lambda: len(file_lines(sink_file)) >= len(first))
        assert file_lines(sink_file) == first

        # More lines go into the file while the data topic's leader is killed.
        more = [f"during the failover {i} {uuid.uuid4().hex}" for i in range(3000)]
        writer = threading.Thread(target=append_lines, args=(source_file, more, 100, 0.1))
        writer.start()
        try:
            worker.wait("the copying under way", lambda: len(file_lines(sink_file)) >= len(first) + 300)
            cluster.kill(victim)
        finally:
            writer.join()
        new_leader = cluster.wait_for_leader(topic, 0, timeout=60, exclude=[victim])
        assert new_leader != victim
        worker.wait("every line after the failover", lambda: len(file_lines(sink_file)) >= len(first) + len(more),
                    timeout=180)
        # Nothing lost, nothing twice: a produce the dead leader took but did not answer was sent
        # again to the new leader, which knew the producer's sequence numbers.
        assert file_lines(sink_file) == first + more
        assert worker.task_worker(source) and worker.task_worker(sink)

        cluster.start_broker(victim)
        cluster.wait_for_isr(topic, 0, [1, 2, 3], timeout=60)
        worker.stop()


def test_exactly_once_source_survives_the_loss_of_its_transaction_coordinator(
        connect_jars: list[Path], cluster_factory: Callable[..., Cluster], tmp_path: Path) -> None:
    """An exactly-once source task (KIP-618) whose transaction coordinator is SIGKILLed while it
    commits a transaction per poll: its producer finds the new coordinator (which loaded the
    transactions' state from the replicated __transaction_state) and goes on, and read_committed
    readers see every line once, in order. The data topic is created by the worker (KIP-158)
    with the replication factor the connector asks for."""
    cluster = cluster_factory(3, overrides={"offsets.topic.num.partitions": str(OFFSETS_PARTITIONS),
                                            "transaction.state.log.num.partitions": str(OFFSETS_PARTITIONS),
                                            "min.insync.replicas": "2"})
    cluster.wait_for_registered([1, 2, 3])
    group, topic = f"connect-eos-{uuid.uuid4().hex[:6]}", f"eos-{uuid.uuid4().hex[:6]}"
    source, source_file = f"{topic}-source", tmp_path / "in.txt"
    lines = [f"line {i} {uuid.uuid4().hex}" for i in range(20000)]
    source_file.write_text("")
    worker = ConnectWorker(tmp_path / "worker", connect_jars, cluster.bootstrap, group, free_port_range(1),
                           replication=3, extra={"exactly.once.source.support": "enabled"})
    with running_worker(worker):
        worker.put_connector(source, {"connector.class": FILE_SOURCE, "file": str(source_file), "topic": topic,
                                      "exactly.once.support": "required",
                                      "topic.creation.default.replication.factor": "3",
                                      "topic.creation.default.partitions": "1"})
        worker.wait("the source task RUNNING", lambda: worker.task_worker(source) is not None)
        writer = threading.Thread(target=append_lines, args=(source_file, lines, 100, 0.05))
        writer.start()
        try:
            # A transaction committed: its offsets are readable in the worker's offsets topic.
            worker.wait("a committed transaction", lambda: worker.offsets(source) != [])
            state_partition = partition_for(f"{group}-{source}-0", OFFSETS_PARTITIONS)
            coordinator = cluster.wait_for_leader("__transaction_state", state_partition)
            cluster.kill(coordinator)
        finally:
            writer.join()
        cluster.wait_for_leader("__transaction_state", state_partition, timeout=60, exclude=[coordinator])
        assert sorted(cluster.assignment(topic)[0]) == [1, 2, 3]
        committed = consume_all(cluster.bootstrap, topic, "read_committed", len(lines), timeout_s=180)
        assert [v.decode() for v in committed] == lines
        assert worker.task_worker(source) is not None
        worker.stop()
