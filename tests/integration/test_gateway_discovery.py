"""`kaflet gateway` in discovery mode with real processes: a `kaflet manager`, two single-broker
kaflet clusters (ids 7 and 8, the gateway on, applications logging in over SASL/PLAIN) whose
service addresses are discovery settings in the manager, and one gateway. Clients know only the
gateway's address and log in as ``<clusterId>.<appId>``; the gateway sends them to their
cluster's brokers. Moving cluster 7's address in the manager sends new clients to the other
cluster within a sync interval."""

from __future__ import annotations

import socket
import struct
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import AdminClient
from kafka import KafkaConsumer, KafkaProducer

from tests.support.broker_process import BrokerProcess, running_broker
from tests.support.gateway_process import GatewayProcess, gateway_broker, running_gateway, two_clusters
from tests.support.manager import ManagerProcess, Session, running_manager, wait_for

SYNC_MS = 300
APP = "app_a"
PASSWORD = "pw-a"
# Both clusters know the application under both cluster ids, so a cluster can take over the
# other's id when the manager moves it (the brokers check the password, not the gateway).
JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
        f'password="admin-secret" user_admin="admin-secret" user_7.{APP}="{PASSWORD}" user_8.{APP}="{PASSWORD}" '
        f'user_7.app_slow="{PASSWORD}" user_12.{APP}="{PASSWORD}";')
SLOW_RATE = 4  # requests per second of app_slow at the gateway (an sp-limit in the manager)
RECHECK_MS = 500  # how long a cluster's acceptance of a password stands at the gateway


def broker_overrides(cluster_id: int, gateway_url: str) -> dict[str, str]:
    return gateway_broker(cluster_id, gateway_url, JAAS)


class Setup:
    def __init__(self, manager: ManagerProcess, admin: Session, a: BrokerProcess, b: BrokerProcess,
                 gateway: GatewayProcess, cache: Path) -> None:
        self.manager, self.admin, self.a, self.b, self.gateway, self.cache = manager, admin, a, b, gateway, cache

    def set_address(self, cluster_id: int, broker: BrokerProcess) -> None:
        r = self.admin.form("/gateway-configs", {"type": "SD_CLUSTER_ID", "name": str(cluster_id),
                                                 "value": broker.bootstrap_for("SASL_PLAINTEXT")})
        assert r.status_code == 303, r.text


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    work = tmp_path_factory.mktemp("gateway-discovery")
    with two_clusters(work, broker_overrides) as (manager, admin, a, b):
        cache = work / "gateway-cache.json"
        with running_gateway(work / "gateway", ["--manager-url", manager.gateway_url, "--listen", "127.0.0.1:0",
                                                "--config-cache", str(cache)],
                             {"gateway.sync.interval.ms": str(SYNC_MS)}) as gateway:
            s = Setup(manager, admin, a, b, gateway, cache)
            s.set_address(7, a)
            s.set_address(8, b)
            r = admin.form("/gateway-configs", {"type": "SD_SP_RATE", "name": "app_slow", "value": str(SLOW_RATE)})
            assert r.status_code == 303, r.text
            wait_for(lambda: '"8"' in cache.read_text() and "app_slow" in cache.read_text() if cache.exists()
                     else False)
            yield s


def client_config(gateway: GatewayProcess, username: str, password: str = PASSWORD) -> dict[str, Any]:
    return {"bootstrap.servers": gateway.bootstrap, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
            "sasl.username": username, "sasl.password": password}


def landed_on(setup: Setup, username: str = f"7.{APP}", gateway: GatewayProcess | None = None) -> int:
    """The SASL port of the broker a new client of ``username`` is sent to (by ``gateway``, else
    the module's)."""
    md = AdminClient(client_config(gateway or setup.gateway, username)).list_topics(timeout=10)
    ports = {b.port for b in md.brokers.values()}
    assert len(ports) == 1, md.brokers
    return ports.pop()


def sasl_port(broker: BrokerProcess) -> int:
    return int(broker.bootstrap_for("SASL_PLAINTEXT").rsplit(":", 1)[1])


def test_confluent_producer_and_consumer_group_through_the_gateway(setup: Setup) -> None:
    topic = "orders"
    values = [f"m{i}".encode() for i in range(20)]
    producer = Producer({**client_config(setup.gateway, f"7.{APP}"), "enable.idempotence": True})
    errors: list[Any] = []
    for v in values:
        producer.produce(topic, v, on_delivery=lambda err, msg: errors.append(err))
    assert producer.flush(20) == 0
    assert errors == [None] * len(values)

    consumer = Consumer({**client_config(setup.gateway, f"7.{APP}"), "group.id": f"g-{uuid.uuid4()}",
                         "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe([topic])
        got: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(got) < len(values) and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                got.append(msg.value())
        assert sorted(got) == sorted(values)
        # The records are on cluster A, which has 2 partitions (B's topic has 3).
        md = consumer.list_topics(topic, timeout=10)
        assert len(md.topics[topic].partitions) == 2
        assert {b.port for b in md.brokers.values()} == {sasl_port(setup.a)}
    finally:
        consumer.close()


def test_kafka_python_through_the_gateway(setup: Setup) -> None:
    sasl = {"bootstrap_servers": setup.gateway.bootstrap, "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": "PLAIN", "sasl_plain_username": f"8.{APP}", "sasl_plain_password": PASSWORD}
    producer = KafkaProducer(**sasl)
    try:
        for i in range(5):
            producer.send("orders", f"kp{i}".encode(), partition=2).get(timeout=20)  # B has partition 2
    finally:
        producer.close()
    consumer = KafkaConsumer("orders", group_id=f"kg-{uuid.uuid4()}", auto_offset_reset="earliest",
                             consumer_timeout_ms=10000, **sasl)
    try:
        got = [m.value for m in consumer]
    finally:
        consumer.close()
    assert {f"kp{i}".encode() for i in range(5)} <= set(got)


def auth_error(setup: Setup, username: str, password: str = PASSWORD) -> str:
    errors: list[KafkaError] = []
    admin = AdminClient({**client_config(setup.gateway, username, password),
                         "error_cb": lambda e: errors.append(e)})
    deadline = time.monotonic() + 15
    while not errors and time.monotonic() < deadline:
        admin.poll(0.2)
    assert errors, "no error reported"
    assert errors[0].code() == KafkaError._AUTHENTICATION, errors[0]
    return str(errors[0].str())


def test_bad_usernames_and_passwords_are_refused_with_a_readable_reason(setup: Setup) -> None:
    assert "cluster id 9 is not known to the gateway" in auth_error(setup, f"9.{APP}")
    assert "<clusterId>.<appId>" in auth_error(setup, APP)
    # The password is the cluster's to check; its refusal is passed on.
    assert "cluster 7 refused the login" in auth_error(setup, f"7.{APP}", "wrong")


def logs_in(bootstrap: str, username: str, password: str, security: str = "SASL_PLAINTEXT") -> bool:
    """Whether a new client logs in and gets metadata (False: an authentication error)."""
    errors: list[KafkaError] = []
    admin = AdminClient({"bootstrap.servers": bootstrap, "security.protocol": security, "sasl.mechanism": "PLAIN",
                         "sasl.username": username, "sasl.password": password,
                         "error_cb": lambda e: errors.append(e)})
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        try:
            admin.list_topics(timeout=0.5)
            return True
        except Exception:
            admin.poll(0.1)  # error_cb is called from poll
            if any(e.code() == KafkaError._AUTHENTICATION for e in errors):
                return False
    raise AssertionError(f"{username}: neither metadata nor an authentication error in 15 s: {errors}")


def test_a_password_changed_in_the_manager_stops_logging_in_through_the_gateway(tmp_path: Path) -> None:
    """A broker taking its applications' passwords from the manager (Logi-Kafka's login module),
    and a gateway. The gateway's connection to the cluster, opened with the old password, stays
    open; a new login with the old password is checked with the cluster again and refused once
    the broker has the new one."""
    jaas = ('com.didichuxing.datachannel.kafka.security.sasl.plain.PlainLoginModule required '
            'username="admin" password="admin-secret";')
    with running_manager(tmp_path / "manager") as manager, \
            httpx.Client(base_url=manager.url, timeout=30) as http, \
            running_broker(tmp_path / "broker", gateway_broker(7, manager.gateway_url, jaas)) as broker:
        assert manager.admin_password
        admin = Session(http, "admin", manager.admin_password)
        sasl = broker.bootstrap_for("SASL_PLAINTEXT")
        for form in ({"name": "c7", "cluster_id": "7", "bootstrap_servers": broker.bootstrap},):
            assert admin.form("/clusters", form).status_code == 303
        r = admin.form("/gateway-configs", {"type": "SD_CLUSTER_ID", "name": "7", "value": sasl})
        assert r.status_code == 303, r.text
        r = admin.api("POST", "/apps", {"app_id": "app_pw", "description": "password change"})
        assert r.status_code == 201, r.text
        old, user = r.json()["password"], "7.app_pw"
        wait_for(lambda: logs_in(sasl, user, old))  # the broker has the new application
        with running_gateway(tmp_path / "gateway", ["--manager-url", manager.gateway_url, "--listen", "127.0.0.1:0"],
                             {"gateway.sync.interval.ms": "200", "upstream.login.recheck.ms": str(RECHECK_MS)}) as gw:
            wait_for(lambda: logs_in(gw.bootstrap, user, old))
            r = admin.api("POST", "/apps/app_pw/reset-password")
            assert r.status_code == 200, r.text
            new = r.json()["password"]
            wait_for(lambda: not logs_in(sasl, user, old))
            time.sleep(RECHECK_MS / 1000)
            assert not logs_in(gw.bootstrap, user, old)
            assert logs_in(gw.bootstrap, user, new)


def _frame(api_key: int, version: int, correlation_id: int, body: bytes = b"") -> bytes:
    client = b"raw"
    header = struct.pack(">hhih", api_key, version, correlation_id, len(client)) + client
    return struct.pack(">i", len(header) + len(body)) + header + body


def _closed(sock: socket.socket) -> bool:
    sock.settimeout(10)
    try:
        while True:
            if not sock.recv(65536):
                return True
    except ConnectionResetError:
        return True


def test_malformed_frames_close_only_their_connection(setup: Setup) -> None:
    hostile = [
        b"\xff\xff\xff\xf0",  # a negative size
        struct.pack(">i", 3) + b"abc",  # shorter than a header
        _frame(0, 9, 1, b"\x00" * 10),  # Produce before authentication
        _frame(18, 3, 1, b"\xff\xff\xff"),  # ApiVersions v3 whose header's tagged fields are broken
        _frame(17, 1, 2, b"\x7f\xff"),  # SaslHandshake whose mechanism runs past the frame
        struct.pack(">i", 600_000) + b"\x00" * 16,  # larger than sasl.server.max.receive.size
    ]
    for data in hostile:
        with socket.create_connection(("127.0.0.1", setup.gateway.port)) as sock:
            sock.sendall(data)
            assert _closed(sock), data[:16]
    # Nothing else was affected: a client bootstraps as before.
    assert landed_on(setup) == sasl_port(setup.a)
    assert "Produce before authentication" not in setup.gateway.log()
    assert "unexpected PRODUCE request during SASL authentication" in setup.gateway.log()


def test_an_api_the_gateway_does_not_serve_closes_the_connection_with_a_log_line(setup: Setup) -> None:
    import asyncio

    from kaflet.network.client import BrokerClient, ClientSecurity
    from kaflet.protocol.broker_connection import BrokerConnectionError

    async def produce_to_the_gateway() -> str:
        security = ClientSecurity("SASL_PLAINTEXT", sasl_mechanism="PLAIN", sasl_username=f"7.{APP}",
                                  sasl_password=PASSWORD)
        async with await BrokerClient.connect("127.0.0.1", setup.gateway.port, security) as client:
            try:
                await client.send_raw(0, 9, b"\x00" * 16, timeout_s=10)
            except BrokerConnectionError as exc:
                return str(exc)
        return "answered"

    assert "closed" in asyncio.run(produce_to_the_gateway())
    wait_for(lambda: "PRODUCE v9 is not served by the gateway in discovery mode" in setup.gateway.log(), 10)


def test_a_new_client_follows_a_cluster_moved_in_the_manager(setup: Setup) -> None:
    assert landed_on(setup) == sasl_port(setup.a)
    setup.set_address(7, setup.b)
    try:
        took = wait_for(lambda: landed_on(setup) == sasl_port(setup.b), timeout=10)
        print(f"\na new client of cluster 7 landed on the other cluster {took:.2f} s after the change "
              f"(sync interval {SYNC_MS} ms)")
        assert took < 5
        # It works there: produce to partition 2, which only cluster B's topic has.
        producer = Producer({**client_config(setup.gateway, f"7.{APP}"), "message.timeout.ms": 10000})
        errors: list[Any] = []
        producer.produce("orders", b"moved", partition=2, on_delivery=lambda err, msg: errors.append(err))
        producer.flush(15)
        assert errors == [None]
    finally:
        setup.set_address(7, setup.a)
        wait_for(lambda: landed_on(setup) == sasl_port(setup.a), timeout=10)


def test_manager_down_at_start_with_and_without_the_config_cache(setup: Setup, tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}/gateway"  # nothing listens once closed
    without = GatewayProcess(tmp_path / "without", ["--manager-url", dead, "--listen", "127.0.0.1:0"])
    try:
        assert without.launch().wait_exit(30) == 1
    finally:
        without.stop()
    errors = [line for line in without.log().splitlines() if "ERROR" in line]
    assert len(errors) == 1 and "no --config-cache file was given" in errors[0], without.log()

    cache = tmp_path / "cache.json"
    cache.write_bytes(setup.cache.read_bytes())
    with running_gateway(tmp_path / "with", ["--manager-url", dead, "--listen", "127.0.0.1:0",
                                             "--config-cache", str(cache)],
                         {"gateway.sync.interval.ms": "200"}) as gateway:
        assert "starting from the config cache" in gateway.log()
        md = AdminClient(client_config(gateway, f"7.{APP}")).list_topics(timeout=10)
        assert {b.port for b in md.brokers.values()} == {sasl_port(setup.a)}
        time.sleep(1)  # several failed pulls: still one warning about them
        assert gateway.log().count("discovery pull from the management service failed") == 1

    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    bad = GatewayProcess(tmp_path / "broken", ["--manager-url", dead, "--listen", "127.0.0.1:0",
                                               "--config-cache", str(broken)])
    try:
        assert bad.launch().wait_exit(30) == 1
    finally:
        bad.stop()
    assert "the config cache cannot be used" in bad.log()


def test_the_manager_stopped_and_started_again_while_the_gateway_runs(setup: Setup, tmp_path: Path) -> None:
    """The gateway keeps its last settings through the outage (one warning for it), logs the
    recovery once, and takes the changes made after it."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    manager = ManagerProcess(tmp_path / "manager", port=port).start()
    password = manager.admin_password  # a restart does not print it again
    try:
        assert password

        def set_address(broker: BrokerProcess) -> None:
            assert password
            with httpx.Client(base_url=manager.url, timeout=30) as http:
                r = Session(http, "admin", password).form(
                    "/gateway-configs", {"type": "SD_CLUSTER_ID", "name": "7",
                                         "value": broker.bootstrap_for("SASL_PLAINTEXT")})
                assert r.status_code == 303, r.text

        set_address(setup.a)
        with running_gateway(tmp_path / "gateway", ["--manager-url", manager.gateway_url, "--listen", "127.0.0.1:0"],
                             {"gateway.sync.interval.ms": "200"}) as gateway:
            assert landed_on(setup, gateway=gateway) == sasl_port(setup.a)
            manager.stop()
            wait_for(lambda: "discovery pull from the management service failed" in gateway.log())
            time.sleep(1.5)  # several more failed pulls
            assert landed_on(setup, gateway=gateway) == sasl_port(setup.a), "the last settings are kept"
            manager.start()
            wait_for(lambda: "discovery pull from the management service recovered" in gateway.log())
            set_address(setup.b)
            wait_for(lambda: landed_on(setup, gateway=gateway) == sasl_port(setup.b), timeout=15)
            log = gateway.log()
        assert log.count("discovery pull from the management service failed") == 1, log
        assert log.count("discovery pull from the management service recovered") == 1, log
    finally:
        manager.stop()


def test_an_application_over_its_rate_is_throttled_not_disconnected(setup: Setup) -> None:
    import asyncio

    from kaflet.network.client import BrokerClient, ClientSecurity

    async def metadata_requests(n: int) -> tuple[float, list[int]]:
        security = ClientSecurity("SASL_PLAINTEXT", sasl_mechanism="PLAIN", sasl_username="7.app_slow",
                                  sasl_password=PASSWORD)
        throttles = []
        async with await BrokerClient.connect("127.0.0.1", setup.gateway.port, security) as client:
            began = time.monotonic()
            for _ in range(n):
                # Metadata v4 for every topic, no auto-creation: throttle_time_ms comes first.
                body = await client.send_raw(3, 4, b"\xff\xff\xff\xff\x00", timeout_s=30)
                throttles.append(struct.unpack_from(">i", body, 0)[0])
            return time.monotonic() - began, throttles

    elapsed, throttles = asyncio.run(metadata_requests(24))
    rate = 24 / elapsed
    print(f"\napp_slow sent {rate:.2f} requests/s under an sp-limit of {SLOW_RATE}/s; "
          f"{sum(1 for t in throttles if t)} of 24 answers throttled")
    assert any(throttles)
    # A new client may send one window's worth at once (Kafka's rates), so the mean stays under
    # the limit plus that allowance, and well above half the limit.
    assert 0.5 * SLOW_RATE <= rate <= (24 + SLOW_RATE) / 24 * SLOW_RATE * 1.3


def test_an_unreachable_cluster_gets_retriable_errors_until_it_is_back(setup: Setup) -> None:
    import asyncio

    from kaflet.network.client import BrokerClient, ClientSecurity

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{s.getsockname()[1]}"  # nothing listens once closed
    r = setup.admin.form("/gateway-configs", {"type": "SD_CLUSTER_ID", "name": "12", "value": dead})
    assert r.status_code == 303, r.text
    wait_for(lambda: '"12"' in setup.cache.read_text(), 10)

    async def metadata_until_back() -> tuple[int, int]:
        security = ClientSecurity("SASL_PLAINTEXT", sasl_mechanism="PLAIN", sasl_username=f"12.{APP}",
                                  sasl_password=PASSWORD)
        # The login is accepted unchecked while the cluster is down (its brokers check it later).
        async with await BrokerClient.connect("127.0.0.1", setup.gateway.port, security) as client:
            body = await client.send_raw(3, 4, struct.pack(">ih", 1, 6) + b"orders\x00", timeout_s=30)
            brokers = struct.unpack_from(">i", body, 4)[0]
            # throttle, brokers (none), cluster_id (null), controller_id, topics: the first one's error code
            topic_error = struct.unpack_from(">h", body, 4 + 4 + 2 + 4 + 4)[0]
            assert brokers == 0
            setup.set_address(12, setup.a)  # the cluster is "back" at another address
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                body = await client.send_raw(3, 4, struct.pack(">ih", 1, 6) + b"orders\x00", timeout_s=30)
                if struct.unpack_from(">i", body, 4)[0] == 1:
                    return topic_error, struct.unpack_from(">i", body, 4)[0]
                await asyncio.sleep(0.1)
        return topic_error, 0

    try:
        topic_error, brokers = asyncio.run(metadata_until_back())
        assert topic_error == 5  # LEADER_NOT_AVAILABLE: retriable
        assert brokers == 1  # the same connection's next Metadata, once the cluster answers
        log = setup.gateway.log()
        assert log.count("cluster 12's brokers failed") == 1 and "cluster 12's brokers recovered" in log
    finally:
        setup.admin.form("/gateway-configs", {"type": "SD_CLUSTER_ID", "name": "12", "value": dead})


@pytest.mark.parametrize(("args", "message"), [
    (["--manager-url", "http://m:8080/gateway", "--mode", "proxy", "--listen", "127.0.0.1:0"],
     "proxy.broker.port.base must be set"),
    (["--manager-url", "http://m:8080/gateway", "--advertised-host", "gw"], "is for proxy mode"),
    (["--listen", "0.0.0.0:9092"], "gateway.manager.url (--manager-url) must be"),
])
def test_the_command_refuses_what_it_cannot_do_in_one_line(args: list[str], message: str) -> None:
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "kaflet.cli", "gateway", *args], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1 and message in done.stderr, done.stderr


def test_pipelined_requests_of_flexible_and_older_versions_are_answered_in_order(setup: Setup) -> None:
    import asyncio

    from kaflet.network.client import BrokerClient, ClientSecurity
    from kaflet.protocol import codec

    Metadata = codec.request_class(3)

    def request(v: int) -> bytes:
        topic = Metadata.MetadataRequestTopic(name="orders", topic_id=None) if v >= 10 else \
            Metadata.MetadataRequestTopic(name="orders")
        return bytes(Metadata(topics=[topic], allow_auto_topic_creation=False,
                              include_cluster_authorized_operations=False,
                              include_topic_authorized_operations=False).encode(version=v))

    async def pipelined() -> list[int]:
        security = ClientSecurity("SASL_PLAINTEXT", sasl_mechanism="PLAIN", sasl_username=f"8.{APP}",
                                  sasl_password=PASSWORD)
        async with await BrokerClient.connect("127.0.0.1", setup.gateway.port, security) as client:
            # Sent back to back before any answer; the client fails on an answer out of order.
            versions = [1, 9, 4, 12, 7]
            answers = await asyncio.gather(*(client.send(3, v, request(v), timeout_s=20) for v in versions))
            return [len(a.topics[0].partitions) for a in answers]

    assert asyncio.run(pipelined()) == [3] * 5  # cluster B's topic, at every version
