"""The Java client 4.3 (the reference client, and the strictest) against a real kaflet broker.

Small programs of ours (tests/java) drive Admin, an idempotent producer with every codec,
consumers of a classic group and of a KIP-848 consumer group; one JVM per program run. They print what the broker answered and
the assertions are here (Admin's in tests/support/java.py, shared with the cluster test).
"""

from __future__ import annotations

import hashlib
import socket
import uuid
from collections.abc import Iterator

import pytest

from kaflet.protocol import codec
from kaflet.protocol.api_keys import ApiKey
from tests.support.broker_process import BrokerProcess, running_broker
from tests.support.java import JavaPrograms, check_admin
from tests.support.metrics import scrape
from tests.support.raw_client import RawClient

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")


@pytest.fixture(scope="module")
def metrics_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory, metrics_port: int) -> Iterator[BrokerProcess]:
    with running_broker(tmp_path_factory.mktemp("java") / "data", {
            "offsets.topic.num.partitions": "3", "metrics.listener": f"http://127.0.0.1:{metrics_port}",
            # KIP-848 members heartbeat every second, so each of their rebalances takes about that.
            "group.consumer.heartbeat.interval.ms": "1000", "group.consumer.min.heartbeat.interval.ms": "1000"}) as b:
        yield b


def _requests(port: int, request: str) -> float:
    return sum(v for (name, labels), v in scrape(port).items()
               if name == "kafka_network_requestmetrics_requests_total" and ("request", request) in labels)


def test_admin_topics_by_name_and_id_configs_offsets_cluster(java: JavaPrograms, broker: BrokerProcess,
                                                            metrics_port: int) -> None:
    c = RawClient(broker.bootstrap)
    try:
        node = c.request(ApiKey.METADATA, 4, codec.request_class(ApiKey.METADATA)(
            topics=[], allow_auto_topic_creation=False)).brokers[0].node_id
    finally:
        c.close()
    before = _requests(metrics_port, "DescribeTopicPartitions")
    check_admin(java, broker.bootstrap, [node], 1)
    # The client described by name with DescribeTopicPartitions, two partitions a page: the
    # 3-partition topic took two requests at least (it falls back to Metadata only where the
    # API is not advertised).
    assert _requests(metrics_port, "DescribeTopicPartitions") - before >= 2


@pytest.mark.parametrize("assignor", ["range", "cooperative-sticky"])
def test_idempotent_producer_every_codec_and_a_classic_group(java: JavaPrograms, broker: BrokerProcess,
                                                             assignor: str) -> None:
    prefix, count = f"java-{assignor}-{uuid.uuid4().hex[:6]}", 300
    lines = java.run("ProduceConsume", broker.bootstrap, prefix, assignor, str(count))
    produced = {w[1]: int(w[2]) for w in lines if w[0] == "produced"}
    assert produced == {f"{prefix}-{c}": count for c in CODECS}
    for c in CODECS:
        [consumed] = [w[2:] for w in lines if w[:2] == ["consumed", f"{prefix}-{c}"]]
        values = "\n".join(sorted(f"{c}-{i}" for i in range(count)))
        # Every record once (no duplicate either), with the value the producer sent.
        assert consumed == [str(count), "distinct", str(count), "sha256", hashlib.sha256(values.encode()).hexdigest()]
    owned = {int(w[1]): set(w[2].split(",")) if len(w) > 2 else set() for w in lines if w[0] == "owned"}
    everything = {f"{prefix}-{c}-{p}" for c in CODECS for p in range(3)}
    assert owned[0] | owned[1] == everything and not owned[0] & owned[1]
    if assignor == "range":
        # Range: per topic, the first member (by member id) takes partitions 0 and 1, the other 2.
        assert owned == {0: {f"{prefix}-{c}-{p}" for c in CODECS for p in (0, 1)},
                         1: {f"{prefix}-{c}-2" for c in CODECS}}
    else:
        assert sorted(len(o) for o in owned.values()) == [7, 8]



@pytest.mark.parametrize("members", [1, 2, 3])
def test_consumer_protocol_members_join_while_a_producer_runs(java: JavaPrograms, broker: BrokerProcess,
                                                              members: int) -> None:
    topic, count = f"java-kip848-{members}-{uuid.uuid4().hex[:6]}", 3000
    lines = java.run("ConsumerProtocol", broker.bootstrap, topic, str(members), str(count), timeout=150)
    by_key = {w[0]: w[1:] for w in lines}
    assert by_key["produced"] == [str(count)]
    # Every record once: commits after every poll, and a partition moves only once released.
    assert by_key["consumed"] == [str(count), "duplicates", "0"]
    assert by_key["violations"][0] == "0", by_key["violations"]
    assert by_key["described"] == ["Consumer", "Stable", str(members)]
    owned = [set(w[2].split(",")) if len(w) > 2 else set() for w in lines if w[0] == "owned"]
    assert sorted(p for o in owned for p in o) == [str(p) for p in range(6)]
    assert max(map(len, owned)) - min(map(len, owned)) <= 1
