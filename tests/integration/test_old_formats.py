"""Produce v0-2 and Fetch v0-3 (message formats v0/v1) with real old-protocol clients.

kcat pinned to Kafka 0.9.0 / 0.10.0 (`api.version.request=false`), kafka-python pinned to
api_version (0, 9) and (0, 10, 1), mixed with confluent-kafka writing v2 batches; and raw
requests with bad message sets, which must get Kafka's error codes while the broker stays up.
"""

from __future__ import annotations

import functools
import re
import shutil
import struct
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka import admin as ck_admin
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KafkaTopicPartition
from kafka.errors import TopicAuthorizationFailedError

from kaflet.embedded_broker import embedded_broker
from kaflet.protocol.errors import ErrorCode
from kaflet.protocol.legacy_records import (
    LegacyRecord,
    decode_message_set,
    encode_message_set,
    encode_wrapper,
)
from kaflet.protocol.records import Record, build_batch, parse_batch_header
from tests.support.broker_process import BrokerProcess
from tests.support.metrics import scrape
from tests.support.quotas import alter
from tests.support.raw_client import RawClient
from tests.support.topics import create_topic

# librdkafka (kcat) drops to the pre-ApiVersions protocol only for a fallback below 0.10.0: from
# 0.10.0 on it sends ApiVersions whatever api.version.request says, and then uses v2 batches.
# So kcat is the magic 0 client (Produce v1, Fetch v1); kafka-python pinned to 0.10 the magic 1 one.
OLD_KCAT = ("-X", "api.version.request=false", "-X", "broker.version.fallback=0.9.0", "-d", "protocol")


@pytest.fixture(scope="module")
def kcat() -> str:
    path = shutil.which("kcat")
    if path is None:
        pytest.fail("kcat is not installed (apt-get install kcat)")
    return path


def _topic(bootstrap: str, prefix: str, config: dict[str, str] | None = None) -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, name, 1, config)
    return name


def _kcat(kcat: str, bootstrap: str, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """kcat as a Kafka 0.9 client; checks (in its protocol debug log) that it spoke v1 only."""
    out = subprocess.run([kcat, "-b", bootstrap, *OLD_KCAT, *args], input=stdin, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "Sent ApiVersionRequest" not in out.stderr
    sent = re.findall(r"Sent (Produce|Fetch)Request \(v(\d+)", out.stderr)
    assert sent and {v for _, v in sent} == {"1"}, sent[:5]
    return out


def _kcat_consume(kcat: str, bootstrap: str, topic: str) -> list[str]:
    out = _kcat(kcat, bootstrap, "-C", "-t", topic, "-o", "beginning", "-e", "-f", "%o|%k|%s|%T\n")
    return out.stdout.splitlines()


def _confluent_consume(bootstrap: str, topic: str, expect: int) -> list[tuple[int, bytes | None, bytes | None, int]]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, 0)])
    out = []
    deadline = time.monotonic() + 30
    try:
        while len(out) < expect and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            assert m.error() is None, m.error()
            out.append((m.offset(), m.key(), m.value(), m.timestamp()[1]))
    finally:
        c.close()
    return out


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4"])
def test_kcat_magic_0_round_trip(kaflet_broker: BrokerProcess, kcat: str, codec: str) -> None:
    """kcat as a 0.9 client produces magic 0 message sets and consumes them back; a v2 consumer
    (confluent-kafka) reads the same records, without timestamps."""
    bootstrap = kaflet_broker.bootstrap
    topic = _topic(bootstrap, "oldkcat")
    lines = "".join(f"key{i}:value{i}\n" for i in range(200))
    _kcat(kcat, bootstrap, "-P", "-t", topic, "-K:", "-z", codec, stdin=lines)
    got = _kcat_consume(kcat, bootstrap, topic)
    # v0 carries no timestamp: stored as -1 (NO_TIMESTAMP), which kcat shows as 0.
    assert got == [f"{i}|key{i}|value{i}|0" for i in range(200)]
    modern = _confluent_consume(bootstrap, topic, 200)
    assert modern == [(i, b"key%d" % i, b"value%d" % i, -1) for i in range(200)]


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4"])
def test_v2_batches_down_converted_for_kcat(kaflet_broker: BrokerProcess, kcat: str, codec: str) -> None:
    """Batches a modern producer wrote (compressed, with headers) reach a 0.9 consumer as magic 0
    message sets with the same offsets."""
    bootstrap = kaflet_broker.bootstrap
    topic = _topic(bootstrap, "downconv")
    _modern_produce(bootstrap, topic, codec, 300)
    assert _kcat_consume(kcat, bootstrap, topic) == [f"{i}|k{i}|v{i}|0" for i in range(300)]


def _modern_produce(bootstrap: str, topic: str, codec: str, n: int) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "compression.type": codec, "linger.ms": 50})
    for i in range(n):
        p.produce(topic, key=b"k%d" % i, value=b"v%d" % i, timestamp=1_700_000_000_000 + i, headers=[("h", b"x")])
    assert p.flush(30) == 0


# kafka-python needs the xxhash package for magic 0 lz4 (kcat covers that one).
@pytest.mark.parametrize(("api_version", "codec"), [
    (v, c) for v in [(0, 9), (0, 10, 0), (0, 10, 1)] for c in ["none", "gzip", "snappy", "lz4"] if (v, c) != ((0, 9), "lz4")])
def test_v2_batches_down_converted_for_kafka_python(kaflet_broker: BrokerProcess, codec: str,
                                                    api_version: tuple[int, ...]) -> None:
    """The same for kafka-python pinned to 0.9 (Fetch v1, magic 0), 0.10.0 (Fetch v2) and
    0.10.1 (Fetch v3): magic 1 keeps the producer's timestamps."""
    bootstrap = kaflet_broker.bootstrap
    topic = _topic(bootstrap, "downkp")
    _modern_produce(bootstrap, topic, codec, 300)
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, api_version=api_version, consumer_timeout_ms=10000,
                             auto_offset_reset="earliest", enable_auto_commit=False)
    try:
        consumer.assign([KafkaTopicPartition(topic, 0)])
        got = []
        for m in consumer:
            got.append((m.offset, m.key, m.value, m.timestamp))
            if len(got) == 300:
                break
    finally:
        consumer.close()
    ts = (lambda i: 1_700_000_000_000 + i) if api_version >= (0, 10) else (lambda i: None)
    assert got == [(i, b"k%d" % i, b"v%d" % i, ts(i)) for i in range(300)]


def test_transactions_control_batches_left_out(kaflet_broker: BrokerProcess, kcat: str) -> None:
    """Old consumers see no transaction markers: their offsets are skipped, as Kafka does.
    (Nor do they see the end of the partition while a marker is last: their position stays
    below the high watermark, as with Kafka, so the consumer here stops at a message count.)"""
    bootstrap = kaflet_broker.bootstrap
    topic = _topic(bootstrap, "oldtxn")
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"t-{topic}"})
    p.init_transactions(30)
    for i in range(2):
        p.begin_transaction()
        p.produce(topic, value=b"in-txn-%d" % i)
        p.commit_transaction(30)
    plain = Producer({"bootstrap.servers": bootstrap})
    plain.produce(topic, value=b"after")
    assert plain.flush(30) == 0
    got = _kcat(kcat, bootstrap, "-C", "-t", topic, "-o", "beginning", "-c", "3", "-f", "%o|%s\n").stdout
    assert got.splitlines() == ["0|in-txn-0", "2|in-txn-1", "4|after"]


def test_zstd_cannot_be_down_converted(kaflet_broker: BrokerProcess) -> None:
    bootstrap = kaflet_broker.bootstrap
    topic = _topic(bootstrap, "oldzstd")
    p = Producer({"bootstrap.servers": bootstrap, "compression.type": "zstd"})
    p.produce(topic, value=b"z" * 100)
    assert p.flush(30) == 0
    c = RawClient(bootstrap)
    try:
        parts = _raw_fetch(c, 2, topic, 0)
        assert parts[0][1] == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
        assert parts[0][3] == b""
        # A compression.type=zstd topic is refused to old consumers outright (Kafka: Fetch < v10),
        # though an old producer may write to it (stored zstd).
        zstd_topic = _topic(bootstrap, "oldzstdtopic", {"compression.type": "zstd"})
        assert _raw_produce(c, 1, zstd_topic, _good(0))[0][1] == 0
        assert _raw_fetch(c, 0, zstd_topic, 0)[0][:3] == (0, ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, -1)
    finally:
        c.close()


def test_downconversion_disabled_answers_unsupported_version(kaflet_broker: BrokerProcess) -> None:
    bootstrap = kaflet_broker.bootstrap
    topic = _topic(bootstrap, "nodown", {"message.downconversion.enable": "false"})
    p = Producer({"bootstrap.servers": bootstrap})
    p.produce(topic, value=b"v2 only")
    assert p.flush(30) == 0
    c = RawClient(bootstrap)
    try:
        for version in (0, 3):
            assert _raw_fetch(c, version, topic, 0)[0][:3] == (0, ErrorCode.UNSUPPORTED_VERSION, -1)
    finally:
        c.close()
    # v4+ reads the batches as stored, down-conversion or not.
    assert [v for _, _, v, _ in _confluent_consume(bootstrap, topic, 1)] == [b"v2 only"]


def test_log_append_time_topic(kaflet_broker: BrokerProcess, kcat: str) -> None:
    """On a LogAppendTime topic a v1 producer's timestamps are replaced by the broker's."""
    bootstrap = kaflet_broker.bootstrap
    topic = _topic(bootstrap, "oldlat", {"message.timestamp.type": "LogAppendTime"})
    c = RawClient(bootstrap)
    try:
        before = int(time.time() * 1000)
        ms = encode_message_set([LegacyRecord(0, 5, b"k", b"v"), LegacyRecord(1, 6, None, b"w")], 1, 1)
        (index, error, base, append_time), = _raw_produce(c, 2, topic, ms)
        assert (index, error, base) == (0, 0, 0) and append_time >= before
        parts = _raw_fetch(c, 2, topic, 0)
        got = decode_message_set(parts[0][3], 1 << 20)
        assert [(r.offset, r.timestamp, r.key, r.value) for r in got.records] == [
            (0, append_time, b"k", b"v"), (1, append_time, None, b"w")]
    finally:
        c.close()


@pytest.mark.parametrize("api_version", [(0, 9), (0, 10, 1)])
def test_kafka_python_old_api_versions(kaflet_broker: BrokerProcess, api_version: tuple[int, ...]) -> None:
    """kafka-python pinned to 0.9 / 0.10.1: Produce v1/v2 and a group consumer (JoinGroup v0,
    OffsetCommit v2, Fetch v1/v3); the committed offsets survive into a second consumer."""
    bootstrap = kaflet_broker.bootstrap
    topic = _topic(bootstrap, "oldkp")
    group = f"g-{topic}"
    producer = KafkaProducer(bootstrap_servers=bootstrap, api_version=api_version, compression_type="gzip")
    for i in range(50):
        producer.send(topic, key=b"k%d" % i, value=b"v%d" % i)
    producer.flush(30)
    producer.close()

    def consume(n: int) -> list[tuple[int, bytes, bytes, int]]:
        consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, api_version=api_version, group_id=group,
                                 auto_offset_reset="earliest", enable_auto_commit=False,
                                 consumer_timeout_ms=15000)
        out = []
        try:
            for m in consumer:
                out.append((m.offset, m.key, m.value, m.timestamp))
                if len(out) == n:
                    break
            consumer.commit()
        finally:
            consumer.close()
        return out

    first = consume(20)
    assert [(o, k, v) for o, k, v, _ in first] == [(i, b"k%d" % i, b"v%d" % i) for i in range(20)]
    if api_version >= (0, 10):
        assert all(t > 1_600_000_000_000 for *_, t in first)
    second = consume(30)
    assert [o for o, *_ in second] == list(range(20, 50))
    # And the same records through a modern client.
    assert [(o, k, v) for o, k, v, _ in _confluent_consume(bootstrap, topic, 50)] == [
        (i, b"k%d" % i, b"v%d" % i) for i in range(50)]


# ---- raw requests: bad input --------------------------------------------------------------


def _raw_produce(c: RawClient, version: int, topic: str, records: bytes, acks: int = 1) -> list[tuple[int, ...]]:
    """Produce v0-2 of one partition's message set; its (index, error, base offset[, append time])."""
    t = topic.encode()
    body = struct.pack(">hii", acks, 10000, 1) + struct.pack(">h", len(t)) + t + struct.pack(">ii", 1, 0)
    body += struct.pack(">i", len(records)) + records
    c.send_raw(c.frame(0, version, body))
    data = c.read_frame()[4:]  # correlation id
    pos = 4 + 2 + len(t) + 4  # topics array, name, partitions array (one each)
    part = struct.unpack_from(">ihqq" if version >= 2 else ">ihq", data, pos)
    return [part]


def _raw_fetch(c: RawClient, version: int, topic: str, offset: int) -> list[tuple[int, int, int, bytes]]:
    """Fetch v0-3 of partition 0: [(index, error, high watermark, records)]."""
    t = topic.encode()
    body = struct.pack(">iii", -1, 100, 1) + (struct.pack(">i", 1 << 20) if version >= 3 else b"")
    body += struct.pack(">ih", 1, len(t)) + t + struct.pack(">iiqi", 1, 0, offset, 1 << 20)
    c.send_raw(c.frame(1, version, body))
    data = c.read_frame()[4:]
    pos = 4 if version >= 1 else 0
    pos += 4 + 2 + len(t) + 4
    index, error, hw, size = struct.unpack_from(">ihqi", data, pos)
    pos += 18
    return [(index, error, hw, data[pos:pos + size])]


def _good(magic: int) -> bytes:
    return encode_message_set([LegacyRecord(0, 1000, b"k", b"v"), LegacyRecord(1, 1001, b"k2", b"v2")], magic)


def _bad_inputs() -> list[tuple[str, bytes, int]]:
    good = bytearray(_good(1))
    corrupt = bytearray(good)
    corrupt[-1] ^= 0xFF  # last value byte: the CRC no longer matches
    bad_magic = bytearray(good)
    bad_magic[16] = 7
    mixed = _good(0) + _good(1)
    inner_corrupt = bytearray(encode_message_set([LegacyRecord(0, 1, b"a", b"b" * 50)], 1, 0))
    inner_corrupt[-1] ^= 1
    nested = encode_wrapper(bytes(inner_corrupt), 0, 1, 1, 1)  # gzip, its inner message corrupt
    two_wrappers = encode_message_set([LegacyRecord(0, 1, None, b"x")], 1, 1) * 2
    return [
        ("corrupt crc", bytes(corrupt), ErrorCode.CORRUPT_MESSAGE),
        ("truncated", bytes(good[:-5]), ErrorCode.CORRUPT_MESSAGE),
        ("invalid magic", bytes(bad_magic), ErrorCode.CORRUPT_MESSAGE),
        ("mixed magics", mixed, ErrorCode.INVALID_RECORD),
        ("corrupt inner message", bytes(nested), ErrorCode.CORRUPT_MESSAGE),
        ("two compressed wrappers", two_wrappers, ErrorCode.INVALID_RECORD),
        ("size below overhead", struct.pack(">qi", 0, 3) + b"\x00" * 20, ErrorCode.CORRUPT_MESSAGE),
    ]


@pytest.mark.parametrize("version", [0, 1, 2])
def test_bad_message_sets_get_kafkas_errors(kaflet_broker: BrokerProcess, version: int) -> None:
    bootstrap = kaflet_broker.bootstrap
    topic = _topic(bootstrap, "oldbad")
    c = RawClient(bootstrap)
    try:
        for what, records, error in _bad_inputs():
            part = _raw_produce(c, version, topic, records)[0]
            assert part[1] == error, what
        # Nothing bad was appended; the broker still serves the connection and good data.
        part = _raw_produce(c, version, topic, _good(0 if version < 2 else 1))[0]
        assert part[1] == 0
        fetched = _raw_fetch(c, version + 1, topic, 0)[0]
        assert fetched[2] == part[2] + 2
    finally:
        c.close()
    # acks=0 gets no answer: the broker closes the connection so the producer learns of it.
    c = RawClient(bootstrap)
    try:
        t = topic.encode()
        bad = _bad_inputs()[0][1]
        body = struct.pack(">hii", 0, 10000, 1) + struct.pack(">h", len(t)) + t + struct.pack(">ii", 1, 0)
        c.send_raw(c.frame(0, version, body + struct.pack(">i", len(bad)) + bad))
        assert c.is_closed_by_peer()
    finally:
        c.close()


def test_magic_2_batches_accepted_in_produce_v2(kaflet_broker: BrokerProcess) -> None:
    """Kafka never checked the magic of a Produce v0-2 record set: v2 batches are appended."""
    bootstrap = kaflet_broker.bootstrap
    topic = _topic(bootstrap, "oldv2in")
    c = RawClient(bootstrap)
    try:
        batch = build_batch([Record(0, 0, b"k", b"v"), Record(1, 0, None, b"w")], base_timestamp=1234)
        assert _raw_produce(c, 2, topic, batch * 2)[0][:3] == (0, 0, 0)
        got = decode_message_set(_raw_fetch(c, 3, topic, 0)[0][3], 1 << 20)
        assert [(r.offset, r.timestamp, r.value) for r in got.records] == [
            (0, 1234, b"v"), (1, 1234, b"w"), (2, 1234, b"v"), (3, 1234, b"w")]
    finally:
        c.close()


# ---- the same authorisation, quotas and metrics as v3+/v4+ -------------------------------

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
        'password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";')


def test_acls_and_conversion_metrics_for_old_clients(tmp_path: Path) -> None:
    """A 0.10.1 client (SaslHandshake v0, Produce v2, Fetch v3) is refused without ACLs and
    served with them; its records count in the conversion meters."""
    config = {"log.dirs": str(tmp_path / "data"), "listeners": "SASL_PLAINTEXT://127.0.0.1:0",
              "sasl.enabled.mechanisms": "PLAIN", "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
              "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer", "super.users": "User:admin",
              "metrics.listener": "http://127.0.0.1:0", "offsets.topic.num.partitions": "1",
              "group.initial.rebalance.delay.ms": "0"}
    with embedded_broker(config) as (b, _):
        def sasl(user: str, password: str) -> dict[str, Any]:
            return {"bootstrap.servers": b.bootstrap, "security.protocol": "SASL_PLAINTEXT",
                    "sasl.mechanism": "PLAIN", "sasl.username": user, "sasl.password": password}

        admin = ck_admin.AdminClient(sasl("admin", "admin-secret"))
        topic = f"oldacl-{uuid.uuid4().hex[:6]}"
        admin.create_topics([ck_admin.NewTopic(topic, 1, 1)])[topic].result(30)

        def allow(admin: ck_admin.AdminClient, *ops: ck_admin.AclOperation) -> None:
            acls = [ck_admin.AclBinding(ck_admin.ResourceType.TOPIC, topic, ck_admin.ResourcePatternType.LITERAL,
                                        "User:alice", "*", op, ck_admin.AclPermissionType.ALLOW) for op in ops]
            for fut in admin.create_acls(acls).values():
                fut.result(30)

        allow(admin, ck_admin.AclOperation.DESCRIBE)  # Metadata answers, so the refusals below are Produce's and Fetch's
        old = {"bootstrap_servers": b.bootstrap, "api_version": (0, 10, 1), "security_protocol": "SASL_PLAINTEXT",
               "sasl_mechanism": "PLAIN", "sasl_plain_username": "alice", "sasl_plain_password": "alice-secret"}
        producer = KafkaProducer(**old, retries=0, max_block_ms=10000)
        try:
            with pytest.raises(TopicAuthorizationFailedError):
                producer.send(topic, b"refused").get(30)
        finally:
            producer.close()
        consumer = KafkaConsumer(**old, consumer_timeout_ms=3000)
        try:
            consumer.assign([KafkaTopicPartition(topic, 0)])
            with pytest.raises(TopicAuthorizationFailedError):
                consumer.poll(5000)
                consumer.poll(5000)
        finally:
            consumer.close()

        allow(admin, ck_admin.AclOperation.WRITE, ck_admin.AclOperation.READ)
        producer = KafkaProducer(**old, compression_type="gzip")
        for i in range(10):
            producer.send(topic, b"v%d" % i)
        producer.flush(30)
        producer.close()
        consumer = KafkaConsumer(**old, consumer_timeout_ms=10000, auto_offset_reset="earliest")
        try:
            consumer.assign([KafkaTopicPartition(topic, 0)])
            got = [m.value for m in consumer]
        finally:
            consumer.close()
        assert got == [b"v%d" % i for i in range(10)]
        s = scrape(b)
        assert s[("kafka_server_brokertopicmetrics_producemessageconversions_total",
                  frozenset({("topic", topic)}))] == 10
        assert s[("kafka_server_brokertopicmetrics_fetchmessageconversions_total",
                  frozenset({("topic", topic)}))] >= 10
        requests = {(dict(labels)["request"], dict(labels)["version"]) for (name, labels), v in s.items()
                    if name == "kafka_network_requestmetrics_requests_total" and v > 0}
        assert {("Produce", "2"), ("FetchConsumer", "3")} <= requests
        assert not {r for r in requests if r[0] in ("Produce", "FetchConsumer") and int(r[1]) > 3}
        del admin  # before the broker goes, so it does not retry against a dead port


def test_old_versions_are_throttled_by_quotas(kaflet_broker: BrokerProcess) -> None:
    """Produce v1 and Fetch v1 carry throttle_time_ms: over the client's quota they are
    throttled like v3+/v4+ (and v0, which has no such field, by the muted connection)."""
    bootstrap = kaflet_broker.bootstrap
    topic = _topic(bootstrap, "oldquota")
    client_id = f"old-{topic}"
    assert alter(bootstrap, [("client-id", client_id)],
                 {"producer_byte_rate": 2000.0, "consumer_byte_rate": 2000.0}).error_code == 0
    c = RawClient(bootstrap)
    c.frame = functools.partial(RawClient.frame, c, client_id=client_id)  # type: ignore[method-assign]
    try:
        big = encode_message_set([LegacyRecord(i, -1, None, b"x" * 1000) for i in range(20)], 0)
        deadline = time.monotonic() + 30
        throttle = 0
        while not throttle and time.monotonic() < deadline:
            throttle = _raw_produce_throttle(c, 1, topic, big)
        assert throttle > 0
        time.sleep(throttle / 1000)
        deadline = time.monotonic() + 30
        throttle = 0
        while not throttle and time.monotonic() < deadline:
            t = topic.encode()
            body = struct.pack(">iiii", -1, 0, 1, 1) + struct.pack(">h", len(t)) + t + \
                struct.pack(">iiqi", 1, 0, 0, 1 << 20)
            c.send_raw(c.frame(1, 1, body))
            throttle = struct.unpack_from(">i", c.read_frame(), 4)[0]
        assert throttle > 0
    finally:
        c.close()


def _raw_produce_throttle(c: RawClient, version: int, topic: str, records: bytes) -> int:
    t = topic.encode()
    body = struct.pack(">hii", 1, 10000, 1) + struct.pack(">h", len(t)) + t + struct.pack(">ii", 1, 0)
    body += struct.pack(">i", len(records)) + records
    c.send_raw(c.frame(0, version, body))
    data = c.read_frame()[4:]
    pos = 4 + 2 + len(t) + 4
    index, error, _ = struct.unpack_from(">ihq", data, pos)
    assert error == 0
    return int(struct.unpack_from(">i", data, pos + 14)[0])


def test_topic_compression_type_applies_to_up_converted_sets(kaflet_broker: BrokerProcess) -> None:
    """compression.type=gzip: an uncompressed v0 message set is stored as a gzip v2 batch (as
    Kafka's LogValidator recompresses), and a Fetch v1 gets it back as one gzip wrapper."""
    bootstrap = kaflet_broker.bootstrap
    topic = _topic(bootstrap, "oldgzip", {"compression.type": "gzip"})
    c = RawClient(bootstrap)
    try:
        ms = encode_message_set([LegacyRecord(i, -1, b"k%d" % i, b"v" * 200) for i in range(5)], 0)
        assert _raw_produce(c, 0, topic, ms)[0][:3] == (0, 0, 0)
        t = topic.encode()
        body = struct.pack(">iiiib", -1, 100, 1, 1 << 20, 0) + struct.pack(">ih", 1, len(t)) + t + \
            struct.pack(">iiqi", 1, 0, 0, 1 << 20)
        c.send_raw(c.frame(1, 4, body))
        data = c.read_frame()[4:]
        pos = 4 + 4 + 2 + len(t) + 4 + 4 + 2 + 8 + 8 + 4  # ... partition, error, hw, lso, no aborted
        size, = struct.unpack_from(">i", data, pos)
        stored = parse_batch_header(data[pos + 4:pos + 4 + size])
        assert (stored.compression, stored.records_count) == (1, 5)
        wrapper = _raw_fetch(c, 1, topic, 0)[0][3]
        assert wrapper[17] & 7 == 1  # the wrapper's attributes: gzip
        got = decode_message_set(wrapper, 1 << 20)
        assert (got.magic, got.codec) == (0, 1)
        assert [(r.offset, r.key) for r in got.records] == [(i, b"k%d" % i) for i in range(5)]
    finally:
        c.close()


def test_kcat_balanced_consumer_as_0_9_client(kaflet_broker: BrokerProcess, kcat: str) -> None:
    """kcat -G as a 0.9 client: FindCoordinator/JoinGroup/SyncGroup/Heartbeat v0, OffsetCommit
    v2, OffsetFetch v1 and Fetch v1; a second run of the group resumes at the committed offset."""
    bootstrap = kaflet_broker.bootstrap
    topic = _topic(bootstrap, "oldgroup")
    _kcat(kcat, bootstrap, "-P", "-t", topic, stdin="".join(f"m{i}\n" for i in range(30)))
    group = f"g-{topic}"
    first = _kcat(kcat, bootstrap, "-X", "auto.offset.reset=earliest", "-X", "enable.auto.commit=true",
                  "-X", "auto.commit.interval.ms=100", "-G", group, topic, "-c", "10", "-f", "%o|%s\n")
    assert first.stdout.splitlines() == [f"{i}|m{i}" for i in range(10)]
    assert re.search(r"Sent JoinGroupRequest \(v0", first.stderr)
    second = _kcat(kcat, bootstrap, "-X", "auto.offset.reset=earliest", "-G", group, topic, "-c", "20",
                   "-f", "%o|%s\n")
    assert second.stdout.splitlines() == [f"{i}|m{i}" for i in range(10, 30)]
