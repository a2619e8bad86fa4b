"""Kafka's config catalogue: lookups, Kafka's validation and messages, and how kaflet sorts
server.properties keys into acted on, Kafka's but not acted on, and not Kafka's at all."""

from __future__ import annotations

import logging

import pytest

from kaflet.server.config import (
    ACTED_ON,
    NOT_ACTED_ON,
    UNKNOWN,
    BrokerConfig,
    ConfigError,
    classify_static_key,
)
from kaflet.server.kafka_configs import (
    CLUSTER_WIDE,
    DYNAMIC_ONLY,
    PER_BROKER,
    READ_ONLY,
    InvalidConfigError,
    broker_catalogue,
    broker_config_key,
    check_value,
    listener_base,
    topic_catalogue,
)
from kaflet.server.topic_config import (
    NOT_ENFORCED,
    TOPIC_CONFIGS,
    validate_topic_config,
    validate_topic_configs,
)


def test_broker_catalogue_lookups() -> None:
    cat = broker_catalogue()
    assert len(cat) > 330
    relogin = cat["sasl.kerberos.min.time.before.relogin"]
    assert (relogin.kind, relogin.default, relogin.mode) == ("long", "60000", PER_BROKER)
    assert (cat["log.dirs"].kind, cat["log.dirs"].default, cat["log.dirs"].mode) == ("string", None, READ_ONLY)
    assert cat["log.cleaner.threads"].mode == CLUSTER_WIDE
    assert cat["leader.replication.throttled.rate"].mode == DYNAMIC_ONLY
    assert cat["sasl.jaas.config"].kind == "password"
    assert cat["unstable.api.versions.enable"].internal
    assert cat["port"].removed_in == "3.0" and cat["zookeeper.sync.time.ms"].removed_in == "3.1"
    assert "no.such.thing" not in cat


def test_topic_catalogue_and_synonyms() -> None:
    cat = topic_catalogue()
    assert len(cat) == 36
    assert cat["preallocate"].synonym == "log.preallocate"
    assert cat["segment.index.bytes"].synonym == "log.index.size.max.bytes"
    assert cat["remote.storage.enable"].synonym is None  # no broker default, as in Kafka
    assert set(NOT_ENFORCED) <= set(TOPIC_CONFIGS)
    assert not TOPIC_CONFIGS["preallocate"].enforced and TOPIC_CONFIGS["retention.ms"].enforced


def test_listener_overrides() -> None:
    assert listener_base("listener.name.sasl_ssl.plain.sasl.jaas.config") == ("sasl_ssl", "sasl.jaas.config")
    assert listener_base("listener.name.mtls.ssl.client.auth") == ("mtls", "ssl.client.auth")
    assert listener_base("listener.name.x") is None and listener_base("log.dirs") is None
    key = broker_config_key("listener.name.mtls.ssl.keystore.location")
    assert key is not None and key.name == "ssl.keystore.location"
    assert broker_config_key("listener.name.mtls.not.a.config") is None


@pytest.mark.parametrize(("name", "value", "expected"), [
    ("sasl.kerberos.min.time.before.relogin", " 120000 ", "120000"),
    ("log.cleaner.min.cleanable.ratio", "0.25", "0.25"),
    ("unclean.leader.election.enable", "TRUE", "true"),
    ("sasl.enabled.mechanisms", "PLAIN, SCRAM-SHA-256", "PLAIN,SCRAM-SHA-256"),
    ("compression.gzip.level", "-1", "-1"),
    ("inter.broker.protocol.version", "2.8", "2.8"),
    ("inter.broker.protocol.version", "3.6-IV2", "3.6-IV2"),
    ("log.message.format.version", "2.8.1", "2.8.1"),
    ("group.consumer.migration.policy", "upgrade", "upgrade"),
    ("principal.builder.class", "com.example.MyBuilder", "com.example.MyBuilder"),
])
def test_values_kafka_accepts(name: str, value: str, expected: str) -> None:
    assert check_value(broker_catalogue()[name], value) == expected


@pytest.mark.parametrize(("name", "value", "message"), [
    ("sasl.kerberos.min.time.before.relogin", "1m", "Not a number of type LONG"),
    ("num.io.threads", "2147483648", "Not a number of type INT"),
    ("offsets.topic.replication.factor", "40000", "Not a number of type SHORT"),
    ("sasl.kerberos.ticket.renew.jitter", "1_0", "Not a number of type DOUBLE"),
    ("auto.create.topics.enable", "yes", "Expected value to be either true or false"),
    ("num.io.threads", "0", "Value must be at least 1"),
    ("log.cleaner.min.cleanable.ratio", "1.5", "Value must be no more than 1"),
    ("compression.gzip.level", "10", "Value must be between 1 and 9 or equal to -1"),
    ("ssl.client.auth", "maybe", "String must be one of: required, requested, none"),
    ("log.cleanup.policy", "shred", "String must be one of: compact, delete"),  # each list item in turn
    ("remote.log.metadata.manager.impl.prefix", "", "String must be non-empty"),
    ("inter.broker.protocol.version", "2.8-IV9", "Version 2.8-IV9 is not a valid version"),
    ("principal.builder.class", "not a class", "Class not a class could not be found."),
])
def test_values_kafka_refuses(name: str, value: str, message: str) -> None:
    with pytest.raises(InvalidConfigError) as exc:
        check_value(broker_catalogue()[name], value)
    assert str(exc.value).startswith(f"Invalid value {value} for configuration {name}: ")
    assert str(exc.value).endswith(message)


def test_topic_configs_kafka_knows_but_kaflet_does_not_enforce(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, "kaflet.config")
    out = validate_topic_configs({"preallocate": "TRUE", "message.downconversion.enable": "false",
                                  "follower.replication.throttled.replicas": "0:1, 1:2",
                                  "local.retention.ms": "-2", "remote.storage.enable": "false"})
    assert out["preallocate"] == "true" and out["follower.replication.throttled.replicas"] == "0:1,1:2"
    first = [r.getMessage() for r in caplog.records]
    assert any("preallocate is stored but kaflet does not act on it" in m for m in first)
    caplog.clear()
    validate_topic_configs({"preallocate": "false"})
    assert not any("preallocate" in r.getMessage() for r in caplog.records)  # once per key


@pytest.mark.parametrize(("configs", "message"), [
    ({"no.such.config": "1"}, "Unknown topic config name: no.such.config"),
    ({"preallocate": "sometimes"}, "Invalid value sometimes for configuration preallocate: Expected value to be "
                                   "either true or false"),
    ({"leader.replication.throttled.replicas": "all"}, "must be the literal '*' or a list of replicas"),
    ({"local.retention.bytes": "-3"}, "Value must be at least -2"),
    ({"compression.zstd.level": "23"}, "Value must be no more than 22"),
    ({"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"},
     "conflict topic config setting min.compaction.lag.ms (10) > max.compaction.lag.ms (5)"),
    ({"remote.storage.enable": "true"}, "Tiered Storage functionality is disabled in the broker"),
    ({"remote.log.copy.disable": "true"}, "under Zookeeper's mode"),
])
def test_topic_values_kafka_refuses(configs: dict[str, str], message: str) -> None:
    with pytest.raises(InvalidConfigError) as exc:
        validate_topic_configs(configs)
    assert message in str(exc.value)


def test_topic_lag_conflict_uses_broker_defaults() -> None:
    with pytest.raises(InvalidConfigError):
        validate_topic_configs({"min.compaction.lag.ms": "10"}, {"max.compaction.lag.ms": "5"})
    assert validate_topic_config("message.format.version", "2.8") == "2.8"


@pytest.mark.parametrize(("key", "kind"), [
    ("log.retention.hours", ACTED_ON),
    ("listener.name.mtls.ssl.client.auth", ACTED_ON),
    ("sasl.jaas.config", ACTED_ON),
    ("log.message.timestamp.difference.max.ms", ACTED_ON),  # the default of an enforced topic config
    ("sasl.kerberos.service.name", NOT_ACTED_ON),
    ("log.preallocate", NOT_ACTED_ON),
    ("listener.name.mtls.sasl.kerberos.service.name", NOT_ACTED_ON),
    ("port", NOT_ACTED_ON),
    ("ssl.keystore.password", NOT_ACTED_ON),
    ("leader.replication.throttled.rate", UNKNOWN),  # dynamic only: not a server.properties key in Kafka
    ("some.made.up.key", UNKNOWN),
])
def test_static_keys_are_sorted(key: str, kind: str) -> None:
    assert classify_static_key(key) == kind


def test_server_properties_reporting(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "kaflet.config")
    cfg = BrokerConfig({"sasl.kerberos.service.name": "kafka", "made.up.key": "1", "num.io.threads": "4",
                        "log.roll.jitter.hours": "1", "log.message.timestamp.difference.max.ms": "60000",
                        "log.preallocate": "true"})
    assert cfg.unknown == ["made.up.key"]
    assert sorted(cfg.not_acted_on) == ["log.preallocate", "num.io.threads", "sasl.kerberos.service.name"]
    cfg.report_unknown()
    lines = [r.getMessage() for r in caplog.records]
    assert "The configuration 'made.up.key' was supplied but isn't a known config." in lines
    assert any(m.startswith("config sasl.kerberos.service.name is a Kafka broker config that kaflet does not act on")
               for m in lines)
    assert any("num.io.threads" in m and "one event loop" in m for m in lines)
    assert any("log.preallocate" in m and "preallocate" in m.split("log.preallocate", 1)[1] for m in lines)
    assert not any("log.roll.jitter.hours" in m for m in lines)  # segment.jitter.ms's default: acted on
    # Broker-level topic defaults reach the topics, in the topic config's unit.
    defaults = cfg.topic_defaults()
    assert defaults["segment.jitter.ms"] == "3600000"
    assert defaults["message.timestamp.difference.max.ms"] == "60000"


def test_server_properties_bad_kafka_value_stops_start() -> None:
    with pytest.raises(ConfigError, match="Invalid value soon for configuration sasl.kerberos.min.time.before.relogin: "
                                          "Not a number of type LONG"):
        BrokerConfig({"sasl.kerberos.min.time.before.relogin": "soon"})
    BrokerConfig({"made.up.key": "anything"})  # Kafka cannot validate what it does not know
