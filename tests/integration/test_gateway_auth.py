"""Gateway authentication and authorization with real clients, from a Logi-Kafka style config.

One broker configured as the seed's server.properties configures Logi-Kafka (its class names for
the authorizer and the login module, cluster.id, max.sessions.per.user) plus the static default
users and ACLs, on the security tests' listeners (PLAINTEXT, SASL_PLAINTEXT, SASL_SSL, SSL). Clients log in as
``<clusterId>.<appId>``; confluent-kafka, kafka-python and aiokafka are used.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer

from kaflet.protocol import codec
from kaflet.protocol.api_keys import ApiKey
from kaflet.protocol.errors import ErrorCode
from kaflet.security.sasl_client import SaslRejectedError, run_blocking, sasl_exchange
from tests.support.broker_process import BrokerProcess, running_broker
from tests.support.certs import Pki, make_pki
from tests.support.raw_client import RawClient
from tests.support.secured import secured_overrides
from tests.support.topics import create_topic

LOGIN_MODULE = "com.didichuxing.datachannel.kafka.security.sasl.plain.PlainLoginModule"
JAAS = f'{LOGIN_MODULE} required username="admin" password="admin-secret";'
MAX_SESSIONS = 3
TOPIC = "test_0"
PASSWORDS = {"test_user": "12345", "reader": "r-pw", "wide": "w-pw", "limited": "l-pw", "ops": "ops-pw"}


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[BrokerProcess]:
    root = tmp_path_factory.mktemp("gateway-auth")
    overrides = {
        **secured_overrides(pki),
        "sasl.enabled.mechanisms": "PLAIN,DIDI",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        "listener.name.sasl_ssl.plain.sasl.jaas.config": JAAS,
        "authorizer.class.name": "com.didichuxing.datachannel.kafka.security.authorizer.DidiAuthorizer",
        "cluster.id": "0",
        "max.sessions.per.user": str(MAX_SESSIONS),
        # KIP-368 sessions: long enough for every test here, and re-authentication is allowed.
        "connections.max.reauth.ms": "120000",
        "gateway.default.users": ",".join(f"{u}:{p}:{str(u == 'ops').lower()}" for u, p in PASSWORDS.items()),
        "gateway.default.acls": f"{TOPIC}:test_user:Read:Allow,{TOPIC}:test_user:Write:Allow,{TOPIC}:reader:Read:Allow,"
                                "*:wide:Write:Allow,secret:wide:Write:Deny",
        "gateway.denials.log.file": str(root / "denials.log"),
        "group.initial.rebalance.delay.ms": "0",
        "offsets.topic.num.partitions": "1",
    }
    with running_broker(root / "data", overrides) as b:
        # PLAINTEXT clients are ANONYMOUS, which the gateway treats as a super user (as Logi-Kafka).
        for topic in (TOPIC, "secret", "other"):
            create_topic(b.bootstrap, topic)
        yield b


def denials_log(broker: BrokerProcess) -> str:
    path = Path(broker.data_dir).parent / "denials.log"
    return path.read_text() if path.exists() else ""


def conf(broker: BrokerProcess, app: str, *, password: str | None = None, cluster: str = "0", tls: bool = False,
         pki: Pki | None = None) -> dict[str, Any]:
    listener = "SASL_SSL" if tls else "SASL_PLAINTEXT"
    out: dict[str, Any] = {
        "bootstrap.servers": broker.bootstrap_for(listener), "security.protocol": listener,
        "sasl.mechanism": "PLAIN", "sasl.username": f"{cluster}.{app}",
        "sasl.password": password if password is not None else PASSWORDS[app],
    }
    if tls:
        assert pki is not None
        out["ssl.ca.location"] = str(pki.ca)
    return out


def produce(config: dict[str, Any], topic: str, values: list[bytes]) -> list[Any]:
    """Delivery results (None or the KafkaError) of `values`, in order."""
    producer = Producer({**config, "message.send.max.retries": 0})
    results: list[Any] = []
    for v in values:
        producer.produce(topic, v, on_delivery=lambda err, msg: results.append(err))
    producer.flush(20)
    return results


def consume(config: dict[str, Any], topic: str, group: str, count: int) -> list[bytes]:
    consumer = Consumer({**config, "group.id": group, "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    values: list[bytes] = []
    deadline = time.monotonic() + 30
    try:
        while len(values) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                values.append(msg.value() or b"")  # the test's records all have values
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    return values


def auth_errors(config: dict[str, Any]) -> list[KafkaError]:
    """The errors a producer sees while the broker refuses its login."""
    errors: list[KafkaError] = []
    producer = Producer({**config, "error_cb": errors.append})
    producer.produce("never", b"x")
    deadline = time.monotonic() + 15
    while not any(e.code() == KafkaError._AUTHENTICATION for e in errors) and time.monotonic() < deadline:
        producer.poll(0.2)
    producer.purge()
    return errors


def test_granted_app_produces_and_consumes_with_a_group(broker: BrokerProcess) -> None:
    values = [f"hello {i}".encode() for i in range(10)]
    assert produce(conf(broker, "test_user"), TOPIC, values) == [None] * 10
    assert consume(conf(broker, "test_user"), TOPIC, "cg-007", 10) == values


def test_ungranted_operations_are_denied_and_logged_apart(broker: BrokerProcess) -> None:
    # reader may read test_0 but not write it; wide may write any topic but the denied one.
    results = produce(conf(broker, "reader"), TOPIC, [b"nope"])
    assert [e.code() for e in results] == [KafkaError.TOPIC_AUTHORIZATION_FAILED]
    assert produce(conf(broker, "wide"), "other", [b"ok"]) == [None]
    results = produce(conf(broker, "wide"), "secret", [b"nope"])
    assert [e.code() for e in results] == [KafkaError.TOPIC_AUTHORIZATION_FAILED]
    assert produce(conf(broker, "test_user"), "other", [b"nope"])[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    log = denials_log(broker)
    assert "User = reader from 127.0.0.1 is denied Operation = Write on resource = Topic:test_0" in log
    assert "User = wide from 127.0.0.1 is denied Operation = Write on resource = Topic:secret" in log
    assert "User = test_user from 127.0.0.1 is denied Operation = Write on resource = Topic:other" in log
    # The denials have their own file: the broker's log does not repeat them.
    assert "is denied Operation" not in broker.new_log()
    # A normal user may not create topics; a super user from the users view may.
    from confluent_kafka.admin import AdminClient, NewTopic

    app_admin, ops_admin = AdminClient(conf(broker, "test_user")), AdminClient(conf(broker, "ops"))
    refused = app_admin.create_topics([NewTopic("made-by-app", 1, 1)])
    with pytest.raises(Exception, match="TOPIC_AUTHORIZATION_FAILED"):
        refused["made-by-app"].result(15)
    ops_admin.create_topics([NewTopic("made-by-ops", 1, 1)])["made-by-ops"].result(15)


@pytest.mark.parametrize(("app", "password", "cluster", "message"), [
    ("test_user", "wrong", "0", "Invalid username or password"),
    ("nobody", "12345", "0", "Invalid username or password"),
    ("test_user", "12345", "1", "cluster id 1 is not this cluster's (0)"),
    ("ANONYMOUS", "anything", "0", "Invalid username or password"),
])
def test_refused_logins(broker: BrokerProcess, app: str, password: str, cluster: str, message: str) -> None:
    errors = auth_errors(conf(broker, app, password=password, cluster=cluster))
    assert any(e.code() == KafkaError._AUTHENTICATION for e in errors), errors
    assert any(message in e.str() for e in errors), [e.str() for e in errors]
    assert f"User = {cluster}.{app} login failed" in denials_log(broker)
    assert password not in denials_log(broker)


def sasl_login(broker: BrokerProcess, user: str, password: str, mechanism: str = "PLAIN") -> RawClient:
    """A raw connection authenticated with SaslHandshake v1 + SaslAuthenticate; raises SaslRejectedError."""
    raw = RawClient(broker.bootstrap_for("SASL_PLAINTEXT"))
    try:
        if mechanism == "PLAIN":
            run_blocking(sasl_exchange("PLAIN", user, password), raw.request)
        else:
            hs = raw.request(ApiKey.SASL_HANDSHAKE, 1, codec.request_class(ApiKey.SASL_HANDSHAKE)(mechanism=mechanism))
            assert hs.error_code == 0, hs
            req = codec.request_class(ApiKey.SASL_AUTHENTICATE)(auth_bytes=f"\0{user}\0{password}".encode())
            resp = raw.request(ApiKey.SASL_AUTHENTICATE, 2, req)
            if resp.error_code:
                raise SaslRejectedError(mechanism, resp.error_code, resp.error_message)
    except BaseException:
        raw.close()
        raise
    return raw


def test_didi_mechanism_and_metadata_after_login(broker: BrokerProcess) -> None:
    raw = sasl_login(broker, "0.test_user", "12345", mechanism="DIDI")
    try:
        md = raw.request(ApiKey.METADATA, 9, codec.request_class(ApiKey.METADATA)(
            topics=[codec.request_class(ApiKey.METADATA).MetadataRequestTopic(name=TOPIC)],
            allow_auto_topic_creation=False))
        assert [(t.name, t.error_code) for t in md.topics] == [(TOPIC, 0)]
    finally:
        raw.close()
    with pytest.raises(SaslRejectedError) as refused:
        sasl_login(broker, "0.test_user", "bad", mechanism="DIDI")
    assert refused.value.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED


def test_sessions_over_the_limit_are_refused_until_one_closes(broker: BrokerProcess) -> None:
    held = [sasl_login(broker, "0.limited", "l-pw") for _ in range(MAX_SESSIONS)]
    try:
        with pytest.raises(SaslRejectedError, match="max.sessions.per.user") as refused:
            sasl_login(broker, "0.limited", "l-pw")
        assert refused.value.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
        # Real clients are refused too, with the broker's message.
        errors = auth_errors(conf(broker, "limited"))
        assert any("max.sessions.per.user" in e.str() for e in errors), [e.str() for e in errors]
        # Other users are not affected.
        sasl_login(broker, "0.reader", "r-pw").close()
        held.pop().close()
        # The broker releases the session when it sees the disconnect.
        deadline = time.monotonic() + 10
        while True:
            try:
                held.append(sasl_login(broker, "0.limited", "l-pw"))
                break
            except SaslRejectedError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
    finally:
        for raw in held:
            raw.close()


def test_reauthentication_at_the_session_limit_keeps_the_session(broker: BrokerProcess) -> None:
    """A client re-authenticating (KIP-368) while its user holds every session it may: the
    connection's own session is given back and taken again, so it is not refused."""
    held = [sasl_login(broker, "0.limited", "l-pw") for _ in range(MAX_SESSIONS)]
    try:
        raw = held[0]
        hs = raw.request(ApiKey.SASL_HANDSHAKE, 1, codec.request_class(ApiKey.SASL_HANDSHAKE)(mechanism="PLAIN"))
        assert hs.error_code == 0
        resp = raw.request(ApiKey.SASL_AUTHENTICATE, 2,
                           codec.request_class(ApiKey.SASL_AUTHENTICATE)(auth_bytes=b"\x000.limited\x00l-pw"))
        assert (resp.error_code, resp.session_lifetime_ms) == (0, 120000), resp.error_message
        # Still at the limit: a new connection of the user is refused, the re-authenticated one works.
        with pytest.raises(SaslRejectedError, match="max.sessions.per.user"):
            sasl_login(broker, "0.limited", "l-pw")
        md = raw.request(ApiKey.METADATA, 9, codec.request_class(ApiKey.METADATA)(topics=None))
        assert md.brokers
    finally:
        for raw in held:
            raw.close()


@pytest.mark.parametrize("protocol", ["SASL_PLAINTEXT", "SASL_SSL"])
def test_kafka_python_and_aiokafka(broker: BrokerProcess, pki: Pki, protocol: str) -> None:
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KTP

    tls = protocol == "SASL_SSL"
    common = {"bootstrap_servers": broker.bootstrap_for(protocol), "security_protocol": protocol,
              "sasl_mechanism": "PLAIN", "sasl_plain_username": "0.test_user", "sasl_plain_password": "12345"}
    kp = {**common, "ssl_cafile": str(pki.ca)} if tls else common
    producer = KafkaProducer(**kp)
    first = producer.send(TOPIC, f"kafka-python over {protocol}".encode()).get(timeout=20)
    producer.close()
    consumer = KafkaConsumer(**kp, enable_auto_commit=False, consumer_timeout_ms=10000)
    consumer.assign([KTP(TOPIC, 0)])
    consumer.seek(KTP(TOPIC, 0), first.offset)
    assert next(iter(consumer)).value == f"kafka-python over {protocol}".encode()
    consumer.close()

    async def aiokafka_round_trip() -> bytes:
        from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
        from aiokafka import TopicPartition as ATP
        from aiokafka.helpers import create_ssl_context

        ak = {**common, "ssl_context": create_ssl_context(cafile=str(pki.ca))} if tls else common
        p = AIOKafkaProducer(**ak)
        await p.start()
        try:
            meta = await p.send_and_wait(TOPIC, f"aiokafka over {protocol}".encode())
        finally:
            await p.stop()
        c = AIOKafkaConsumer(**ak, enable_auto_commit=False)
        await c.start()
        try:
            c.assign([ATP(TOPIC, 0)])
            c.seek(ATP(TOPIC, 0), meta.offset)
            msg = await asyncio.wait_for(c.getone(), 20)
            return bytes(msg.value)
        finally:
            await c.stop()

    assert asyncio.run(aiokafka_round_trip()) == f"aiokafka over {protocol}".encode()
    # confluent-kafka too, and the same app refused writing where it has no grant.
    assert produce(conf(broker, "test_user", tls=tls, pki=pki), TOPIC, [b"ck"]) == [None]
    assert produce(conf(broker, "test_user", tls=tls, pki=pki), "secret", [b"x"])[0].code() == \
        KafkaError.TOPIC_AUTHORIZATION_FAILED
