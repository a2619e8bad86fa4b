"""kaflet's broker-to-broker client against real kaflet broker processes, over every security protocol."""

from __future__ import annotations

import asyncio
import os
import socket
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from kaflet.network.client import (
    PLAINTEXT,
    BrokerAuthenticationError,
    BrokerClient,
    BrokerConnectionError,
    ClientSecurity,
    RequestTimeoutError,
)
from kaflet.protocol import codec
from kaflet.protocol.api_keys import ApiKey
from kaflet.protocol.errors import ErrorCode
from kaflet.protocol.fetch import decode_fetch_response
from kaflet.protocol.records import decode_records, iter_batches
from kaflet.security.scram import MECHANISMS
from tests.support.broker_process import BrokerProcess, running_broker
from tests.support.certs import Pki, make_pki
from tests.support.secured import CREDENTIALS, JAAS, SCRAM_USERS, secured_overrides
from tests.support.topics import create_topic


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[BrokerProcess]:
    """One broker with every security protocol, plus a TLS listener that requires a client certificate."""
    overrides = {
        **secured_overrides(pki, {"PLAINONLY": "SASL_PLAINTEXT"}),
        "listener.name.plainonly.plain.sasl.jaas.config": JAAS,
        "listener.name.plainonly.sasl.enabled.mechanisms": "PLAIN",
        "connection.failed.authentication.delay.ms": "0",
    }
    with running_broker(tmp_path_factory.mktemp("secured") / "data", overrides) as broker:
        asyncio.run(_create_scram_users(broker.ports["PLAINTEXT"]))
        yield broker


async def _create_scram_users(port: int) -> None:
    """AlterUserScramCredentials through the client under test (over PLAINTEXT)."""
    R = codec.request_class(ApiKey.ALTER_USER_SCRAM_CREDENTIALS)
    upsertions = []
    for mech_name, (user, password) in SCRAM_USERS.items():
        mech = MECHANISMS[mech_name]
        salt = os.urandom(16)
        upsertions.append(R.ScramCredentialUpsertion(name=user, mechanism=mech.type_id, iterations=4096, salt=salt,
                                                     salted_password=mech.salted_password(password, salt, 4096)))
    async with await BrokerClient.connect("127.0.0.1", port) as client:
        resp = await client.send(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0, R(deletions=[], upsertions=upsertions))
    assert [r.error_code for r in resp.results] == [0, 0]


def _tls(pki: Pki, *, client_cert: bool = False) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.load_verify_locations(cafile=str(pki.ca))
    if client_cert:
        ctx.load_cert_chain(str(pki.client_cert), str(pki.client_key))
    return ctx


def _api_versions() -> Any:
    return codec.request_class(ApiKey.API_VERSIONS)(client_software_name="kaflet-test", client_software_version="1")


def _metadata(topics: list[str] | None = None) -> Any:
    M = codec.request_class(ApiKey.METADATA)
    return M(topics=None if topics is None else [M.MetadataRequestTopic(name=t) for t in topics],
             allow_auto_topic_creation=False, include_cluster_authorized_operations=False,
             include_topic_authorized_operations=False)


async def _versions_and_metadata(client: BrokerClient, port: int) -> None:
    versions = await client.send(ApiKey.API_VERSIONS, 3, _api_versions())
    assert versions.error_code == 0
    assert {k.api_key for k in versions.api_keys} >= {ApiKey.METADATA, ApiKey.FETCH, ApiKey.SASL_AUTHENTICATE}
    meta = await client.send(ApiKey.METADATA, 9, _metadata())
    assert len(meta.brokers) == 1
    # The broker advertises the listener we came in on.
    assert meta.brokers[0].port == port


# -- every security protocol ----------------------------------------------------------------------


async def test_plaintext(secured: BrokerProcess) -> None:
    port = secured.ports["PLAINTEXT"]
    async with await BrokerClient.connect("127.0.0.1", port, PLAINTEXT) as client:
        await _versions_and_metadata(client, port)


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
async def test_ssl_verifies_the_broker(secured: BrokerProcess, pki: Pki, host: str) -> None:
    port = secured.ports["SSL"]
    security = ClientSecurity("SSL", _tls(pki))
    async with await BrokerClient.connect(host, port, security) as client:
        await _versions_and_metadata(client, port)


async def test_ssl_untrusted_broker_is_an_authentication_error(secured: BrokerProcess, tmp_path: Path) -> None:
    other = make_pki(tmp_path / "other")
    security = ClientSecurity("SSL", _tls(other))
    with pytest.raises(BrokerAuthenticationError, match="certificate verify failed"):
        await BrokerClient.connect("127.0.0.1", secured.ports["SSL"], security)


async def test_ssl_client_certificate(secured: BrokerProcess, pki: Pki) -> None:
    port = secured.ports["MTLS"]
    async with await BrokerClient.connect("127.0.0.1", port, ClientSecurity("SSL", _tls(pki, client_cert=True))) as c:
        await _versions_and_metadata(c, port)
    # Without a certificate the broker refuses: during the handshake (TLS 1.2) or, with TLS 1.3,
    # on the first read after it. Either way the caller sees a BrokerConnectionError.
    with pytest.raises(BrokerConnectionError):
        async with await BrokerClient.connect("127.0.0.1", port, ClientSecurity("SSL", _tls(pki))) as c:
            await c.send(ApiKey.API_VERSIONS, 3, _api_versions())


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
async def test_sasl_plaintext(secured: BrokerProcess, mechanism: str) -> None:
    user, password = CREDENTIALS[mechanism]
    port = secured.ports["SASL_PLAINTEXT"]
    security = ClientSecurity("SASL_PLAINTEXT", None, mechanism, user, password)
    async with await BrokerClient.connect("127.0.0.1", port, security) as client:
        await _versions_and_metadata(client, port)


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
async def test_sasl_ssl(secured: BrokerProcess, pki: Pki, mechanism: str) -> None:
    user, password = CREDENTIALS[mechanism]
    port = secured.ports["SASL_SSL"]
    security = ClientSecurity("SASL_SSL", _tls(pki), mechanism, user, password)
    async with await BrokerClient.connect("127.0.0.1", port, security) as client:
        await _versions_and_metadata(client, port)


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
async def test_wrong_password_is_a_clean_authentication_error(secured: BrokerProcess, mechanism: str) -> None:
    user, _ = CREDENTIALS[mechanism]
    security = ClientSecurity("SASL_PLAINTEXT", None, mechanism, user, "wrong")
    with pytest.raises(BrokerAuthenticationError) as info:
        await BrokerClient.connect("127.0.0.1", secured.ports["SASL_PLAINTEXT"], security)
    assert "SASL authentication with 127.0.0.1:" in str(info.value)
    assert ErrorCode.SASL_AUTHENTICATION_FAILED.name in str(info.value)
    assert "wrong" not in str(info.value)
    assert isinstance(info.value, ConnectionError)


async def test_unknown_scram_user(secured: BrokerProcess) -> None:
    security = ClientSecurity("SASL_PLAINTEXT", None, "SCRAM-SHA-256", "nobody", "x")
    with pytest.raises(BrokerAuthenticationError, match="invalid credentials.*SASL_AUTHENTICATION_FAILED"):
        await BrokerClient.connect("127.0.0.1", secured.ports["SASL_PLAINTEXT"], security)


async def test_mechanism_not_enabled(secured: BrokerProcess) -> None:
    user, password = CREDENTIALS["SCRAM-SHA-512"]
    security = ClientSecurity("SASL_PLAINTEXT", None, "SCRAM-SHA-512", user, password)
    with pytest.raises(BrokerAuthenticationError,
                       match=r"SASL mechanism SCRAM-SHA-512 is not enabled on the broker \(enabled: PLAIN\)"):
        await BrokerClient.connect("127.0.0.1", secured.ports["PLAINONLY"], security)


# -- pipelining, failures, timeouts ---------------------------------------------------------------


async def test_pipelined_requests_are_matched(secured: BrokerProcess) -> None:
    async with await BrokerClient.connect("127.0.0.1", secured.ports["PLAINTEXT"]) as client:
        names = [f"no-such-topic-{i}" for i in range(100)]
        answers = await asyncio.gather(*(client.send(ApiKey.METADATA, 9, _metadata([n])) for n in names))
        assert [a.topics[0].name for a in answers] == names
        assert {a.topics[0].error_code for a in answers} == {ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}


def _fetch(topic: str, wait_ms: int) -> Any:
    F = codec.request_class(ApiKey.FETCH)
    T = F.FetchTopic
    return F(replica_id=-1, max_wait_ms=wait_ms, min_bytes=1, max_bytes=1 << 20, isolation_level=0, session_id=0,
             session_epoch=-1, topics=[T(topic=topic, partitions=[T.FetchPartition(
                 partition=0, current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=-1, log_start_offset=-1,
                 partition_max_bytes=1 << 20)])], forgotten_topics_data=[], rack_id="")


@pytest.mark.parametrize("listener", ["PLAINTEXT", "SSL"])
async def test_fetch_through_send_raw_and_the_hand_written_decoder(secured: BrokerProcess, pki: Pki,
                                                                   listener: str) -> None:
    topic = f"client-fetch-{listener.lower()}"
    create_topic(secured.bootstrap, topic)
    producer = Producer({"bootstrap.servers": secured.bootstrap, "linger.ms": 50})
    # About 300 KB: more than the client's 64 KiB staging buffer, so the response is received
    # into a buffer of its own.
    expected = [f"value-{i}-".encode() + os.urandom(1000) for i in range(300)]
    for i, value in enumerate(expected):
        producer.produce(topic, value, key=f"k{i}".encode())
    assert producer.flush(20) == 0
    security = ClientSecurity("SSL", _tls(pki)) if listener == "SSL" else PLAINTEXT
    async with await BrokerClient.connect("127.0.0.1", secured.ports[listener], security) as client:
        body = await client.send_raw(ApiKey.FETCH, 12, _fetch(topic, 500))
    response = decode_fetch_response(body, 12)
    [(name, [part])] = response.topics
    assert (name, part.index, part.error_code, part.high_watermark) == (topic, 0, 0, 300)
    assert part.log_start_offset == 0 and part.aborted_transactions == []
    values = [r.value for pos, h in iter_batches(part.records) for r in decode_records(part.records[pos:pos + h.size])]
    assert values == expected
    # The records are a view into the buffer the response was received into.
    assert part.records.obj is body.obj
    assert len(body.obj) > 65536  # type: ignore[arg-type]


async def test_broker_dying_fails_pending_requests(fresh_broker: BrokerProcess) -> None:
    fresh_broker.start()
    create_topic(fresh_broker.bootstrap, "idle")
    client = await BrokerClient.connect("127.0.0.1", fresh_broker.port or 0)
    # A fetch on an empty partition waits (long poll); pipelined behind it, a Metadata request.
    fetch = asyncio.ensure_future(client.send_raw(ApiKey.FETCH, 12, _fetch("idle", 20000)))
    meta = asyncio.ensure_future(client.send(ApiKey.METADATA, 9, _metadata()))
    await asyncio.sleep(0.5)
    assert not fetch.done() and not meta.done()
    await asyncio.to_thread(fresh_broker.kill)
    for pending in (fetch, meta):
        with pytest.raises(BrokerConnectionError, match="closed the connection|connection to .* lost"):
            await asyncio.wait_for(pending, 10)
    assert client.closed
    with pytest.raises(BrokerConnectionError):
        await client.send(ApiKey.METADATA, 9, _metadata())
    await client.aclose()


async def test_request_timeout_closes_the_connection(secured: BrokerProcess) -> None:
    create_topic(secured.bootstrap, "timeout-idle")
    client = await BrokerClient.connect("127.0.0.1", secured.ports["PLAINTEXT"], request_timeout_s=30)
    slow = asyncio.ensure_future(client.send_raw(ApiKey.FETCH, 12, _fetch("timeout-idle", 20000),
                                                 timeout_s=0.5))
    behind = asyncio.ensure_future(client.send(ApiKey.METADATA, 9, _metadata()))
    with pytest.raises(RequestTimeoutError, match="no response to FETCH v12 from 127.0.0.1:.* within 0.5 s"):
        await asyncio.wait_for(slow, 10)
    with pytest.raises(BrokerConnectionError, match="timed out"):
        await behind
    assert client.closed
    await asyncio.wait_for(client.aclose(), 5)


async def test_connect_failures(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, not listening: connections are refused
        with pytest.raises(BrokerConnectionError, match=f"cannot connect to 127.0.0.1:{port}"):
            await BrokerClient.connect("127.0.0.1", port)
    # A peer that accepts but never answers the TLS handshake: the connect deadline applies.
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        pki = make_pki(tmp_path / "pki")
        with pytest.raises(BrokerConnectionError):
            await BrokerClient.connect("127.0.0.1", listener.getsockname()[1], ClientSecurity("SSL", _tls(pki)),
                                       connect_timeout_s=0.5)


# -- hostile peers ------------------------------------------------------------------------------


async def _one_shot_server(answer: Any) -> tuple[asyncio.Server, int]:
    """A TCP server that reads one request and answers with what `answer(correlation_id)` returns."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        size = int.from_bytes(await reader.readexactly(4), "big")
        frame = await reader.readexactly(size)
        writer.write(answer(int.from_bytes(frame[4:8], "big")))
        await writer.drain()
        await reader.read()  # until the client goes away
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


@pytest.mark.parametrize(("answer", "error"), [
    # The right correlation id, then a body that is not a MetadataResponse v9.
    (lambda cid: (9).to_bytes(4, "big") + cid.to_bytes(4, "big") + b"\x00\xff\xff\xff\xff", "does not decode"),
    # Somebody else's correlation id.
    (lambda cid: (5).to_bytes(4, "big") + (cid + 7).to_bytes(4, "big") + b"\x00", "expected"),
    # A negative frame size.
    (lambda cid: (-5).to_bytes(4, "big", signed=True), "invalid size"),
])
async def test_bad_responses_close_the_connection(answer: Any, error: str) -> None:
    server, port = await _one_shot_server(answer)
    async with server:
        client = await BrokerClient.connect("127.0.0.1", port)
        with pytest.raises(BrokerConnectionError, match=error):
            await client.send(ApiKey.METADATA, 9, _metadata())
        assert client.closed
        await asyncio.wait_for(client.aclose(), 5)


async def test_close_leaves_no_tasks_or_sockets(secured: BrokerProcess) -> None:
    def fds() -> int:
        return len(os.listdir("/proc/self/fd"))

    create_topic(secured.bootstrap, "close-idle")
    tasks_before = asyncio.all_tasks()
    fds_before = fds()
    clients = [await BrokerClient.connect("127.0.0.1", secured.ports["PLAINTEXT"]) for _ in range(5)]
    assert fds() >= fds_before + 5
    pending = [asyncio.ensure_future(c.send_raw(ApiKey.FETCH, 12, _fetch("close-idle", 20000)))
               for c in clients]
    await asyncio.sleep(0.2)
    for c in clients:
        await c.aclose()
    for p in pending:
        with pytest.raises(BrokerConnectionError, match="closed"):
            await p
    assert fds() == fds_before
    assert asyncio.all_tasks() == tasks_before
