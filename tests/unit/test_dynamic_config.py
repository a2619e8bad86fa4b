"""Config resolution as DescribeConfigs reports it, dynamic broker validation, incremental ops."""

from __future__ import annotations

import pytest

from kaflet.protocol.errors import ErrorCode
from kaflet.server.dynamic_config import (
    OP_APPEND,
    OP_DELETE,
    OP_SET,
    OP_SUBTRACT,
    SOURCE_DEFAULT,
    SOURCE_DYNAMIC_BROKER,
    SOURCE_DYNAMIC_DEFAULT_BROKER,
    SOURCE_STATIC_BROKER,
    SOURCE_TOPIC,
    ConfigRequestError,
    DynamicBrokerConfig,
    apply_incremental,
    broker_keys,
    broker_synonyms,
    describe_broker,
    describe_broker_default,
    describe_topic,
    effective_topic_defaults,
    validate_broker_update,
)


def syn(entry) -> list[tuple[str, str | None, int]]:
    return [(s.name, s.value, s.source) for s in entry.synonyms]


def by_name(entries) -> dict:
    return {e.name: e for e in entries}


def test_broker_synonym_groups() -> None:
    assert broker_synonyms("log.retention.hours") == ["log.retention.ms", "log.retention.minutes", "log.retention.hours"]
    assert broker_synonyms("log.roll.ms") == ["log.roll.ms", "log.roll.hours"]
    assert broker_synonyms("log.flush.interval.ms") == ["log.flush.interval.ms", "log.flush.scheduler.interval.ms"]
    assert broker_synonyms("message.max.bytes") == ["message.max.bytes"]


def test_synonyms_in_kafka_order_all_layers() -> None:
    dyn = DynamicBrokerConfig(1, {"message.max.bytes": "2000000"})
    dyn.update(default={"message.max.bytes": "3000000"}, per_broker={"message.max.bytes": "4000000"})
    entry = by_name(describe_broker(dyn, ["message.max.bytes"]))["message.max.bytes"]
    assert entry.value == "4000000"
    assert entry.source == SOURCE_DYNAMIC_BROKER
    assert not entry.read_only
    assert syn(entry) == [
        ("message.max.bytes", "4000000", SOURCE_DYNAMIC_BROKER),
        ("message.max.bytes", "3000000", SOURCE_DYNAMIC_DEFAULT_BROKER),
        ("message.max.bytes", "2000000", SOURCE_STATIC_BROKER),
        ("message.max.bytes", "1048588", SOURCE_DEFAULT),
    ]


def test_leading_synonyms_of_other_names_are_dropped() -> None:
    # Kafka drops synonyms until the first one with the config's own name: with only
    # log.retention.hours set, log.retention.ms has no synonyms and counts as a default.
    dyn = DynamicBrokerConfig(1, {"log.retention.hours": "24"})
    entries = by_name(describe_broker(dyn, ["log.retention.ms", "log.retention.hours"]))
    assert entries["log.retention.ms"].value is None
    assert entries["log.retention.ms"].synonyms == []
    assert entries["log.retention.ms"].source == SOURCE_DEFAULT
    assert syn(entries["log.retention.hours"]) == [
        ("log.retention.hours", "24", SOURCE_STATIC_BROKER), ("log.retention.hours", "168", SOURCE_DEFAULT)]
    # Once log.retention.ms is set dynamically, the hour synonyms follow it.
    dyn.update(default={"log.retention.ms": "1000"})
    entry = by_name(describe_broker(dyn, ["log.retention.ms"]))["log.retention.ms"]
    assert syn(entry) == [("log.retention.ms", "1000", SOURCE_DYNAMIC_DEFAULT_BROKER),
                          ("log.retention.hours", "24", SOURCE_STATIC_BROKER),
                          ("log.retention.hours", "168", SOURCE_DEFAULT)]


def test_topic_sources_and_synonyms() -> None:
    dyn = DynamicBrokerConfig(1, {"log.segment.bytes": "2048"})
    dyn.update(default={"message.max.bytes": "5000"})
    defaults = effective_topic_defaults({"segment.bytes": "2048"}, dyn)
    entries = by_name(describe_topic(dyn, defaults, {"retention.ms": "1000"}))
    assert entries["retention.ms"].value == "1000"
    assert entries["retention.ms"].source == SOURCE_TOPIC
    assert syn(entries["retention.ms"]) == [("retention.ms", "1000", SOURCE_TOPIC)]
    assert entries["segment.bytes"].value == "2048"
    assert entries["segment.bytes"].source == SOURCE_STATIC_BROKER
    assert syn(entries["segment.bytes"]) == [("log.segment.bytes", "2048", SOURCE_STATIC_BROKER),
                                             ("log.segment.bytes", "1073741824", SOURCE_DEFAULT)]
    assert entries["max.message.bytes"].value == "5000"
    assert entries["max.message.bytes"].source == SOURCE_DYNAMIC_DEFAULT_BROKER
    assert entries["cleanup.policy"].source == SOURCE_DEFAULT
    assert entries["leader.replication.throttled.replicas"].synonyms == []
    assert all(not e.read_only and not e.sensitive and e.documentation for e in entries.values())
    assert [e.name for e in describe_topic(dyn, defaults, {}, ["retention.ms", "nope"])] == ["retention.ms"]


def test_per_broker_dynamic_value_wins_over_default_for_topic_defaults() -> None:
    dyn = DynamicBrokerConfig(1, {})
    dyn.update(default={"log.retention.ms": "1000", "log.segment.bytes": "4096"},
               per_broker={"log.retention.ms": "2000"})
    out = effective_topic_defaults({"retention.ms": "604800000", "segment.bytes": "1073741824"}, dyn)
    assert out["retention.ms"] == "2000"
    assert out["segment.bytes"] == "4096"


def test_cluster_default_resource_lists_only_its_keys() -> None:
    dyn = DynamicBrokerConfig(1, {"message.max.bytes": "2000000"})
    dyn.update(default={"message.max.bytes": "3000000"}, per_broker={"log.retention.ms": "5"})
    entries = describe_broker_default(dyn)
    assert [(e.name, e.value, e.source) for e in entries] == [
        ("message.max.bytes", "3000000", SOURCE_DYNAMIC_DEFAULT_BROKER)]
    assert syn(entries[0]) == [("message.max.bytes", "3000000", SOURCE_DYNAMIC_DEFAULT_BROKER)]


def test_static_only_and_unknown_keys() -> None:
    dyn = DynamicBrokerConfig(7, {"custom.thing": "x"})
    entries = by_name(describe_broker(dyn))
    assert entries["broker.id"].value == "7"
    assert entries["broker.id"].read_only
    assert entries["num.partitions"].read_only
    assert not entries["log.retention.ms"].read_only
    # Kafka hides the value of a config it cannot type (it might be a secret).
    assert entries["custom.thing"].sensitive and entries["custom.thing"].value is None


def test_validate_broker_update_errors() -> None:
    with pytest.raises(ConfigRequestError) as exc:
        validate_broker_update({"num.partitions": "3", "log.retention.ms": "5"}, "1", True)
    assert exc.value.code == ErrorCode.INVALID_REQUEST
    assert "Cannot update these configs dynamically: Set(num.partitions)" in exc.value.message
    # Kafka keeps keys it does not know as custom configs (DynamicConfig.Broker allows them).
    assert validate_broker_update({"no.such.config": "1"}, "", False) == {"no.such.config": "1"}
    with pytest.raises(ConfigRequestError) as exc:
        validate_broker_update({"log.retention.ms": "soon"}, "1", True)
    assert exc.value.code == ErrorCode.INVALID_CONFIG
    assert exc.value.message == "Invalid value soon for configuration log.retention.ms: Not a number of type LONG"
    with pytest.raises(ConfigRequestError) as exc:
        validate_broker_update({"log.segment.bytes": "10"}, "1", True)
    assert exc.value.message == "Invalid value 10 for configuration log.segment.bytes: Value must be at least 14"
    assert validate_broker_update({"num.io.threads": "4", "log.cleanup.policy": "compact"}, "", False) == {
        "num.io.threads": "4", "log.cleanup.policy": "compact"}


def test_dynamic_keys_follow_kafka() -> None:
    keys = broker_keys()
    for name in ("log.retention.ms", "log.segment.bytes", "message.max.bytes", "compression.type",
                 "log.flush.interval.ms", "log.flush.interval.messages", "log.cleanup.policy", "min.insync.replicas"):
        assert keys[name].dynamic, name
    for name in ("log.retention.hours", "log.roll.hours", "broker.id", "log.dirs", "num.partitions",
                 "log.message.format.version", "auto.create.topics.enable", "port", "max.throttle.time.ms"):
        assert not keys[name].dynamic, name
    # Kafka's DynamicListenerConfig: listeners and SASL/SSL settings change per broker only.
    for name in ("listeners", "advertised.listeners", "sasl.kerberos.min.time.before.relogin", "ssl.keystore.location"):
        assert keys[name].dynamic and keys[name].mode == "per-broker", name
    for name in ("max.connections", "num.network.threads", "log.cleaner.threads", "metric.reporters"):
        assert keys[name].mode == "cluster-wide", name


def test_incremental_operations() -> None:
    cur = {"retention.ms": "1000"}
    out = apply_incremental(cur, [("cleanup.policy", OP_APPEND, "compact"), ("retention.ms", OP_DELETE, None),
                                  ("segment.bytes", OP_SET, "2048")], broker=False)
    assert out == {"cleanup.policy": "delete,compact", "segment.bytes": "2048"}
    out = apply_incremental(out, [("cleanup.policy", OP_SUBTRACT, "delete")], broker=False)
    assert out["cleanup.policy"] == "compact"
    assert cur == {"retention.ms": "1000"}  # not modified in place


@pytest.mark.parametrize(("ops", "code", "fragment"), [
    ([("retention.ms", OP_APPEND, "5")], ErrorCode.INVALID_REQUEST, "append is not allowed for config key: retention.ms"),
    ([("retention.ms", OP_SUBTRACT, "5")], ErrorCode.INVALID_REQUEST, "subtract is not allowed"),
    ([("a.b", OP_SET, "1"), ("a.b", OP_DELETE, None)], ErrorCode.INVALID_REQUEST, "duplicate config keys : a.b"),
    ([("retention.ms", OP_SET, None)], ErrorCode.INVALID_REQUEST, "Null value not supported for : SET:retention.ms"),
    ([("no.such", OP_APPEND, "x")], ErrorCode.INVALID_CONFIG, "Unknown topic config name: no.such"),
    ([("retention.ms", 9, "1")], ErrorCode.INVALID_REQUEST, "Unknown config operation"),
])
def test_incremental_errors(ops, code, fragment) -> None:
    with pytest.raises(ConfigRequestError) as exc:
        apply_incremental({}, ops, broker=False)
    assert exc.value.code == code
    assert fragment in exc.value.message


@pytest.mark.parametrize(("props", "per_broker", "code", "fragment"), [
    ({"log.dirs": "/x"}, True, ErrorCode.INVALID_REQUEST, "Cannot update these configs dynamically: Set(log.dirs)"),
    ({"broker.id": "3", "port": "1"}, True, ErrorCode.INVALID_REQUEST,
     "Cannot update these configs dynamically: Set(broker.id, port)"),
    ({"ssl.keystore.location": "/k.pem"}, True, ErrorCode.INVALID_REQUEST,
     "only per-listener using the listener prefix: Set(ssl.keystore.location)"),
    ({"sasl.kerberos.min.time.before.relogin": "5000"}, False, ErrorCode.INVALID_REQUEST,
     "Cannot update these configs at default cluster level, broker id must be specified: "
     "Set(sasl.kerberos.min.time.before.relogin)"),
    ({"listener.name.plain.ssl.keystore.location": "/k.pem"}, False, ErrorCode.INVALID_REQUEST,
     "broker id must be specified: Set(listener.name.plain.ssl.keystore.location)"),
    ({"sasl.kerberos.min.time.before.relogin": "soon"}, True, ErrorCode.INVALID_CONFIG,
     "Invalid value soon for configuration sasl.kerberos.min.time.before.relogin: Not a number of type LONG"),
    ({"listener.name.plain.max.connections": "-1"}, True, ErrorCode.INVALID_CONFIG,
     "Invalid value -1 for configuration listener.name.plain.max.connections: Value must be at least 0"),
    ({"sasl.jaas.config": "x required;"}, True, ErrorCode.INVALID_CONFIG, "Password encoder secret not configured"),
])
def test_dynamic_broker_rules_follow_kafka(props, per_broker, code, fragment) -> None:
    with pytest.raises(ConfigRequestError) as exc:
        validate_broker_update(props, "1" if per_broker else "", per_broker)
    assert exc.value.code == code
    assert fragment in exc.value.message


def test_dynamic_broker_configs_kafka_accepts() -> None:
    per_broker = {"sasl.kerberos.min.time.before.relogin": "120000", "listeners": "PLAINTEXT://:9092",
                  "listener.name.plain.max.connections": "10", "leader.replication.throttled.rate": "1000000",
                  "log.cleaner.io.buffer.load.factor": " 0.8 ", "metric.reporters": "a.B, c.D"}
    assert validate_broker_update(per_broker, "1", True) == {**per_broker, "log.cleaner.io.buffer.load.factor": "0.8",
                                                             "metric.reporters": "a.B,c.D"}
    cluster = {"max.connections": "100", "num.network.threads": "4", "unclean.leader.election.enable": "TRUE",
               "follower.replication.throttled.rate": "5"}
    assert validate_broker_update(cluster, "", False)["unclean.leader.election.enable"] == "true"


def test_describe_broker_types_and_sensitivity() -> None:
    dyn = DynamicBrokerConfig(1, {"listener.name.plain.sasl.jaas.config": "secret", "ssl.key.password": "pw",
                                  "listener.name.plain.ssl.client.auth": "required"})
    dyn.update(per_broker={"sasl.kerberos.min.time.before.relogin": "120000", "my.plugin.setting": "x",
                           "leader.replication.throttled.rate": "1000"})
    entries = by_name(describe_broker(dyn))
    relogin = entries["sasl.kerberos.min.time.before.relogin"]
    assert relogin.value == "120000" and relogin.source == SOURCE_DYNAMIC_BROKER and relogin.kind == 5  # LONG
    assert syn(relogin) == [("sasl.kerberos.min.time.before.relogin", "120000", SOURCE_DYNAMIC_BROKER),
                            ("sasl.kerberos.min.time.before.relogin", "60000", SOURCE_DEFAULT)]
    assert not relogin.read_only and not relogin.sensitive
    assert entries["ssl.key.password"].sensitive and entries["ssl.key.password"].value is None
    jaas = entries["listener.name.plain.sasl.jaas.config"]
    assert jaas.sensitive and jaas.value is None and jaas.kind == 9  # PASSWORD, from its base config
    auth = entries["listener.name.plain.ssl.client.auth"]
    assert auth.value == "required" and not auth.sensitive and auth.kind == 2
    assert entries["my.plugin.setting"].sensitive  # a custom config: Kafka cannot type it
    # Kafka's whole catalogue is listed, internal keys only when set.
    assert {"zookeeper.session.timeout.ms", "sasl.kerberos.service.name", "replica.lag.time.max.ms"} <= set(entries)
    for unlisted in ("unstable.api.versions.enable", "port", "follower.replication.throttled.rate"):
        assert unlisted not in entries, unlisted
    # A dynamic-only key is listed once set; Kafka reports it read-only (it is not in AllDynamicConfigs).
    rate = entries["leader.replication.throttled.rate"]
    assert (rate.value, rate.kind, rate.read_only) == ("1000", 5, True)
    assert entries["replica.lag.time.max.ms"].value == "30000" and entries["replica.lag.time.max.ms"].read_only


def test_cleaner_config_takes_the_dynamic_layers() -> None:
    from kaflet.server.config import BrokerConfig, ConfigError
    from kaflet.server.dynamic_config import applied_at_run_time, effective_cleaner_config

    static = BrokerConfig({"log.cleaner.threads": "2", "log.cleaner.backoff.ms": "500"})
    dyn = DynamicBrokerConfig(1, static.originals)
    assert effective_cleaner_config(static, dyn).threads == 2
    dyn.update(default={"log.cleaner.threads": "3", "log.cleaner.io.max.bytes.per.second": "1000.5"},
               per_broker={"log.cleaner.threads": "4"})
    cfg = effective_cleaner_config(static, dyn)
    assert (cfg.threads, cfg.io_max_bytes_per_second, cfg.backoff_ms) == (4, 1000.5, 500)
    dyn.update(default={"log.cleaner.dedupe.buffer.size": "0"}, per_broker={})
    with pytest.raises(ConfigError):
        effective_cleaner_config(static, dyn)
    assert applied_at_run_time("log.cleaner.io.max.bytes.per.second") and applied_at_run_time("log.retention.ms")
    assert not applied_at_run_time("log.cleaner.enable") and not applied_at_run_time("num.io.threads")
