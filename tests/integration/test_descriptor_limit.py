"""A broker near its open file limit, and clients right after a broker starts listening.

The descriptor tests start a real broker process with a low RLIMIT_NOFILE (set in the child
before it execs) and create more partitions than that limit allows: the broker must stay up,
accept connections, serve the partitions it holds and refuse the rest with POLICY_VIOLATION and
a message naming the limit. The start-up tests send a real AdminClient's requests as soon as the
port accepts: its first Metadata must name the controller.
"""

from __future__ import annotations

import os
import resource
import socket
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

import kaflet
from kaflet.protocol import codec
from kaflet.protocol.api_keys import ApiKey
from kaflet.protocol.errors import ErrorCode
from tests.support.broker_process import BrokerProcess, running_broker
from tests.support.raw_client import RawClient
from tests.support.topics import round_trip

pytestmark = pytest.mark.timeout(300)

LIMIT = 600
PER_TOPIC = 100


def _limit_descriptors() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (LIMIT, LIMIT))


def _open_files(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def _create(admin: AdminClient, topic: str, partitions: int) -> str | None:
    """None when created, else the error's string."""
    try:
        admin.create_topics([NewTopic(topic, partitions, 1)], request_timeout=60)[topic].result(90)
        return None
    except KafkaException as exc:
        return str(exc.args[0])


def _metadata(admin: AdminClient, topics: list[str]) -> Any:
    """Metadata of every topic, once it lists ``topics`` (a new client's first answer may be
    the brokers only)."""
    deadline = time.monotonic() + 30
    while True:
        md = admin.list_topics(timeout=30)
        if set(topics) <= set(md.topics) or time.monotonic() > deadline:
            return md
        time.sleep(0.2)


def test_partitions_beyond_the_descriptor_limit_are_refused(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data", preexec_fn=_limit_descriptors)
    broker.start()
    try:
        assert broker.pid is not None
        line = next(x for x in broker.new_log().splitlines() if "open file limit" in x)
        assert f"open file limit {LIMIT}" in line and "partitions" in line, line
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        created: list[str] = []
        refusal = None
        for i in range(20):  # 2,000 partitions: far more than 600 descriptors allow
            topic = f"fd{i}"
            refusal = _create(admin, topic, PER_TOPIC)
            if refusal is not None:
                break
            created.append(topic)
            assert _open_files(broker.pid) <= LIMIT
        assert refusal is not None, "every partition was accepted"
        assert "POLICY_VIOLATION" in refusal and "max.broker.partitions" in refusal, refusal
        assert f"open file limit {LIMIT}" in refusal, refusal
        assert len(created) >= 5  # one descriptor per partition would have allowed under 600
        # Growing a topic beyond the limit is refused the same way.
        futures = admin.create_partitions([NewPartitions(created[0], PER_TOPIC * 3)], request_timeout=30)
        with pytest.raises(KafkaException, match="POLICY_VIOLATION"):
            futures[created[0]].result(60)
        # Still up, still accepting, serving what it holds: the first and the last topic.
        socket.create_connection(("127.0.0.1", broker.port or 0), 5).close()
        md = _metadata(admin, created)
        assert all(
            len(md.topics[t].partitions) == PER_TOPIC for t in created)
        round_trip(broker.bootstrap, created[0], 7)
        round_trip(broker.bootstrap, created[-1], PER_TOPIC - 1)
        assert broker.alive and _open_files(broker.pid) <= LIMIT
        assert "Too many open files" not in broker.new_log()
        # A restart loads every partition it held, within the limit.
        assert broker.stop() == 0
        broker.start(timeout=120)
        round_trip(broker.bootstrap, created[-1], 3)
    finally:
        broker.kill()


@pytest.mark.parametrize("attempt", range(4))
def test_admin_client_as_soon_as_the_port_accepts(tmp_path: Path, attempt: int) -> None:
    """The listener is bound (the kernel accepts) before the broker serves; the first Metadata
    waits in the backlog and must be answered with the controller, not -1 (librdkafka's
    AdminClient then waited minutes for a controller); a topic is created at once."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    broker = BrokerProcess(tmp_path / "data", {"listeners": f"PLAINTEXT://127.0.0.1:{port}"})
    broker.launch()
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), 0.2).close()
                break
            except OSError:
                time.sleep(0.002)
        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}"})
        md = admin.list_topics(timeout=10)
        assert md.controller_id >= 0 and md.controller_id in md.brokers
        creator = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}"})
        start = time.monotonic()
        creator.create_topics([NewTopic("t", 3, 1)], request_timeout=30)["t"].result(60)
        assert time.monotonic() - start < 25  # not waiting for a controller (bound far above normal)
    finally:
        broker.kill()


def test_embedded_broker_names_the_controller_at_once() -> None:
    for _ in range(3):
        with kaflet.embedded() as bootstrap:
            admin = AdminClient({"bootstrap.servers": bootstrap})
            assert admin.list_topics(timeout=10).controller_id >= 0
            admin.create_topics([NewTopic("t", 2, 1)], request_timeout=30)["t"].result(30)


def _create_topics_request(name: str, partitions: int, timeout_ms: int) -> Any:
    C = codec.request_class(ApiKey.CREATE_TOPICS)
    return C(topics=[C.CreatableTopic(name=name, num_partitions=partitions, replication_factor=1, assignments=[],
                                      configs=[])], timeout_ms=timeout_ms, validate_only=False)


def test_create_topics_times_out_when_partitions_get_no_leader(tmp_path: Path) -> None:
    """Three CreateTopics sent back to back, each within the partition limit when it is checked,
    together beyond it: this broker's LeaderAndIsr refuses the last replicas (KAFKA_STORAGE_ERROR),
    so their partitions never get a leader. As Kafka, a request with timeout_ms 0 is answered
    NONE at once without waiting; one with a timeout gets REQUEST_TIMED_OUT when it passes."""
    fill, limit = 400, 404
    with running_broker(tmp_path / "data", {"max.broker.partitions": str(limit)}) as broker:
        client = RawClient(broker.bootstrap, timeout=60)
        try:
            requests = [("a-fill", fill, 0), ("b-zero", 8, 0), ("c-late", 4, 3000)]
            client.send_raw(b"".join(
                client.frame(ApiKey.CREATE_TOPICS, 5, bytes(_create_topics_request(*r).encode(version=5)))
                for r in requests))
            answers = {}
            for _ in requests:
                start = time.monotonic()
                (result,) = client.read_response(ApiKey.CREATE_TOPICS, 5).topics
                answers[result.name] = (result.error_code, result.error_message, time.monotonic() - start)
        finally:
            client.close()
        assert answers["a-fill"][0] == ErrorCode.NONE and answers["b-zero"][0] == ErrorCode.NONE, answers
        code, message, waited = answers["c-late"]
        assert code == ErrorCode.REQUEST_TIMED_OUT, answers
        assert "4 of the 4 partitions of topic c-late had no leader after 3000 ms" in message, message
        assert waited >= 2.5
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        md = _metadata(admin, ["b-zero", "c-late"])
        leaders = {t: sorted(p.leader for p in md.topics[t].partitions.values()) for t in ("b-zero", "c-late")}
        assert leaders == {"b-zero": [-1] * 4 + [broker_id(md)] * 4, "c-late": [-1] * 4}, leaders
        log = broker.new_log()
        assert "refused" in log and f"may host at most {limit}" in log, log[-3000:]
        assert "log directory" not in log  # no "log directory ... is offline": the dir stayed online
        round_trip(broker.bootstrap, "a-fill", fill - 1)
        round_trip(broker.bootstrap, "b-zero", 0)


def broker_id(md: Any) -> int:
    (only,) = md.brokers
    return int(only)
