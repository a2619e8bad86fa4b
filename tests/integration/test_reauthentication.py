"""SASL re-authentication (KIP-368) against a real broker process: with connections.max.reauth.ms
set, an authenticated session gets that lifetime; a client re-authenticates on the same
connection before it ends, as the same principal and with the same mechanism, or the broker
closes the connection at its next request after the session expired. librdkafka re-authenticates
by itself and never notices.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer

from kaflet.protocol import codec
from kaflet.protocol.api_keys import ApiKey
from kaflet.protocol.errors import ErrorCode
from tests.support.broker_process import BrokerProcess, running_broker
from tests.support.manager import wait_for
from tests.support.raw_client import RawClient
from tests.support.topics import create_topic

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
        'password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";')
LIFETIME_MS = 2000
EXPIRED = "expired without re-authentication"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with running_broker(tmp_path_factory.mktemp("reauth") / "data", {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        # The broker-wide value, and the per-mechanism override PLAIN sessions get.
        "connections.max.reauth.ms": "60000",
        "listener.name.sasl_plaintext.plain.connections.max.reauth.ms": str(LIFETIME_MS),
        "group.initial.rebalance.delay.ms": "0",
    }) as b:
        yield b


def plain_token(user: str, password: str) -> bytes:
    return f"\0{user}\0{password}".encode()


def handshake(client: RawClient, mechanism: str = "PLAIN") -> Any:
    return client.request(ApiKey.SASL_HANDSHAKE, 1, codec.request_class(ApiKey.SASL_HANDSHAKE)(mechanism=mechanism))


def authenticate(client: RawClient, token: bytes, version: int = 2) -> Any:
    return client.request(ApiKey.SASL_AUTHENTICATE, version,
                          codec.request_class(ApiKey.SASL_AUTHENTICATE)(auth_bytes=token))


def log_in(broker: BrokerProcess, user: str = "alice", password: str = "alice-secret") -> tuple[RawClient, Any]:
    client = RawClient(broker.bootstrap_for("SASL_PLAINTEXT"))
    assert handshake(client).error_code == ErrorCode.NONE
    answer = authenticate(client, plain_token(user, password))
    assert answer.error_code == ErrorCode.NONE, answer.error_message
    return client, answer


def metadata_ok(client: RawClient) -> bool:
    return client.request(ApiKey.METADATA, 1, codec.request_class(ApiKey.METADATA)(topics=None)).brokers is not None


def test_session_lifetime_and_expiry(broker: BrokerProcess) -> None:
    client, answer = log_in(broker)
    try:
        assert answer.session_lifetime_ms == LIFETIME_MS
        assert metadata_ok(client)
        mark = len(broker.new_log())
        time.sleep(LIFETIME_MS / 1000 + 0.5)
        # Past the lifetime any request but a re-authentication closes the connection.
        client.send_raw(client.frame(ApiKey.METADATA, 1, bytes(
            codec.request_class(ApiKey.METADATA)(topics=None).encode(version=1))))
        assert client.is_closed_by_peer()
        wait_for(lambda: EXPIRED in broker.new_log()[mark:])
    finally:
        client.close()


def test_reauthentication_extends_the_session(broker: BrokerProcess) -> None:
    client, _ = log_in(broker)
    try:
        time.sleep(LIFETIME_MS / 1000 * 0.6)
        assert handshake(client).error_code == ErrorCode.NONE
        again = authenticate(client, plain_token("alice", "alice-secret"))
        assert (again.error_code, again.session_lifetime_ms) == (ErrorCode.NONE, LIFETIME_MS)
        # A second start within a second of the last is an ordinary (refused) handshake.
        assert handshake(client).error_code == ErrorCode.ILLEGAL_SASL_STATE
        # Past the first session's end, within the new one: still served.
        time.sleep(LIFETIME_MS / 1000 * 0.6)
        assert metadata_ok(client)
    finally:
        client.close()


@pytest.mark.parametrize(("mechanism", "token", "message"), [
    ("PLAIN", plain_token("admin", "admin-secret"),
     "Cannot change principals during re-authentication from User:alice: User:admin"),
    ("SCRAM-SHA-256", b"n,,n=alice,r=abcdefgh", "not supported for re-authentication of mechanism 'PLAIN'"),
    ("PLAIN", plain_token("alice", "nope"), "Invalid username or password"),  # a wrong password fails it too
])
def test_reauthentication_may_not_change_principal_or_mechanism(broker: BrokerProcess, mechanism: str,
                                                                  token: bytes, message: str) -> None:
    client, _ = log_in(broker)
    try:
        assert handshake(client, mechanism).error_code == ErrorCode.NONE
        answer = authenticate(client, token)
        assert answer.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
        assert message in answer.error_message
        assert client.is_closed_by_peer()
    finally:
        client.close()


def test_without_a_lifetime_there_is_no_reauthentication(tmp_path: Path) -> None:
    with running_broker(tmp_path / "data", {
        "listeners": "SASL_PLAINTEXT://127.0.0.1:0", "listener.security.protocol.map": "SASL_PLAINTEXT:SASL_PLAINTEXT",
        "security.inter.broker.protocol": "SASL_PLAINTEXT", "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "sasl.enabled.mechanisms": "PLAIN", "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
    }) as b:
        client, answer = log_in(b)
        try:
            assert answer.session_lifetime_ms == 0
            assert handshake(client).error_code == ErrorCode.ILLEGAL_SASL_STATE
            assert metadata_ok(client)
        finally:
            client.close()


class Capture(logging.Handler):
    """Keeps librdkafka's log lines (emit runs under the handler's own lock)."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def test_librdkafka_reauthenticates_without_interruption(broker: BrokerProcess) -> None:
    create_topic(broker.bootstrap, "reauth-steady", partitions=1)
    capture = Capture()
    logger = logging.getLogger("librdkafka-reauth")
    logger.addHandler(capture)
    logger.setLevel(logging.DEBUG)
    conf = {"bootstrap.servers": broker.bootstrap_for("SASL_PLAINTEXT"), "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN", "sasl.username": "alice", "sasl.password": "alice-secret",
            "logger": logger, "debug": "security"}
    mark = len(broker.new_log())
    producer = Producer({**conf, "linger.ms": 5})
    consumer = Consumer({**conf, "group.id": "reauth-readers", "auto.offset.reset": "earliest"})
    consumer.subscribe(["reauth-steady"])
    delivered: list[Any] = []
    got = 0
    try:
        deadline = time.monotonic() + 4 * LIFETIME_MS / 1000
        i = 0
        while time.monotonic() < deadline:
            producer.produce("reauth-steady", str(i).encode(), on_delivery=lambda err, _m: delivered.append(err))
            producer.poll(0)
            msg = consumer.poll(0.05)
            if msg is not None and msg.error() is None:
                got += 1
            i += 1
        assert producer.flush(20) == 0
        while got < i:
            msg = consumer.poll(5)
            assert msg is not None, f"read {got} of {i}"
            if msg.error() is None:
                got += 1
    finally:
        consumer.close()
        logger.removeHandler(capture)
    assert len(delivered) == i and all(err is None for err in delivered)
    assert got == i
    lines = list(capture.lines)
    # librdkafka started re-authenticating on its own (it does at 85-95% of the lifetime)...
    assert any("reauth" in line.lower() for line in lines), lines[-20:]
    # ...and the broker closed none of its connections for an expired session.
    assert EXPIRED not in broker.new_log()[mark:]
