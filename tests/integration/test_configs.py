"""DescribeConfigs, AlterConfigs and IncrementalAlterConfigs against a real broker process, with
confluent-kafka and kafka-python, and `kaflet configs`; changes take effect without a restart."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource
from kafka.admin import ConfigResource as KpResource
from kafka.admin import ConfigResourceType, KafkaAdminClient

from kaflet.protocol import codec
from tests.support.broker_process import BrokerProcess, running_broker
from tests.support.raw_client import RawClient
from tests.support.topics import create_topic

OVERRIDES = {"log.retention.check.interval.ms": "300", "log.segment.delete.delay.ms": "200",
             "log.retention.hours": "48"}
TOPIC, BROKER = ConfigResource.Type.TOPIC, ConfigResource.Type.BROKER


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with running_broker(tmp_path_factory.mktemp("configs") / "data", OVERRIDES) as b:
        yield b


@pytest.fixture(scope="module")
def admin(broker: BrokerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap})


@pytest.fixture(scope="module")
def broker_id(admin: AdminClient) -> str:
    return str(next(iter(admin.list_topics(timeout=10).brokers)))


def new_topic(bootstrap: str, config: dict[str, str] | None = None) -> str:
    name = f"cfg-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, name, config=config)
    return name


def describe(admin: AdminClient, rtype: ConfigResource.Type, name: str) -> dict:
    res = ConfigResource(rtype, name)
    return admin.describe_configs([res])[res].result(10)


def incremental(admin: AdminClient, rtype: ConfigResource.Type, name: str, validate_only: bool = False,
                **ops: tuple[AlterConfigOpType, str | None]) -> None:
    entries = [ConfigEntry(k.replace("_", "."), v, incremental_operation=op) for k, (op, v) in ops.items()]
    res = ConfigResource(rtype, name, incremental_configs=entries)
    admin.incremental_alter_configs([res], validate_only=validate_only)[res].result(10)


def raw_default_broker(bootstrap: str, api_key: int, version: int, request) -> object:  # type: ignore[no-untyped-def]
    rc = RawClient(bootstrap)
    try:
        return rc.request(api_key, version, request)
    finally:
        rc.close()


def produce_error(bootstrap: str, topic: str, size: int) -> KafkaError | None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "message.max.bytes": 10_000_000})
    errs: list[KafkaError | None] = []
    p.produce(topic, b"x" * size, on_delivery=lambda e, _m: errs.append(e))
    p.flush(10)
    return errs[0]


def wait(cond, timeout: float = 15.0) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.1)
    return bool(cond())


# ---------------------------------------------------------------- describe


def test_describe_topic_sources_and_synonyms(broker: BrokerProcess, admin: AdminClient) -> None:
    topic = new_topic(broker.bootstrap, {"retention.ms": "3600000"})
    entries = describe(admin, TOPIC, topic)
    ret = entries["retention.ms"]
    assert ret.value == "3600000" and ret.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert not ret.is_default and not ret.is_read_only and not ret.is_sensitive
    seg = entries["segment.bytes"]
    assert seg.value == "1073741824" and seg.source == ConfigSource.DEFAULT_CONFIG.value and seg.is_default
    assert [(s.name, s.source) for s in seg.synonyms.values()] == [("log.segment.bytes", ConfigSource.DEFAULT_CONFIG.value)]
    assert entries["cleanup.policy"].value == "delete"


def test_describe_topic_with_kafka_python(broker: BrokerProcess) -> None:
    topic = new_topic(broker.bootstrap, {"cleanup.policy": "compact"})
    kp = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        out = kp.describe_configs([KpResource(ConfigResourceType.TOPIC, topic)], include_synonyms=True,
                                  config_filter="all")
        cfg = out["topic"][topic]
        assert cfg["cleanup.policy"]["value"] == "compact"
        assert cfg["cleanup.policy"]["config_source"] == "DYNAMIC_TOPIC_CONFIG"
        assert [s["name"] for s in cfg["cleanup.policy"]["synonyms"]] == ["cleanup.policy", "log.cleanup.policy"]
        assert cfg["segment.bytes"]["config_source"] == "DEFAULT_CONFIG"
        modified = kp.describe_configs([KpResource(ConfigResourceType.TOPIC, topic)])["topic"][topic]
        assert set(modified) == {"cleanup.policy"}
    finally:
        kp.close()


def test_describe_broker(broker: BrokerProcess, admin: AdminClient, broker_id: str) -> None:
    entries = describe(admin, BROKER, broker_id)
    hours = entries["log.retention.hours"]
    assert hours.value == "48" and hours.source == ConfigSource.STATIC_BROKER_CONFIG.value and hours.is_read_only
    assert entries["broker.id"].value == broker_id
    assert not entries["message.max.bytes"].is_read_only
    assert entries["message.max.bytes"].source == ConfigSource.DEFAULT_CONFIG.value
    # Documentation and types come with v3+.
    D = codec.request_class(32)
    req = D(resources=[D.DescribeConfigsResource(resource_type=4, resource_name=broker_id,
                                                 configuration_keys=["log.retention.hours"])],
            include_synonyms=True, include_documentation=True)
    resp = raw_default_broker(broker.bootstrap, 32, 4, req)
    (entry,) = resp.results[0].configs  # type: ignore[attr-defined]
    assert entry.config_type == 3 and entry.documentation
    assert [(s.name, s.value, s.source) for s in entry.synonyms] == [
        ("log.retention.hours", "48", 4), ("log.retention.hours", "168", 5)]


def test_describe_errors(broker: BrokerProcess, admin: AdminClient) -> None:
    with pytest.raises(KafkaException) as exc:
        describe(admin, TOPIC, "no-such-topic-xyz")
    assert exc.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    D = codec.request_class(32)
    req = D(resources=[D.DescribeConfigsResource(resource_type=8, resource_name="1", configuration_keys=None),
                       D.DescribeConfigsResource(resource_type=4, resource_name="424242", configuration_keys=None)],
            include_synonyms=False)
    resp = raw_default_broker(broker.bootstrap, 32, 1, req)
    assert [r.error_code for r in resp.results] == [42, 42]  # type: ignore[attr-defined]


# ---------------------------------------------------------------- alter


def test_incremental_alter_set_delete_append_subtract(broker: BrokerProcess, admin: AdminClient) -> None:
    topic = new_topic(broker.bootstrap, {"retention.ms": "3600000"})
    incremental(admin, TOPIC, topic, segment_bytes=(AlterConfigOpType.SET, "1048576"),
                retention_ms=(AlterConfigOpType.DELETE, None),
                cleanup_policy=(AlterConfigOpType.APPEND, "compact"))
    entries = describe(admin, TOPIC, topic)
    assert entries["segment.bytes"].value == "1048576"
    assert entries["retention.ms"].source != ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert entries["cleanup.policy"].value == "delete,compact"
    incremental(admin, TOPIC, topic, cleanup_policy=(AlterConfigOpType.SUBTRACT, "delete"))
    assert describe(admin, TOPIC, topic)["cleanup.policy"].value == "compact"


def test_alter_configs_replaces_and_validate_only_changes_nothing(broker: BrokerProcess) -> None:
    topic = new_topic(broker.bootstrap, {"retention.ms": "3600000", "segment.bytes": "1048576"})
    kp = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        res = KpResource(ConfigResourceType.TOPIC, topic, configs={"max.message.bytes": "5000"})
        assert kp.alter_configs([res], validate_only=True, raise_on_unknown=False, incremental=False) == {
            "topic": {topic: "OK"}}
        before = kp.describe_configs([KpResource(ConfigResourceType.TOPIC, topic)])["topic"][topic]
        assert set(before) == {"retention.ms", "segment.bytes"}
        # AlterConfigs replaces the whole override set: segment.bytes goes back to its default.
        kafka_python_alter_replace(broker.bootstrap, topic, {"retention.ms": "7200000", "max.message.bytes": "5000"})
        after = kp.describe_configs([KpResource(ConfigResourceType.TOPIC, topic)])["topic"][topic]
        assert {k: v["value"] for k, v in after.items()} == {"retention.ms": "7200000", "max.message.bytes": "5000"}
        res = KpResource(ConfigResourceType.TOPIC, topic, configs={"retention.ms": ("DELETE", None)})
        kp.alter_configs([res], raise_on_unknown=False, incremental=True)
        after = kp.describe_configs([KpResource(ConfigResourceType.TOPIC, topic)])["topic"][topic]
        assert set(after) == {"max.message.bytes"}
    finally:
        kp.close()


def kafka_python_alter_replace(bootstrap: str, topic: str, configs: dict[str, str]) -> None:
    """A bare AlterConfigs request (kafka-python's client would add back the other overrides)."""
    A = codec.request_class(33)
    R = A.AlterConfigsResource
    req = A(resources=[R(resource_type=2, resource_name=topic,
                         configs=[R.AlterableConfig(name=k, value=v) for k, v in configs.items()])], validate_only=False)
    resp = raw_default_broker(bootstrap, 33, 1, req)
    assert resp.responses[0].error_code == 0, resp  # type: ignore[attr-defined]


def test_validate_only_with_confluent(broker: BrokerProcess, admin: AdminClient) -> None:
    topic = new_topic(broker.bootstrap)
    incremental(admin, TOPIC, topic, validate_only=True, retention_ms=(AlterConfigOpType.SET, "1000"))
    assert describe(admin, TOPIC, topic)["retention.ms"].source == ConfigSource.DEFAULT_CONFIG.value


@pytest.mark.parametrize(("key", "value", "message"), [
    ("retention.ms", "soon", "Invalid value soon for configuration retention.ms: Not a number of type LONG"),
    ("segment.bytes", "3", "Invalid value 3 for configuration segment.bytes: Value must be at least 14"),
    ("cleanup.policy", "shred", "Invalid value shred for configuration cleanup.policy"),
    ("no.such.config", "1", "Unknown topic config name: no.such.config"),
])
def test_invalid_topic_values_refused(broker: BrokerProcess, admin: AdminClient, key: str, value: str,
                                      message: str) -> None:
    topic = new_topic(broker.bootstrap)
    with pytest.raises(KafkaException) as exc:
        incremental(admin, TOPIC, topic, **{key.replace(".", "_"): (AlterConfigOpType.SET, value)})
    err = exc.value.args[0]
    assert err.code() == KafkaError.INVALID_CONFIG
    assert message in err.str()
    assert describe(admin, TOPIC, topic)[key if key != "no.such.config" else "retention.ms"].source == \
        ConfigSource.DEFAULT_CONFIG.value


def test_unknown_topic_and_static_broker_config(broker: BrokerProcess, admin: AdminClient, broker_id: str) -> None:
    with pytest.raises(KafkaException) as exc:
        incremental(admin, TOPIC, "no-such-topic-abc", retention_ms=(AlterConfigOpType.SET, "1"))
    assert exc.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    with pytest.raises(KafkaException) as exc:
        incremental(admin, BROKER, broker_id, num_partitions=(AlterConfigOpType.SET, "3"))
    assert exc.value.args[0].code() == KafkaError.INVALID_REQUEST
    assert "Cannot update these configs dynamically: Set(num.partitions)" in exc.value.args[0].str()


# ---------------------------------------------------------------- taking effect without a restart


def test_max_message_bytes_takes_effect_at_once(broker: BrokerProcess, admin: AdminClient) -> None:
    topic = new_topic(broker.bootstrap)
    assert produce_error(broker.bootstrap, topic, 5000) is None
    incremental(admin, TOPIC, topic, max_message_bytes=(AlterConfigOpType.SET, "2000"))
    err = produce_error(broker.bootstrap, topic, 5000)
    assert err is not None and err.code() == KafkaError.MSG_SIZE_TOO_LARGE
    assert produce_error(broker.bootstrap, topic, 500) is None


def test_recreated_topic_takes_its_new_configs(broker: BrokerProcess, admin: AdminClient) -> None:
    topic = new_topic(broker.bootstrap, {"max.message.bytes": "2000"})
    err = produce_error(broker.bootstrap, topic, 5000)
    assert err is not None and err.code() == KafkaError.MSG_SIZE_TOO_LARGE
    admin.delete_topics([topic])[topic].result(30)
    # Same name, new topic: its logs are created with the new topic's configs, not the old one's.
    assert wait(lambda: topic not in admin.list_topics(timeout=10).topics)
    create_topic(broker.bootstrap, topic, config={"max.message.bytes": "20000"})
    assert produce_error(broker.bootstrap, topic, 5000) is None


def test_segment_bytes_rolls_at_new_size(broker: BrokerProcess, admin: AdminClient) -> None:
    topic = new_topic(broker.bootstrap)
    incremental(admin, TOPIC, topic, segment_bytes=(AlterConfigOpType.SET, "4096"))
    for _ in range(10):
        assert produce_error(broker.bootstrap, topic, 1000) is None
    assert len(list((broker.data_dir / f"{topic}-0").glob("*.log"))) >= 3


def test_retention_ms_at_run_time(broker: BrokerProcess, admin: AdminClient) -> None:
    topic = new_topic(broker.bootstrap, {"segment.bytes": "2048"})
    for _ in range(8):
        assert produce_error(broker.bootstrap, topic, 600) is None
    d = broker.data_dir / f"{topic}-0"
    before = len(list(d.glob("*.log")))
    assert before >= 3
    time.sleep(0.5)
    incremental(admin, TOPIC, topic, retention_ms=(AlterConfigOpType.SET, "200"))
    # Everything but the active segment expires, without a restart.
    assert wait(lambda: len(list(d.glob("*.log"))) == 1), list(d.iterdir())


def test_cleanup_policy_at_run_time(broker: BrokerProcess, admin: AdminClient) -> None:
    topic = new_topic(broker.bootstrap)
    assert produce_error(broker.bootstrap, topic, 10) is None
    D = codec.request_class(21)
    T = D.DeleteRecordsTopic
    req = D(topics=[T(name=topic, partitions=[T.DeleteRecordsPartition(partition_index=0, offset=0)])], timeout_ms=5000)
    ok = raw_default_broker(broker.bootstrap, 21, 1, req)
    assert ok.topics[0].partitions[0].error_code == 0  # type: ignore[attr-defined]
    incremental(admin, TOPIC, topic, cleanup_policy=(AlterConfigOpType.SET, "compact"))
    refused = raw_default_broker(broker.bootstrap, 21, 1, req)
    assert refused.topics[0].partitions[0].error_code == 44  # type: ignore[attr-defined]  # POLICY_VIOLATION


def test_dynamic_broker_configs_per_broker_and_cluster_default(broker: BrokerProcess, admin: AdminClient,
                                                               broker_id: str) -> None:
    topic = new_topic(broker.bootstrap)
    with_override = new_topic(broker.bootstrap, {"max.message.bytes": "100000"})
    Inc = codec.request_class(44)
    R = Inc.AlterConfigsResource

    def set_default(value: str | None) -> None:
        op = 0 if value is not None else 1
        req = Inc(resources=[R(resource_type=4, resource_name="", configs=[
            R.AlterableConfig(name="message.max.bytes", config_operation=op, value=value)])], validate_only=False)
        resp = raw_default_broker(broker.bootstrap, 44, 0, req)
        assert resp.responses[0].error_code == 0, resp  # type: ignore[attr-defined]

    try:
        set_default("3000")
        err = produce_error(broker.bootstrap, topic, 5000)
        assert err is not None and err.code() == KafkaError.MSG_SIZE_TOO_LARGE
        assert produce_error(broker.bootstrap, with_override, 5000) is None  # its own override wins
        entry = describe(admin, TOPIC, topic)["max.message.bytes"]
        assert entry.value == "3000" and entry.source == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value
        # The per-broker value wins over the cluster default.
        incremental(admin, BROKER, broker_id, message_max_bytes=(AlterConfigOpType.SET, "8000"))
        assert produce_error(broker.bootstrap, topic, 5000) is None
        b = describe(admin, BROKER, broker_id)["message.max.bytes"]
        assert b.value == "8000" and b.source == ConfigSource.DYNAMIC_BROKER_CONFIG.value
    finally:
        incremental(admin, BROKER, broker_id, message_max_bytes=(AlterConfigOpType.DELETE, None))
        set_default(None)
    assert produce_error(broker.bootstrap, topic, 5000) is None


# ---------------------------------------------------------------- restart and the CLI


def test_changes_survive_restart(tmp_path: Path) -> None:
    b = BrokerProcess(tmp_path / "data")
    b.start()
    try:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        bid = str(next(iter(admin.list_topics(timeout=10).brokers)))
        topic = new_topic(b.bootstrap)
        incremental(admin, TOPIC, topic, max_message_bytes=(AlterConfigOpType.SET, "2000"))
        incremental(admin, BROKER, bid, log_retention_ms=(AlterConfigOpType.SET, "7200000"))
        b.restart()
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        assert describe(admin, TOPIC, topic)["max.message.bytes"].value == "2000"
        assert describe(admin, TOPIC, topic)["retention.ms"].value == "7200000"
        assert describe(admin, BROKER, bid)["log.retention.ms"].source == ConfigSource.DYNAMIC_BROKER_CONFIG.value
        err = produce_error(b.bootstrap, topic, 5000)
        assert err is not None and err.code() == KafkaError.MSG_SIZE_TOO_LARGE
    finally:
        try:
            b.stop(timeout=20)
        finally:
            b.kill()


def test_an_empty_cleanup_policy_keeps_every_segment_and_survives_restart(tmp_path: Path) -> None:
    """``cleanup.policy`` is a list and Kafka takes an empty one (what subtracting ``delete`` from
    ``delete`` leaves): neither retention nor compaction, no DeleteRecords. The other changes of
    the same request still reach the log, and the broker starts again with it."""
    b = BrokerProcess(tmp_path / "data")
    b.start()
    try:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        topic = new_topic(b.bootstrap, {"segment.bytes": "2048"})
        for _ in range(8):
            assert produce_error(b.bootstrap, topic, 600) is None
        d = b.data_dir / f"{topic}-0"
        segments = sorted(p.name for p in d.glob("*.log"))
        assert len(segments) >= 3
        incremental(admin, TOPIC, topic, cleanup_policy=(AlterConfigOpType.SUBTRACT, "delete"),
                    retention_ms=(AlterConfigOpType.SET, "1"), max_message_bytes=(AlterConfigOpType.SET, "2000"))
        assert describe(admin, TOPIC, topic)["cleanup.policy"].value == ""
        err = produce_error(b.bootstrap, topic, 5000)
        assert err is not None and err.code() == KafkaError.MSG_SIZE_TOO_LARGE
        D = codec.request_class(21)
        T = D.DeleteRecordsTopic
        req = D(topics=[T(name=topic, partitions=[T.DeleteRecordsPartition(partition_index=0, offset=1)])],
                timeout_ms=5000)
        refused = raw_default_broker(b.bootstrap, 21, 1, req)
        assert refused.topics[0].partitions[0].error_code == 44  # type: ignore[attr-defined]  # POLICY_VIOLATION
        created = new_topic(b.bootstrap, {"cleanup.policy": ""})
        assert produce_error(b.bootstrap, created, 100) is None
        b.restart()
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        assert describe(admin, TOPIC, topic)["cleanup.policy"].value == ""
        assert produce_error(b.bootstrap, created, 100) is None
        assert sorted(p.name for p in d.glob("*.log")) == segments  # retention.ms=1 deleted nothing
        assert "Traceback" not in b.new_log()
    finally:
        try:
            b.stop(timeout=20)
        finally:
            b.kill()


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kaflet.cli", "configs", *args], capture_output=True, text=True,
                          timeout=60)


def assert_one_line_error(proc: subprocess.CompletedProcess[str], *fragments: str) -> None:
    assert proc.returncode != 0, proc
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), proc.stderr
    for f in fragments:
        assert f in lines[0], lines[0]


def test_configs_cli(broker: BrokerProcess, broker_id: str) -> None:
    bs = ["--bootstrap-server", broker.bootstrap, "--timeout", "5"]
    topic = new_topic(broker.bootstrap)
    t = [*bs, "--entity-type", "topics", "--entity-name", topic]
    out = cli(*t, "--alter", "--add-config", "retention.ms=3600000,cleanup.policy=[compact,delete]")
    assert out.returncode == 0 and out.stdout.strip() == f"Completed updating config for topic {topic}.", out
    out = cli(*t, "--describe")
    assert out.stdout.splitlines() == [
        f"Dynamic configs for topic {topic} are:",
        "  cleanup.policy=compact,delete sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:cleanup.policy=compact,delete, "
        "DEFAULT_CONFIG:log.cleanup.policy=delete}",
        "  retention.ms=3600000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=3600000}",
    ]
    assert cli(*t, "--alter", "--delete-config", "cleanup.policy").returncode == 0
    out = cli(*t, "--describe", "--all")
    assert out.stdout.splitlines()[0] == f"All configs for topic {topic} are:"
    assert "  cleanup.policy=delete sensitive=false synonyms={DEFAULT_CONFIG:log.cleanup.policy=delete}" in out.stdout
    assert_one_line_error(cli(*t, "--alter", "--add-config", "retention.ms=soon"), "retention.ms", "INVALID_CONFIG")
    assert_one_line_error(cli(*bs, "--entity-type", "topics", "--entity-name", "nope-xyz", "--describe"),
                          "does not exist")
    b = [*bs, "--entity-type", "brokers"]
    assert_one_line_error(cli(*b, "--entity-name", broker_id, "--alter", "--add-config", "broker.rack=r1"),
                          "Cannot update these configs dynamically")
    out = cli(*b, "--entity-default", "--alter", "--add-config", "log.cleaner.threads=2")
    assert out.stdout.strip() == "Completed updating default config for brokers in the cluster.", out
    out = cli(*b, "--entity-default", "--describe")
    assert out.stdout.splitlines() == [
        "Default configs for brokers in the cluster are:",
        "  log.cleaner.threads=2 sensitive=false synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:log.cleaner.threads=2}"]
    assert cli(*b, "--entity-default", "--alter", "--delete-config", "log.cleaner.threads").returncode == 0
    out = cli(*b, "--entity-name", broker_id, "--describe", "--all")
    assert "  log.retention.hours=48 sensitive=false synonyms={STATIC_BROKER_CONFIG:log.retention.hours=48, " \
           "DEFAULT_CONFIG:log.retention.hours=168}" in out.stdout
    usage = cli(*t, "--describe", "--alter")
    assert usage.returncode == 2 and "Usage:" in usage.stderr


# ---------------------------------------------------------------- Kafka's whole catalogue


def alter_default(bootstrap: str, ops: dict[str, str | None]) -> tuple[int, str | None]:
    """IncrementalAlterConfigs on the cluster-wide broker default (confluent-kafka cannot name it):
    SET each key to its value, DELETE it for None. Returns (error code, message)."""
    Inc = codec.request_class(44)
    R = Inc.AlterConfigsResource
    configs = [R.AlterableConfig(name=k, config_operation=0 if v is not None else 1, value=v) for k, v in ops.items()]
    resp = raw_default_broker(bootstrap, 44, 1, Inc(resources=[R(resource_type=4, resource_name="", configs=configs)],
                                                    validate_only=False))
    res = resp.responses[0]  # type: ignore[attr-defined]
    return res.error_code, res.error_message


def describe_default(bootstrap: str) -> dict[str, tuple[str | None, int]]:
    """The cluster-wide broker default's configs: name -> (value, source)."""
    D = codec.request_class(32)
    req = D(resources=[D.DescribeConfigsResource(resource_type=4, resource_name="", configuration_keys=None)],
            include_synonyms=False, include_documentation=False)
    resp = raw_default_broker(bootstrap, 32, 4, req)
    return {c.name: (c.value, c.config_source) for c in resp.results[0].configs}  # type: ignore[attr-defined]




def test_kafka_broker_config_kaflet_ignores_is_stored_per_broker(broker: BrokerProcess, admin: AdminClient,
                                                                 broker_id: str) -> None:
    key = "sasl.kerberos.min.time.before.relogin"
    before = describe(admin, BROKER, broker_id)[key]
    assert before.value == "60000" and before.source == ConfigSource.DEFAULT_CONFIG.value and not before.is_read_only
    try:
        incremental(admin, BROKER, broker_id, sasl_kerberos_min_time_before_relogin=(AlterConfigOpType.SET, "120000"))
        entry = describe(admin, BROKER, broker_id)[key]
        assert entry.value == "120000" and entry.source == ConfigSource.DYNAMIC_BROKER_CONFIG.value
        # Type and default over DescribeConfigs v4.
        D = codec.request_class(32)
        req = D(resources=[D.DescribeConfigsResource(resource_type=4, resource_name=broker_id, configuration_keys=[key])],
                include_synonyms=True, include_documentation=False)
        (raw,) = raw_default_broker(broker.bootstrap, 32, 4, req).results[0].configs  # type: ignore[attr-defined]
        assert (raw.value, raw.config_type, raw.config_source, raw.read_only) == ("120000", 5, 2, False)  # LONG
        assert [(s.name, s.value, s.source) for s in raw.synonyms] == [
            (key, "120000", ConfigSource.DYNAMIC_BROKER_CONFIG.value), (key, "60000", ConfigSource.DEFAULT_CONFIG.value)]
        # Setting it again is not logged again: one line per key.
        incremental(admin, BROKER, broker_id, sasl_kerberos_min_time_before_relogin=(AlterConfigOpType.SET, "90000"))
        assert wait(lambda: f"config {key} is a Kafka broker config that kaflet does not act on" in broker.new_log())
        assert broker.new_log().count(f"config {key} is a Kafka broker config") == 1
        # Kafka's DynamicListenerConfig makes it a per-broker config: not at the cluster default.
        code, message = alter_default(broker.bootstrap, {key: "120000"})
        assert code == KafkaError.INVALID_REQUEST
        assert f"Cannot update these configs at default cluster level, broker id must be specified: Set({key})" in message
        assert key not in describe_default(broker.bootstrap)
    finally:
        incremental(admin, BROKER, broker_id, sasl_kerberos_min_time_before_relogin=(AlterConfigOpType.DELETE, None))
    assert describe(admin, BROKER, broker_id)[key].source == ConfigSource.DEFAULT_CONFIG.value


def test_kafka_cluster_wide_config_kaflet_ignores_at_the_default(broker: BrokerProcess, admin: AdminClient,
                                                                 broker_id: str) -> None:
    try:
        assert alter_default(broker.bootstrap, {"max.connections": "1000", "unclean.leader.election.enable": "true"}) == \
            (0, None)
        assert describe_default(broker.bootstrap) == {
            "max.connections": ("1000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value),
            "unclean.leader.election.enable": ("true", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)}
        assert describe(admin, BROKER, broker_id)["max.connections"].value == "1000"
        # The topic config it is the default of follows, as in Kafka.
        topic = new_topic(broker.bootstrap)
        unclean = describe(admin, TOPIC, topic)["unclean.leader.election.enable"]
        assert unclean.value == "true" and unclean.source == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value
    finally:
        assert alter_default(broker.bootstrap, {"max.connections": None, "unclean.leader.election.enable": None})[0] == 0


@pytest.mark.parametrize("key", ["log.dirs", "broker.id", "log.retention.hours"])
def test_read_only_broker_config_gets_kafkas_error(broker: BrokerProcess, admin: AdminClient, broker_id: str,
                                                   key: str) -> None:
    with pytest.raises(KafkaException) as exc:
        incremental(admin, BROKER, broker_id, **{key.replace(".", "_"): (AlterConfigOpType.SET, "5")})
    err = exc.value.args[0]
    assert err.code() == KafkaError.INVALID_REQUEST
    assert f"Cannot update these configs dynamically: Set({key})" in err.str()
    code, message = alter_default(broker.bootstrap, {key: "5"})
    assert code == KafkaError.INVALID_REQUEST and f"Cannot update these configs dynamically: Set({key})" in message


def test_keystore_needs_listener_prefix(admin: AdminClient, broker_id: str) -> None:
    with pytest.raises(KafkaException) as exc:
        incremental(admin, BROKER, broker_id, ssl_keystore_location=(AlterConfigOpType.SET, "/tmp/k.pem"))
    assert exc.value.args[0].code() == KafkaError.INVALID_REQUEST
    assert "only per-listener using the listener prefix: Set(ssl.keystore.location)" in exc.value.args[0].str()


def test_made_up_keys(broker: BrokerProcess, admin: AdminClient, broker_id: str) -> None:
    # A topic: Kafka's LogConfig refuses names it does not know.
    topic = new_topic(broker.bootstrap)
    with pytest.raises(KafkaException) as exc:
        incremental(admin, TOPIC, topic, made_up_key=(AlterConfigOpType.SET, "1"))
    assert exc.value.args[0].code() == KafkaError.INVALID_CONFIG
    assert "Unknown topic config name: made.up.key" in exc.value.args[0].str()
    # A broker: Kafka keeps unknown keys as custom configs (its plugins read them), untyped and so
    # described as sensitive; kaflet has no plugin and says so in its log.
    try:
        incremental(admin, BROKER, broker_id, made_up_key=(AlterConfigOpType.SET, "1"))
        entry = describe(admin, BROKER, broker_id)["made.up.key"]
        assert entry.is_sensitive and entry.value is None and entry.source == ConfigSource.DYNAMIC_BROKER_CONFIG.value
        assert wait(lambda: "The configuration 'made.up.key' was supplied but isn't a known config" in broker.new_log())
        # A wrong value of a Kafka key is refused with Kafka's message.
        with pytest.raises(KafkaException) as exc:
            incremental(admin, BROKER, broker_id, sasl_kerberos_min_time_before_relogin=(AlterConfigOpType.SET, "soon"))
        assert exc.value.args[0].code() == KafkaError.INVALID_CONFIG
        assert ("Invalid value soon for configuration sasl.kerberos.min.time.before.relogin: Not a number of type LONG"
                in exc.value.args[0].str())
    finally:
        incremental(admin, BROKER, broker_id, made_up_key=(AlterConfigOpType.DELETE, None))


def test_topic_configs_kaflet_does_not_enforce(broker: BrokerProcess, admin: AdminClient) -> None:
    topic = new_topic(broker.bootstrap, {"preallocate": "true", "message.downconversion.enable": "false"})
    entries = describe(admin, TOPIC, topic)
    assert entries["preallocate"].value == "true"
    assert entries["preallocate"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert [(s.name, s.source) for s in entries["preallocate"].synonyms.values()] == [
        ("preallocate", ConfigSource.DYNAMIC_TOPIC_CONFIG.value), ("log.preallocate", ConfigSource.DEFAULT_CONFIG.value)]
    assert entries["message.downconversion.enable"].value == "false"
    assert {"local.retention.ms", "remote.storage.enable", "compression.zstd.level",
            "message.timestamp.before.max.ms"} <= set(entries)
    assert entries["local.retention.ms"].value == "-2"
    assert wait(lambda: "topic config preallocate is stored but kaflet does not act on it" in broker.new_log())
    # Kafka's validation, and its refusal of tiered storage on a broker without it.
    incremental(admin, TOPIC, topic, follower_replication_throttled_replicas=(AlterConfigOpType.SET, "0:1"),
                segment_jitter_ms=(AlterConfigOpType.SET, "1000"))
    assert describe(admin, TOPIC, topic)["follower.replication.throttled.replicas"].value == "0:1"
    for key, value, message in [
        ("preallocate", "maybe", "Expected value to be either true or false"),
        ("leader_replication_throttled_replicas", "all", "must be the literal '*'"),
        ("remote_storage_enable", "true", "Tiered Storage functionality is disabled in the broker"),
    ]:
        with pytest.raises(KafkaException) as exc:
            incremental(admin, TOPIC, topic, **{key: (AlterConfigOpType.SET, value)})
        assert exc.value.args[0].code() == KafkaError.INVALID_CONFIG and message in exc.value.args[0].str()


def test_configs_cli_with_kafka_config_kaflet_ignores(broker: BrokerProcess, broker_id: str) -> None:
    b = ["--bootstrap-server", broker.bootstrap, "--timeout", "5", "--entity-type", "brokers", "--entity-name", broker_id]
    key = "sasl.kerberos.min.time.before.relogin"
    try:
        out = cli(*b, "--alter", "--add-config", f"{key}=300000")
        assert out.returncode == 0 and out.stdout.strip() == f"Completed updating config for broker {broker_id}.", out
        out = cli(*b, "--describe")
        assert f"  {key}=300000 sensitive=false synonyms={{DYNAMIC_BROKER_CONFIG:{key}=300000, " \
               f"DEFAULT_CONFIG:{key}=60000}}" in out.stdout.splitlines(), out.stdout
        assert_one_line_error(cli(*b, "--alter", "--add-config", "log.dirs=/elsewhere"),
                              "Cannot update these configs dynamically: Set(log.dirs)")
    finally:
        assert cli(*b, "--alter", "--delete-config", key).returncode == 0


def test_server_properties_kafka_keys_kaflet_ignores(tmp_path: Path) -> None:
    b = BrokerProcess(tmp_path / "data", {"sasl.kerberos.service.name": "kafka", "made.up.key": "1",
                                          "log.preallocate": "true"})
    b.start()
    try:
        log = b.new_log()
        assert "config sasl.kerberos.service.name is a Kafka broker config that kaflet does not act on" in log
        assert "The configuration 'made.up.key' was supplied but isn't a known config." in log
        assert "config log.preallocate is a Kafka broker config that kaflet does not act on: the default of topic " \
               "config preallocate" in log
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        bid = str(next(iter(admin.list_topics(timeout=10).brokers)))
        entries = describe(admin, BROKER, bid)
        kerberos = entries["sasl.kerberos.service.name"]
        assert kerberos.value == "kafka" and kerberos.source == ConfigSource.STATIC_BROKER_CONFIG.value
        assert entries["made.up.key"].is_sensitive and entries["made.up.key"].value is None
        # A broker-level topic default reaches the topics' described configs.
        pre = describe(admin, TOPIC, new_topic(b.bootstrap))["preallocate"]
        assert pre.value == "true" and pre.source == ConfigSource.STATIC_BROKER_CONFIG.value
    finally:
        try:
            b.stop(timeout=20)
        finally:
            b.kill()


def test_server_properties_bad_value_of_kafka_key_is_one_line_error(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "kaflet.cli", "broker", "--override", f"log.dirs={tmp_path}",
         "--override", "listeners=PLAINTEXT://127.0.0.1:0", "--override", "sasl.kerberos.min.time.before.relogin=soon"],
        capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    assert "Invalid value soon for configuration sasl.kerberos.min.time.before.relogin: Not a number of type LONG" \
        in proc.stderr


def test_replication_throttle_configs_validated(broker: BrokerProcess, admin: AdminClient, broker_id: str) -> None:
    """The KIP-73 configs take Kafka's values and refuse others with INVALID_CONFIG."""
    topic = new_topic(broker.bootstrap)
    try:
        incremental(admin, BROKER, broker_id, leader_replication_throttled_rate=(AlterConfigOpType.SET, "1048576"))
        entry = describe(admin, BROKER, broker_id)["leader.replication.throttled.rate"]
        assert (entry.value, entry.source) == ("1048576", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
        for value, message in (("-1", "Value must be at least 0"), ("1MB", "Not a number of type LONG")):
            with pytest.raises(KafkaException) as exc:
                incremental(admin, BROKER, broker_id, follower_replication_throttled_rate=(AlterConfigOpType.SET, value))
            assert exc.value.args[0].code() == KafkaError.INVALID_CONFIG
            assert (f"Invalid value {value} for configuration follower.replication.throttled.rate: {message}"
                    in exc.value.args[0].str())
        incremental(admin, TOPIC, topic, leader_replication_throttled_replicas=(AlterConfigOpType.SET, "*"))
        for value in ("0:1,all", "0;1"):
            with pytest.raises(KafkaException) as exc:
                incremental(admin, TOPIC, topic, leader_replication_throttled_replicas=(AlterConfigOpType.SET, value))
            assert exc.value.args[0].code() == KafkaError.INVALID_CONFIG
        assert describe(admin, TOPIC, topic)["leader.replication.throttled.replicas"].value == "*"
    finally:
        incremental(admin, BROKER, broker_id, leader_replication_throttled_rate=(AlterConfigOpType.DELETE, None))
