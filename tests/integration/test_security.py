"""TLS and SASL listeners with real clients (confluent-kafka, kafka-python) and hostile peers."""

from __future__ import annotations

import logging
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)

from kaflet.protocol import codec
from kaflet.protocol.api_keys import ApiKey
from kaflet.protocol.errors import ErrorCode
from tests.support.broker_process import BrokerProcess
from tests.support.certs import Pki, make_pki
from tests.support.raw_client import RawClient
from tests.support.secured import CREDENTIALS, SCRAM_USERS, secured_overrides
from tests.support.topics import create_topic

AUTH_TIMEOUT_S = 3


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[BrokerProcess]:
    """One broker with every security protocol, plus a client-auth TLS listener (MTLS)."""
    broker = BrokerProcess(tmp_path_factory.mktemp("secured") / "data", {
        **secured_overrides(pki),
        # the deadline for unauthenticated connections is min(this, 10 s)
        "connections.max.idle.ms": str(AUTH_TIMEOUT_S * 1000),
        "group.initial.rebalance.delay.ms": "0",
    })
    broker.start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        futures = admin.alter_user_scram_credentials([
            UserScramCredentialUpsertion(user, ScramCredentialInfo(getattr(ScramMechanism, mech.replace("-", "_")), 4096),
                                         password.encode())
            for mech, (user, password) in SCRAM_USERS.items()])
        for f in futures.values():
            f.result(15)
        yield broker
    finally:
        try:
            broker.stop(timeout=20)
        finally:
            broker.kill()


def _sasl_conf(broker: BrokerProcess, mechanism: str, *, tls: bool = False, pki: Pki | None = None,
               user: str | None = None, password: str | None = None) -> dict[str, Any]:
    u, p = CREDENTIALS[mechanism]
    conf: dict[str, Any] = {
        "bootstrap.servers": broker.bootstrap_for("SASL_SSL" if tls else "SASL_PLAINTEXT"),
        "security.protocol": "SASL_SSL" if tls else "SASL_PLAINTEXT",
        "sasl.mechanism": mechanism, "sasl.username": user or u, "sasl.password": password or p,
    }
    if tls:
        assert pki is not None
        conf["ssl.ca.location"] = str(pki.ca)
    return conf


def _confluent_round_trip(conf: dict[str, Any], topic: str, bootstrap: str) -> None:
    create_topic(bootstrap, topic)
    errors: list[Any] = []
    producer = Producer({**conf, "error_cb": errors.append})
    delivered: list[Any] = []
    for i in range(5):
        producer.produce(topic, f"v{i}".encode(), on_delivery=lambda err, msg: delivered.append(err))
    assert producer.flush(20) == 0
    assert delivered == [None] * 5, delivered
    consumer = Consumer({**conf, "group.id": f"g-{topic}", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    values = []
    deadline = time.monotonic() + 20
    while len(values) < 5 and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and not msg.error():
            values.append(msg.value())
    consumer.close()
    assert values == [f"v{i}".encode() for i in range(5)]
    assert not errors, errors


def _kafka_python_round_trip(conf: dict[str, Any], topic: str, bootstrap: str) -> None:
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KTP

    create_topic(bootstrap, topic)
    producer = KafkaProducer(**conf)
    for i in range(3):
        producer.send(topic, f"k{i}".encode()).get(timeout=20)
    producer.close()
    consumer = KafkaConsumer(**conf, enable_auto_commit=False, consumer_timeout_ms=10000)
    consumer.assign([KTP(topic, 0)])
    consumer.seek(KTP(topic, 0), 0)
    values = []
    for msg in consumer:
        values.append(msg.value)
        if len(values) == 3:
            break
    consumer.close()
    assert values == [b"k0", b"k1", b"k2"]


# -- SASL_PLAINTEXT and SASL_SSL -----------------------------------------------------------------


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_confluent_sasl_plaintext(secured: BrokerProcess, mechanism: str) -> None:
    _confluent_round_trip(_sasl_conf(secured, mechanism), f"sasl-ck-{mechanism.lower()}", secured.bootstrap)


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_kafka_python_sasl_plaintext(secured: BrokerProcess, mechanism: str) -> None:
    user, password = CREDENTIALS[mechanism]
    conf = {"bootstrap_servers": secured.bootstrap_for("SASL_PLAINTEXT"), "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": mechanism, "sasl_plain_username": user, "sasl_plain_password": password}
    _kafka_python_round_trip(conf, f"sasl-kp-{mechanism.lower()}", secured.bootstrap)


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
def test_sasl_ssl(secured: BrokerProcess, pki: Pki, mechanism: str) -> None:
    _confluent_round_trip(_sasl_conf(secured, mechanism, tls=True, pki=pki), f"saslssl-ck-{mechanism.lower()}",
                          secured.bootstrap)
    user, password = CREDENTIALS[mechanism]
    conf = {"bootstrap_servers": secured.bootstrap_for("SASL_SSL"), "security_protocol": "SASL_SSL",
            "sasl_mechanism": mechanism, "sasl_plain_username": user, "sasl_plain_password": password,
            "ssl_cafile": str(pki.ca)}
    _kafka_python_round_trip(conf, f"saslssl-kp-{mechanism.lower()}", secured.bootstrap)


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_wrong_password_is_refused(secured: BrokerProcess, mechanism: str) -> None:
    errors: list[KafkaError] = []
    producer = Producer({**_sasl_conf(secured, mechanism, password="wrong"), "error_cb": errors.append})
    producer.produce("never", b"x")
    deadline = time.monotonic() + 15
    while not any(e.code() == KafkaError._AUTHENTICATION for e in errors) and time.monotonic() < deadline:
        producer.poll(0.2)
    assert any(e.code() == KafkaError._AUTHENTICATION for e in errors), errors
    assert any("SASL_AUTHENTICATION_FAILED" in e.str() or "Authentication failed" in e.str() for e in errors), errors
    producer.purge()
    # and the password is nowhere in the broker's log
    assert "wrong" not in secured.new_log().replace("wrong password", "")
    assert "alice-secret" not in secured.new_log()


def test_kafka_python_wrong_password(secured: BrokerProcess, caplog: pytest.LogCaptureFixture) -> None:
    from kafka import KafkaProducer
    from kafka.errors import KafkaError as KPError

    caplog.set_level(logging.WARNING, logger="kafka")
    with pytest.raises(KPError):
        KafkaProducer(bootstrap_servers=secured.bootstrap_for("SASL_PLAINTEXT"), security_protocol="SASL_PLAINTEXT",
                      sasl_mechanism="SCRAM-SHA-256", sasl_plain_username="scram256", sasl_plain_password="nope",
                      bootstrap_timeout_ms=3000)
    # kafka-python retries the bootstrap, logging the broker's answer each time
    assert "SaslAuthenticationFailedError" in caplog.text
    assert "invalid credentials with SASL mechanism SCRAM-SHA-256" in caplog.text


def test_scram_user_added_and_removed_at_run_time(secured: BrokerProcess) -> None:
    admin = AdminClient({"bootstrap.servers": secured.bootstrap})
    mech = ScramMechanism.SCRAM_SHA_256
    for f in admin.alter_user_scram_credentials(
            [UserScramCredentialUpsertion("carol", ScramCredentialInfo(mech, 8192), b"carol-secret")]).values():
        f.result(15)
    described = {u: f.result(15) for u, f in admin.describe_user_scram_credentials(["carol"]).items()}
    info = described["carol"].scram_credential_infos
    assert [(i.mechanism, i.iterations) for i in info] == [(mech, 8192)]
    conf = _sasl_conf(secured, "SCRAM-SHA-256", user="carol", password="carol-secret")
    _confluent_round_trip(conf, "runtime-user", secured.bootstrap)
    # Kafka's errors for bad requests
    bad = admin.alter_user_scram_credentials([
        UserScramCredentialUpsertion("dave", ScramCredentialInfo(mech, 100), b"x"),
        UserScramCredentialDeletion("erin", ScramMechanism.SCRAM_SHA_512)])
    with pytest.raises(Exception, match="Too few iterations"):
        bad["dave"].result(15)
    with pytest.raises(Exception, match="does not exist"):
        bad["erin"].result(15)
    # deleting the credential locks the user out without a restart
    for f in admin.alter_user_scram_credentials([UserScramCredentialDeletion("carol", mech)]).values():
        f.result(15)
    errors: list[KafkaError] = []
    producer = Producer({**conf, "error_cb": errors.append})
    deadline = time.monotonic() + 15
    while not any(e.code() == KafkaError._AUTHENTICATION for e in errors) and time.monotonic() < deadline:
        producer.poll(0.2)
    assert any(e.code() == KafkaError._AUTHENTICATION for e in errors), errors


# -- TLS -----------------------------------------------------------------------------------------


def test_ssl_without_client_auth(secured: BrokerProcess, pki: Pki) -> None:
    conf = {"bootstrap.servers": secured.bootstrap_for("SSL"), "security.protocol": "SSL",
            "ssl.ca.location": str(pki.ca)}
    _confluent_round_trip(conf, "ssl-ck", secured.bootstrap)
    kp = {"bootstrap_servers": secured.bootstrap_for("SSL"), "security_protocol": "SSL", "ssl_cafile": str(pki.ca)}
    _kafka_python_round_trip(kp, "ssl-kp", secured.bootstrap)


def test_ssl_with_client_auth(secured: BrokerProcess, pki: Pki) -> None:
    conf = {"bootstrap.servers": secured.bootstrap_for("MTLS"), "security.protocol": "SSL",
            "ssl.ca.location": str(pki.ca), "ssl.certificate.location": str(pki.client_cert),
            "ssl.key.location": str(pki.client_key)}
    _confluent_round_trip(conf, "mtls-ck", secured.bootstrap)
    kp = {"bootstrap_servers": secured.bootstrap_for("MTLS"), "security_protocol": "SSL", "ssl_cafile": str(pki.ca),
          "ssl_certfile": str(pki.client_cert), "ssl_keyfile": str(pki.client_key)}
    _kafka_python_round_trip(kp, "mtls-kp", secured.bootstrap)
    # Without a client certificate the handshake is refused and nothing is served.
    errors: list[KafkaError] = []
    producer = Producer({"bootstrap.servers": secured.bootstrap_for("MTLS"), "security.protocol": "SSL",
                         "ssl.ca.location": str(pki.ca), "error_cb": errors.append})
    deadline = time.monotonic() + 10
    while not errors and time.monotonic() < deadline:
        producer.poll(0.2)
    assert errors and all(e.code() in (KafkaError._SSL, KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN)
                          for e in errors), errors


def test_large_fetch_over_tls(secured: BrokerProcess, pki: Pki) -> None:
    """Fetch data goes through TLS (no sendfile) intact, also for responses larger than one TLS record."""
    conf = {"bootstrap.servers": secured.bootstrap_for("SSL"), "security.protocol": "SSL",
            "ssl.ca.location": str(pki.ca)}
    create_topic(secured.bootstrap, "ssl-large")
    producer = Producer({**conf, "linger.ms": 50})
    payloads = [bytes([i % 251]) * 300_000 for i in range(8)]
    for p in payloads:
        producer.produce("ssl-large", p)
    assert producer.flush(20) == 0
    consumer = Consumer({**conf, "group.id": "g-large", "fetch.max.bytes": 4_000_000})
    consumer.assign([TopicPartition("ssl-large", 0, 0)])
    got = []
    deadline = time.monotonic() + 20
    while len(got) < len(payloads) and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and not msg.error():
            got.append(msg.value())
    consumer.close()
    assert got == payloads


# -- hostile and broken peers --------------------------------------------------------------------


def _handshake(client: RawClient, mechanism: str = "PLAIN", version: int = 1) -> Any:
    req = codec.request_class(ApiKey.SASL_HANDSHAKE)(mechanism=mechanism)
    return client.request(ApiKey.SASL_HANDSHAKE, version, req)


def _authenticate(client: RawClient, token: bytes, version: int = 2) -> Any:
    req = codec.request_class(ApiKey.SASL_AUTHENTICATE)(auth_bytes=token)
    return client.request(ApiKey.SASL_AUTHENTICATE, version, req)


def _metadata_request(client: RawClient) -> bytes:
    return client.frame(ApiKey.METADATA, 1, bytes(codec.request_class(ApiKey.METADATA)(topics=None).encode(version=1)))


class _BackgroundProducer:
    """An authenticated producer that keeps producing while the hostile tests run."""

    def __init__(self, broker: BrokerProcess) -> None:
        create_topic(broker.bootstrap, "steady")
        self.errors: list[Any] = []
        self.delivered = 0
        self.failed: list[Any] = []
        self.producer = Producer({**_sasl_conf(broker, "SCRAM-SHA-512"), "error_cb": self.errors.append,
                                  "linger.ms": 5})
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _on_delivery(self, err: Any, _msg: Any) -> None:
        if err is None:
            self.delivered += 1
        else:
            self.failed.append(err)

    def _run(self) -> None:
        i = 0
        while not self._stop.is_set():
            self.producer.produce("steady", str(i).encode(), on_delivery=self._on_delivery)
            self.producer.poll(0.02)
            i += 1

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        assert self.producer.flush(20) == 0


def test_hostile_sasl_peers(secured: BrokerProcess) -> None:
    steady = _BackgroundProducer(secured)
    sasl = secured.bootstrap_for("SASL_PLAINTEXT")
    try:
        # 1. a request other than ApiVersions/SaslHandshake before authentication: closed
        c = RawClient(sasl)
        c.send_raw(_metadata_request(c))
        assert c.is_closed_by_peer()
        c.close()

        # 2. garbage instead of a Kafka request: closed
        c = RawClient(sasl)
        c.send_raw(struct.pack(">i", 12) + b"\x60garbage!!!!")
        assert c.is_closed_by_peer()
        c.close()

        # 3. an oversized token (larger than sasl.server.max.receive.size): closed before reading it
        c = RawClient(sasl)
        assert _handshake(c).error_code == 0
        c.send_raw(struct.pack(">i", 50_000_000) + b"\x00" * 1024)
        assert c.is_closed_by_peer()
        c.close()

        # 4. garbage in the SASL exchange: SASL_AUTHENTICATION_FAILED after the delay, then closed
        for mechanism, token in (("PLAIN", b"\xff\x00\x01garbage"), ("SCRAM-SHA-256", b"n,,garbage"),
                                 ("SCRAM-SHA-512", b"\x00" * 4000)):
            c = RawClient(sasl)
            assert _handshake(c, mechanism).error_code == 0
            started = time.monotonic()
            resp = _authenticate(c, token)
            assert resp.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
            assert "Authentication failed" in resp.error_message
            assert time.monotonic() - started >= 0.09  # connection.failed.authentication.delay.ms=100
            assert c.is_closed_by_peer()
            c.close()

        # 5. a mechanism that is not enabled (or not implemented): the list of enabled ones, then closed
        c = RawClient(sasl)
        resp = _handshake(c, "GSSAPI")
        assert resp.error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM
        assert list(resp.mechanisms) == ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
        assert c.is_closed_by_peer()
        c.close()

        # 6. a client that stops mid-handshake is dropped at the deadline; so is a silent TLS client
        stalled = RawClient(sasl)
        assert _handshake(stalled, "SCRAM-SHA-256").error_code == 0
        silent = socket.create_connection(("127.0.0.1", secured.ports["SSL"]))
        silent.sendall(b"\x16\x03\x01")  # the first bytes of a ClientHello, then nothing
        started = time.monotonic()
        assert stalled.is_closed_by_peer(timeout=AUTH_TIMEOUT_S + 10)
        # At the deadline, min(connections.max.idle.ms, 10 s): well before the 10 s it would be
        # if connections.max.idle.ms were ignored, with 6 s to spare for a busy machine.
        assert time.monotonic() - started < AUTH_TIMEOUT_S + 6
        silent.settimeout(AUTH_TIMEOUT_S + 10)
        assert silent.recv(1) == b""
        stalled.close()
        silent.close()

        # 7. the legacy exchange: SaslHandshake v0, then a raw PLAIN token, then normal requests
        c = RawClient(sasl)
        assert _handshake(c, "PLAIN", version=0).error_code == 0
        token = b"\x00alice\x00alice-secret"
        c.send_raw(struct.pack(">i", len(token)) + token)
        assert c.read_frame() == b""
        c.send_raw(_metadata_request(c))
        assert len(c.read_frame()) > 8
        c.close()

        # 8. a raw token with the wrong password: closed without an answer
        c = RawClient(sasl)
        assert _handshake(c, "PLAIN", version=0).error_code == 0
        token = b"\x00alice\x00nope"
        c.send_raw(struct.pack(">i", len(token)) + token)
        assert c.is_closed_by_peer(timeout=2)
        c.close()

        # 9. SaslHandshake on a plain listener, or after authentication: ILLEGAL_SASL_STATE
        c = RawClient(secured.bootstrap)
        assert _handshake(c).error_code == ErrorCode.ILLEGAL_SASL_STATE
        c.close()
    finally:
        steady.stop()
    assert steady.delivered > 0 and not steady.failed, steady.failed
    assert not [e for e in steady.errors if e.code() != KafkaError._TRANSPORT], steady.errors


# -- start-up errors ----------------------------------------------------------------------------


@pytest.mark.parametrize("overrides, key", [
    ({"listeners": "SSL://127.0.0.1:0", "ssl.keystore.location": "/nonexistent.pem"}, "ssl.keystore.location"),
    ({"listeners": "SSL://127.0.0.1:0", "ssl.keystore.type": "JKS", "ssl.keystore.location": "/x.jks"},
     "ssl.keystore.type"),
    ({"listeners": "SASL_PLAINTEXT://127.0.0.1:0"}, "sasl.enabled.mechanisms"),
    ({"listeners": "SASL_PLAINTEXT://127.0.0.1:0", "sasl.enabled.mechanisms": "PLAIN"},
     "listener.name.sasl_plaintext.plain.sasl.jaas.config"),
])
def test_bad_security_config_is_one_startup_line(tmp_path: Path, overrides: dict[str, str], key: str) -> None:
    broker = BrokerProcess(tmp_path / "data", overrides)
    try:
        with pytest.raises(RuntimeError) as info:
            broker.start(timeout=20)
    finally:
        broker.kill()
    errors = [line for line in str(info.value).splitlines() if key in line]
    assert errors, str(info.value)


# -- the command-line tools against a secured broker --------------------------------------------


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([sys.executable, "-m", "kaflet.cli", *args], capture_output=True, timeout=60)
    return subprocess.CompletedProcess(proc.args, proc.returncode, proc.stdout.decode(), proc.stderr.decode())


def test_cli_users_and_command_config(secured: BrokerProcess, pki: Pki, tmp_path: Path) -> None:
    # A Java-style client.properties: SASL_SSL, PLAIN through sasl.jaas.config, a PEM truststore.
    admin_props = tmp_path / "admin.properties"
    admin_props.write_text(
        "security.protocol=SASL_SSL\nsasl.mechanism=PLAIN\n"
        'sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required '
        'username="admin" password="admin-secret";\n'
        f"ssl.truststore.type=PEM\nssl.truststore.location={pki.ca}\n")
    sasl_ssl = secured.bootstrap_for("SASL_SSL")
    out = _cli("configs", "--bootstrap-server", sasl_ssl, "--command-config", str(admin_props), "--alter",
               "--entity-type", "users", "--entity-name", "frank",
               "--add-config", "SCRAM-SHA-256=[iterations=8192,password=frank-secret],SCRAM-SHA-512=[password=f512]")
    assert out.returncode == 0, out.stderr
    assert "Completed updating config for user frank." in out.stdout
    out = _cli("configs", "--bootstrap-server", sasl_ssl, "--command-config", str(admin_props), "--describe",
               "--entity-type", "users", "--entity-name", "frank")
    assert out.returncode == 0, out.stderr
    assert ("SCRAM credential configs for user-principal 'frank' are "
            "SCRAM-SHA-256=iterations=8192, SCRAM-SHA-512=iterations=4096") in out.stdout
    out = _cli("configs", "--bootstrap-server", sasl_ssl, "--command-config", str(admin_props), "--describe",
               "--entity-type", "users")
    assert "'frank'" in out.stdout and "'scram256'" in out.stdout, out.stdout + out.stderr

    # The new user logs in with librdkafka's own property names, over SASL_PLAINTEXT.
    create_topic(secured.bootstrap, "cli-visible")
    frank_props = tmp_path / "frank.properties"
    frank_props.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-256\n"
                           "sasl.username=frank\nsasl.password=frank-secret\n")
    out = _cli("topics", "--bootstrap-server", secured.bootstrap_for("SASL_PLAINTEXT"),
               "--command-config", str(frank_props), "--list")
    assert out.returncode == 0 and "cli-visible" in out.stdout.split(), out.stderr

    out = _cli("configs", "--bootstrap-server", sasl_ssl, "--command-config", str(admin_props), "--alter",
               "--entity-type", "users", "--entity-name", "frank", "--delete-config", "SCRAM-SHA-256")
    assert out.returncode == 0, out.stderr
    out = _cli("configs", "--bootstrap-server", sasl_ssl, "--command-config", str(admin_props), "--alter",
               "--entity-type", "users", "--entity-name", "frank", "--delete-config", "SCRAM-SHA-256")
    assert out.returncode != 0 and "does not exist" in out.stderr, out.stderr
    out = _cli("topics", "--bootstrap-server", secured.bootstrap_for("SASL_PLAINTEXT"),
               "--command-config", str(frank_props), "--list", "--timeout", "5")
    assert out.returncode != 0 and out.stderr.startswith("Error:"), out.stdout + out.stderr


def _configs(bootstrap: str, props: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return _cli("configs", "--bootstrap-server", bootstrap, "--command-config", str(props), *args)


@pytest.mark.parametrize("protocol", ["SASL_SSL", "SSL"])
def test_cli_configs_raw_requests_over_secured_listeners(secured: BrokerProcess, pki: Pki, tmp_path: Path,
                                                         protocol: str) -> None:
    # DescribeConfigs with synonyms, the cluster-wide broker default and the ClientQuotas requests
    # go over kaflet's own connection, which must do TLS and SCRAM as --command-config says.
    user, password = SCRAM_USERS["SCRAM-SHA-512"]
    props = tmp_path / "client.properties"
    text = f"security.protocol={protocol}\nssl.truststore.type=PEM\nssl.truststore.location={pki.ca}\n"
    if protocol == "SASL_SSL":
        text += ("sasl.mechanism=SCRAM-SHA-512\nsasl.jaas.config=org.apache.kafka.common.security.scram."
                 f'ScramLoginModule required username="{user}" password="{password}";\n')
    props.write_text(text)
    bootstrap = secured.bootstrap_for(protocol)
    topic = f"raw-{protocol.lower()}"
    create_topic(secured.bootstrap, topic)

    out = _configs(bootstrap, props, "--alter", "--entity-type", "topics", "--entity-name", topic,
                   "--add-config", "retention.ms=98765")
    assert out.returncode == 0, out.stderr
    out = _configs(bootstrap, props, "--describe", "--entity-type", "topics", "--entity-name", topic)
    assert out.returncode == 0, out.stderr
    assert f"Dynamic configs for topic {topic} are:" in out.stdout
    assert "retention.ms=98765 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=98765" in out.stdout

    value = "1234" if protocol == "SSL" else "4321"
    out = _configs(bootstrap, props, "--alter", "--entity-type", "brokers", "--entity-default",
                   "--add-config", f"log.retention.ms={value}")
    assert out.returncode == 0, out.stderr
    assert "Completed updating default config for brokers in the cluster." in out.stdout
    out = _configs(bootstrap, props, "--describe", "--entity-type", "brokers", "--entity-default")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("Default configs for brokers in the cluster are:")
    assert f"log.retention.ms={value} sensitive=false synonyms={{DYNAMIC_DEFAULT_BROKER_CONFIG:log.retention.ms={value}}}" \
        in out.stdout, out.stdout

    client = f"app-{protocol.lower()}"
    out = _configs(bootstrap, props, "--alter", "--entity-type", "clients", "--entity-name", client,
                   "--add-config", "producer_byte_rate=1048576")
    assert out.returncode == 0, out.stderr
    assert f"Completed updating config for client {client}." in out.stdout
    out = _configs(bootstrap, props, "--describe", "--entity-type", "clients", "--entity-name", client)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"Quota configs for client-id '{client}' are producer_byte_rate=1048576.0"

    # The same requests, over PLAINTEXT, see what was written over the secured listener.
    out = _cli("configs", "--bootstrap-server", secured.bootstrap, "--describe", "--entity-type", "clients",
               "--entity-name", client)
    assert out.stdout.strip() == f"Quota configs for client-id '{client}' are producer_byte_rate=1048576.0"
    out = _configs(bootstrap, props, "--alter", "--entity-type", "brokers", "--entity-default",
                   "--delete-config", "log.retention.ms")
    assert out.returncode == 0, out.stderr


def test_cli_configs_raw_requests_refused(secured: BrokerProcess, pki: Pki, tmp_path: Path) -> None:
    user, _ = SCRAM_USERS["SCRAM-SHA-512"]
    wrong = tmp_path / "wrong.properties"
    wrong.write_text(f"security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\nssl.ca.location={pki.ca}\n"
                     f"sasl.username={user}\nsasl.password=not-the-password\n")
    for args in (["--describe", "--entity-type", "topics", "--entity-name", "anything"],
                 ["--describe", "--entity-type", "brokers", "--entity-default"],
                 ["--alter", "--entity-type", "clients", "--entity-name", "app",
                  "--add-config", "producer_byte_rate=1048576"]):
        out = _configs(secured.bootstrap_for("SASL_SSL"), wrong, *args, "--timeout", "5")
        assert out.returncode != 0 and out.stdout == "", out.stdout + out.stderr
        assert out.stderr.count("\n") == 1 and out.stderr.startswith("Error: "), out.stderr
        assert ("Authentication failed during authentication due to invalid credentials with SASL mechanism "
                "SCRAM-SHA-512 (SASL_AUTHENTICATION_FAILED)") in out.stderr, out.stderr

    # A broker certificate signed by a CA the client does not trust: the TLS reason, one line.
    other = make_pki(tmp_path / "other-pki")
    untrusted = tmp_path / "untrusted.properties"
    untrusted.write_text(f"security.protocol=SSL\nssl.ca.location={other.ca}\n")
    out = _configs(secured.bootstrap_for("SSL"), untrusted, "--describe", "--entity-type", "brokers",
                   "--entity-default", "--timeout", "5")
    assert out.returncode != 0 and out.stderr.count("\n") == 1, out.stderr
    assert out.stderr.startswith("Error: TLS handshake with") and "certificate verify failed" in out.stderr, out.stderr


def test_cli_configs_raw_requests_with_plain_over_sasl_plaintext(secured: BrokerProcess, tmp_path: Path) -> None:
    props = tmp_path / "plain.properties"
    props.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
                     "sasl.username=alice\nsasl.password=alice-secret\n")
    bootstrap = secured.bootstrap_for("SASL_PLAINTEXT")
    out = _configs(bootstrap, props, "--alter", "--entity-type", "clients", "--entity-default",
                   "--add-config", "consumer_byte_rate=2048")
    assert out.returncode == 0, out.stderr
    out = _configs(bootstrap, props, "--describe", "--entity-type", "clients", "--entity-default")
    assert out.stdout.strip() == "Quota configs for the default client-id are consumer_byte_rate=2048.0", out.stderr
    out = _configs(bootstrap, props, "--alter", "--entity-type", "clients", "--entity-default",
                   "--delete-config", "consumer_byte_rate")
    assert out.returncode == 0, out.stderr
    props.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
                     "sasl.username=alice\nsasl.password=wrong\n")
    out = _configs(bootstrap, props, "--describe", "--entity-type", "clients", "--entity-default")
    assert out.returncode != 0 and out.stderr.count("\n") == 1 and out.stderr.startswith("Error: "), out.stderr
    assert "(SASL_AUTHENTICATION_FAILED)" in out.stderr, out.stderr
