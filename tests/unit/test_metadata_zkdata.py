"""Byte layouts of Kafka's ZooKeeper nodes (kafka-facts section 1)."""

from __future__ import annotations

import base64

import pytest

from kaflet.metadata import zkdata as zk


def test_cluster_id() -> None:
    assert zk.cluster_id_json("abc") == b'{"version":"1","id":"abc"}'
    assert zk.parse_cluster_id(b'{"id":"abc","version":"1"}') == "abc"


def test_broker_registration_v5_matches_example() -> None:
    info = zk.BrokerInfo(
        id=1, endpoints=(zk.EndPoint("PLAINTEXT", "h1", 9092, "PLAINTEXT"),), timestamp_ms=1700000000000
    )
    assert zk.broker_json(info) == (
        b'{"features":{},"listener_security_protocol_map":{"PLAINTEXT":"PLAINTEXT"},'
        b'"endpoints":["PLAINTEXT://h1:9092"],"jmx_port":-1,"port":9092,"host":"h1","version":5,'
        b'"timestamp":"1700000000000"}'
    )
    assert zk.parse_broker(1, zk.broker_json(info)) == info


def test_broker_registration_rack_ipv6_no_plaintext() -> None:
    info = zk.BrokerInfo(
        id=7,
        endpoints=(
            zk.EndPoint("INTERNAL", "::1", 9093, "SASL_SSL"),
            zk.EndPoint("EXTERNAL", None, 9094, "SSL"),
        ),
        rack="r1",
        timestamp_ms=5,
    )
    raw = zk.broker_json(info)
    assert b'"endpoints":["INTERNAL://[::1]:9093","EXTERNAL://:9094"]' in raw
    assert b'"rack":"r1"' in raw
    assert b'"host":null' in raw and b'"port":-1' in raw
    assert zk.parse_broker(7, raw) == info


def test_broker_registration_old_versions() -> None:
    v1 = b'{"jmx_port":-1,"timestamp":"1","host":"h","version":1,"port":9092}'
    b = zk.parse_broker(3, v1)
    assert b.endpoints == (zk.EndPoint("PLAINTEXT", "h", 9092, "PLAINTEXT"),)
    # Without a protocol map the listener name is the protocol.
    v2 = b'{"jmx_port":-1,"timestamp":"1","endpoints":["SSL://h:9093"],"host":null,"version":2,"port":-1}'
    assert zk.parse_broker(3, v2).endpoints == (zk.EndPoint("SSL", "h", 9093, "SSL"),)


def test_topic_assignment_v3_matches_example() -> None:
    tid = "AAAAAAAAAAAAAAAAAAAAAQ"
    raw = zk.topic_json({1: [2, 3, 1], 0: [1, 2, 3]}, tid)
    assert raw == (
        b'{"version":3,"partitions":{"0":[1,2,3],"1":[2,3,1]},"adding_replicas":{},'
        b'"removing_replicas":{},"topic_id":"AAAAAAAAAAAAAAAAAAAAAQ"}'
    )
    ta = zk.parse_topic("t", raw)
    assert ta.partitions == {0: [1, 2, 3], 1: [2, 3, 1]}
    assert ta.topic_id == tid and ta.adding_replicas == {} and ta.removing_replicas == {}
    # Version 1 nodes stay readable.
    old = zk.parse_topic("t", b'{"version":1,"partitions":{"0":[1]}}')
    assert old.partitions == {0: [1]} and old.topic_id is None
    # Sorted numerically, not as strings.
    assert b'{"2":[1],"10":[1]}' in zk.topic_json({10: [1], 2: [1]}, None)


def test_partition_state() -> None:
    st = zk.LeaderAndIsr(leader=1, leader_epoch=4, isr=[1, 2], controller_epoch=3)
    assert (
        zk.partition_state_json(st)
        == b'{"controller_epoch":3,"leader":1,"version":1,"leader_epoch":4,"isr":[1,2]}'
    )
    rec = zk.LeaderAndIsr(-1, 0, [], 1, leader_recovery_state=1)
    assert zk.partition_state_json(rec).endswith(b',"leader_recovery_state":1}')
    assert zk.parse_partition_state(zk.partition_state_json(st), 9) == zk.LeaderAndIsr(1, 4, [1, 2], 3, 0, 9)


def test_configs_and_changes() -> None:
    assert (
        zk.entity_config_json({"retention.ms": "1000"}) == b'{"version":1,"config":{"retention.ms":"1000"}}'
    )
    assert zk.entity_config_json({}) == b'{"version":1,"config":{}}'
    assert zk.parse_entity_config(b'{"version":1,"config":{"a":"b"}}') == {"a": "b"}
    assert zk.config_change_json("topics/foo") == b'{"version":2,"entity_path":"topics/foo"}'
    assert (
        zk.parse_config_change(b'{"version":2,"entity_path":"users/alice/clients/app"}')
        == "users/alice/clients/app"
    )
    assert zk.parse_config_change(b'{"version":1,"entity_type":"topics","entity_name":"foo"}') == "topics/foo"
    assert zk.config_change_prefix() == "/config/changes/config_change_"


def test_controller_nodes() -> None:
    assert zk.controller_json(2, 1700000000000) == b'{"version":1,"brokerid":2,"timestamp":"1700000000000"}'
    assert (
        zk.controller_json(2, 5, kraft_controller_epoch=-1)
        == b'{"version":2,"brokerid":2,"timestamp":"5","kraftControllerEpoch":-1}'
    )
    assert zk.parse_controller(zk.controller_json(2, 5, -1)) == 2
    assert zk.controller_epoch_bytes(5) == b"5"
    assert zk.parse_controller_epoch(b"12") == 12


def test_producer_id_block() -> None:
    first = zk.next_producer_id_block(None, 1)
    assert (first.block_start, first.block_end) == (0, 999)
    raw = zk.producer_id_block_json(first)
    assert raw == b'{"version":1,"broker":1,"block_start":"0","block_end":"999"}'
    assert zk.parse_producer_id_block(raw) == first
    assert zk.parse_producer_id_block(b"") is None
    assert zk.next_producer_id_block(first, 2) == zk.ProducerIdBlock(2, 1000, 1999)


def test_paths() -> None:
    assert set(zk.PERSISTENT_PATHS) == {
        "/consumers",
        "/brokers/ids",
        "/brokers/topics",
        "/config/changes",
        "/admin/delete_topics",
        "/brokers/seqid",
        "/isr_change_notification",
        "/latest_producer_id_block",
        "/log_dir_event_notification",
        "/config/topics",
        "/config/clients",
        "/config/users",
        "/config/brokers",
        "/config/ips",
    }
    assert zk.partition_state_path("t", 3) == "/brokers/topics/t/partitions/3/state"
    assert zk.delete_topic_path("t") == "/admin/delete_topics/t"
    assert zk.topic_config_path("t") == "/config/topics/t"
    assert zk.broker_path(4) == "/brokers/ids/4"


def test_uuid() -> None:
    for _ in range(2000):
        s = zk.random_uuid()
        assert len(s) == 22 and not s.startswith("-")
        raw = zk.uuid_from_str(s)
        assert zk.uuid_to_str(raw) == s
        assert raw[6] >> 4 == 4 and raw[8] >> 6 == 0b10  # version 4, IETF variant
    assert zk.uuid_from_str(zk.ZERO_UUID) == bytes(16)
    assert zk.uuid_from_str(zk.ONE_UUID) == bytes(15) + b"\x01"
    assert zk.uuid_from_str(zk.ZERO_UUID + "==") == bytes(16)  # padding accepted, like Java
    assert zk.uuid_to_str(b"\xfb" + bytes(15)).startswith("-")  # why random_uuid avoids them
    assert base64.urlsafe_b64decode(zk.random_uuid() + "==")
    for bad in ("short", "A" * 25, "AAAAAAAAAAAAAAAAAAAA+A", "AAAAAAAAAAAAAAAAAAAAAAAA"):
        with pytest.raises(ValueError):
            zk.uuid_from_str(bad)


def test_sanitize() -> None:
    assert zk.sanitize("alice") == "alice"
    assert zk.sanitize("user*1") == "user%2A1"
    assert zk.sanitize("a b") == "a%20b"
    assert zk.sanitize("CN=x,O=y") == "CN%3Dx%2CO%3Dy"
    assert zk.sanitize("ü~") == "%C3%BC%7E"
    for name in ("user*1", "a b", "CN=x,O=y", "ü~", "a+b"):
        assert zk.desanitize(zk.sanitize(name)) == name


def test_notification_and_feature_nodes() -> None:
    raw = zk.partition_list_json([("t", 0), ("u", 3)])
    assert raw == b'{"version":1,"partitions":[{"topic":"t","partition":0},{"topic":"u","partition":3}]}'
    assert zk.parse_partition_list(raw) == {("t", 0), ("u", 3)}
    assert zk.parse_partition_list(b'{"partitions":[{"partition":1,"topic":"x"}],"version":1}') == {("x", 1)}
    assert zk.isr_change_prefix() == "/isr_change_notification/isr_change_"
    assert zk.log_dir_event_json(4) == b'{"version":1,"broker":4,"event":1}'
    assert zk.parse_log_dir_event(b'{"event":1,"broker":4,"version":1}') == 4
    assert zk.feature_json(1) == b'{"features":{},"version":1,"status":1}'
    assert zk.parse_feature(b'{"status":0,"version":1,"features":{"f":{"min_version_level":1,"max_version_level":2}}}') == (
        0, {"f": {"min_version_level": 1, "max_version_level": 2}})
    with pytest.raises(ValueError):
        zk.parse_feature(b'{"status":7,"version":1,"features":{}}')
