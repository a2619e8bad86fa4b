"""A failed disk in a 3-broker ZooKeeper cluster (RF=3, min.insync.replicas=2) with an
idempotent acks=all producer running throughout.

Broker 1 keeps its logs in two directories, the second on an ext4 image; the kernel turns that
file system read-only under the open segments. The broker takes only that directory offline,
writes ``/log_dir_event_notification``, and the controller moves the leadership of the
partitions there to the other in-sync replicas, while broker 1 keeps serving its other
directory. After the disk is replaced and the broker restarted, its replicas come back empty,
catch up and rejoin the ISR. Every acknowledged record is read back at the end.
"""

from __future__ import annotations

import resource
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from kaflet.protocol.errors import ErrorCode
from tests.support import filesystems
from tests.support.cluster import Cluster
from tests.support.faults import FAST_FAILOVER, AckedProducer, check_delivery, read_partitions
from tests.support.open_files import exhaust_descriptors
from tests.support.raw_client import log_dir_errors

pytestmark = [pytest.mark.skipif(filesystems.mounts_unavailable_reason() is not None,
                                 reason=str(filesystems.mounts_unavailable_reason())),
              pytest.mark.timeout(240)]

# Six partitions, each broker the preferred leader of two; every partition has a replica on
# broker 1, so half of them land on its failing disk (new logs go to the emptier dir).
ASSIGNMENT = [[1, 2, 3], [2, 3, 1], [3, 1, 2], [1, 3, 2], [2, 1, 3], [3, 2, 1]]


@pytest.fixture
def producers() -> Iterator[list[AckedProducer]]:
    made: list[AckedProducer] = []
    yield made
    for p in made:
        p.close()


def test_a_failed_disk_moves_leadership_and_loses_no_acknowledged_record(
        tmp_path: Path, cluster_factory: Callable[..., Cluster], producers: list[AckedProducer]) -> None:
    with filesystems.ext4(tmp_path, 128) as disk:
        healthy = tmp_path / "broker-1-d1"
        cluster = cluster_factory(3, overrides=FAST_FAILOVER,
                                  broker_overrides={1: {"log.dirs": f"{healthy},{disk.point}"}})
        topic = f"disk-{uuid.uuid4().hex[:6]}"
        admin: Any = AdminClient({"bootstrap.servers": cluster.bootstrap})
        admin.create_topics([NewTopic(topic, num_partitions=6, replica_assignment=ASSIGNMENT,
                                      config={"min.insync.replicas": "2"})])[topic].result(40)
        for p, replicas in enumerate(ASSIGNMENT):
            cluster.wait_for_isr(topic, p, replicas, timeout=30)
        on_disk = sorted(p for p in range(6) if (disk.point / f"{topic}-{p}").is_dir())
        assert on_disk and len(on_disk) < 6, on_disk
        producer = AckedProducer(cluster.bootstrap, topic, 6, rate=300).start()
        producers.append(producer)
        producer.wait_acked(600)

        disk.fail()
        failed_at = time.monotonic()
        for p in on_disk:
            cluster.wait_until(lambda p=p: cluster.leader(topic, p) not in (None, -1, 1) and 1 not in cluster.isr(topic, p),
                               60, f"broker 1 out of {topic}-{p}", topics=[topic])
        moved_in = time.monotonic() - failed_at
        print(f"\nfrom the disk failing to every affected partition having another leader: {moved_in:.2f} s")
        # Broker 1 is still up and still serves the partitions in its healthy dir.
        assert cluster.broker(1).alive
        for p in set(range(6)) - set(on_disk):
            assert 1 in cluster.isr(topic, p), (p, cluster.state([topic]))
        assert log_dir_errors(cluster.broker(1).bootstrap) == {
            str(healthy): ErrorCode.NONE, str(disk.point): ErrorCode.KAFKA_STORAGE_ERROR}
        producer.wait_more(600)  # two in-sync replicas left everywhere: every write is taken

        # The disk is replaced; the broker restarts with an empty directory there.
        cluster.stop(1)
        filesystems.replace_disk(disk)
        cluster.start_broker(1)
        for p, replicas in enumerate(ASSIGNMENT):
            cluster.wait_for_isr(topic, p, replicas, timeout=60)
        assert all((disk.point / f"{topic}-{p}").is_dir() for p in on_disk)
        producer.wait_more(300)

        delivered = producer.stop()
        stored = read_partitions(cluster.bootstrap, topic, range(6))
        verdict = check_delivery(delivered, stored, producer.tag)
        print(f"acknowledged {verdict.acked}, lost {len(verdict.missing)}")
        assert verdict.ok, f"{verdict}\nfailures: {producer.failure_summary()}\n{cluster.state([topic])}"
        assert not [e for e in producer.errors if "FATAL" in e.upper()], producer.errors
        log1 = cluster.broker(1).log_path.read_text(errors="replace")
        assert log1.count("is offline:") == 1, log1[-3000:]
        cluster.close()


def test_replicas_refused_for_want_of_descriptors_come_back_without_a_restart(
        cluster_factory: Callable[..., Cluster]) -> None:
    """A broker out of descriptors answers LeaderAndIsr with KAFKA_STORAGE_ERROR, so the
    controller counts its new replicas offline; its dirs stay online, and once descriptors are
    back it asks the controller again (a log dir event): the follower rejoins the ISR and the
    partition it alone holds gets it as leader, with no restart."""
    cluster = cluster_factory(2, overrides=FAST_FAILOVER)
    other = cluster.wait_for_controller()
    victim = 2 if other == 1 else 1
    broker = cluster.broker(victim)
    pid = broker.pid
    assert pid is not None
    name = f"fds-{uuid.uuid4().hex[:6]}"
    shared, alone = f"{name}-shared", f"{name}-alone"
    admin: Any = AdminClient({"bootstrap.servers": cluster.bootstrap})
    assert admin.list_topics(timeout=20).brokers  # connected before the victim has no descriptor left
    hard = exhaust_descriptors(pid)
    try:
        # The answers do not matter here (the lone replica's topic may time out waiting for a
        # leader); what the controller then holds does.
        for f in admin.create_topics([NewTopic(shared, num_partitions=1, replica_assignment=[[other, victim]]),
                                      NewTopic(alone, num_partitions=1, replica_assignment=[[victim]])],
                                     operation_timeout=5).values():
            f.exception(60)
        cluster.wait_until(lambda: "for want of a resource" in broker.log_path.read_text(errors="replace"), 60,
                           "the victim refusing its replicas")
        cluster.wait_until(lambda: cluster.isr(shared, 0) == [other], 30, f"{shared}'s ISR shrunk to the other broker",
                           topics=[shared, alone])
        cluster.wait_until(lambda: cluster.leader(alone, 0) in (None, -1), 30, f"{alone} without a leader",
                           topics=[shared, alone])
    finally:
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (hard, hard))
    cluster.wait_for_isr(shared, 0, [other, victim], timeout=90)
    assert cluster.wait_for_leader(alone, 0, timeout=90) == victim
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True})
    for topic in (shared, alone):
        producer.produce(topic, topic.encode(), partition=0)
    assert producer.flush(30) == 0
    for topic in (shared, alone):
        stored = read_partitions(cluster.bootstrap, topic, [0])
        assert [v for _, v in stored[0]] == [topic.encode()], stored
    out = broker.log_path.read_text(errors="replace")
    assert "is offline" not in out and "Traceback" not in out, out[-3000:]
    assert "asking the controller again" in out, out[-3000:]
    dirs = log_dir_errors(broker.bootstrap)
    assert dirs and set(dirs.values()) == {ErrorCode.NONE}, dirs
