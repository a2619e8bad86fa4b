"""`kaflet gateway` with TLS on both sides and its /metrics, with real processes: a `kaflet
manager`, two single-broker kaflet clusters (ids 7 and 8) whose discovery addresses are their
SASL_SSL listeners, and two gateways listening with SASL_SSL, one in discovery mode and one in
proxy mode, both serving /metrics. Clients (confluent-kafka, kafka-python) trust the test CA and
log in as ``<clusterId>.<appId>``."""

from __future__ import annotations

import re
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient
from kafka import KafkaProducer

from tests.support.broker_process import BrokerProcess
from tests.support.certs import Pki, make_pki
from tests.support.cli import free_port_range
from tests.support.gateway_process import GatewayProcess, gateway_broker, running_gateway, two_clusters
from tests.support.manager import Session, wait_for
from tests.support.topics import create_topic, kafka_python_values, poll_values

SYNC_MS = 300
APP = "app_a"
PASSWORD = "pw-a"
SLOW_RATE = 2  # requests per second of app_slow at the gateways (an sp-limit in the manager)
PER_CLUSTER = 10
JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
        f'password="admin-secret" user_admin="admin-secret" user_7.{APP}="{PASSWORD}" user_8.{APP}="{PASSWORD}" '
        f'user_7.app_slow="{PASSWORD}";')
_SAMPLE = re.compile(r'^(?P<name>[a-z_]+)(?:\{(?P<labels>.*)\})? (?P<value>\S+)$')
_LABEL = re.compile(r'(\w+)="([^"]*)"')
_METRICS_AT = re.compile(r"metrics for Prometheus on (http://\S+/metrics)")


@dataclass
class Setup:
    admin: Session
    a: BrokerProcess
    b: BrokerProcess
    pki: Pki
    discovery: GatewayProcess
    proxy: GatewayProcess
    base: int  # the proxy's proxy.broker.port.base

    def proxy_port(self, cluster_id: int) -> int:
        return self.base + cluster_id * PER_CLUSTER + 1  # both brokers are broker 1

    def gateway(self, mode: str) -> GatewayProcess:
        return self.discovery if mode == "discovery" else self.proxy


def metrics_url(gateway: GatewayProcess) -> str:
    m = _METRICS_AT.search(gateway.log())
    assert m, gateway.log()[-2000:]
    return m.group(1)


def tls_props(pki: Pki) -> dict[str, str]:
    """The gateway's settings for SASL_SSL on both sides, /metrics on a free port."""
    return {"gateway.sync.interval.ms": str(SYNC_MS),
            "ssl.keystore.type": "PEM", "ssl.keystore.location": str(pki.server_keystore),
            "upstream.security.protocol": "SASL_SSL", "upstream.ssl.truststore.location": str(pki.ca),
            "metrics.listener": "http://127.0.0.1:0"}


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    work = tmp_path_factory.mktemp("gateway-tls")
    pki = make_pki(work / "pki")

    def overrides(cluster_id: int, gateway_url: str) -> dict[str, str]:
        return {**gateway_broker(cluster_id, gateway_url, JAAS), "broker.id": "1",
                "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
                "listener.name.sasl_ssl.plain.sasl.jaas.config": JAAS,
                "ssl.keystore.type": "PEM", "ssl.keystore.location": str(pki.server_keystore),
                "group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": "1"}

    with two_clusters(work, overrides) as (manager, admin, a, b):
        for cluster_id, broker in ((7, a), (8, b)):
            r = admin.form("/gateway-configs", {"type": "SD_CLUSTER_ID", "name": str(cluster_id),
                                                "value": broker.bootstrap_for("SASL_SSL")})
            assert r.status_code == 303, r.text
        r = admin.form("/gateway-configs", {"type": "SD_SP_RATE", "name": "app_slow", "value": str(SLOW_RATE)})
        assert r.status_code == 303, r.text
        base = free_port_range(2 * PER_CLUSTER) - 7 * PER_CLUSTER
        args = ["--manager-url", manager.gateway_url, "--listen", "SASL_SSL://127.0.0.1:0"]
        with running_gateway(work / "discovery", args, tls_props(pki)) as discovery, \
                running_gateway(work / "proxy", [*args, "--mode", "proxy"],
                                {**tls_props(pki), "proxy.broker.port.base": str(base),
                                 "proxy.broker.ports.per.cluster": str(PER_CLUSTER)}) as proxy:
            s = Setup(admin, a, b, pki, discovery, proxy, base)
            for gateway in (discovery, proxy):
                wait_for(lambda g=gateway: "sp-limit: 1 special rates" in g.log() and "cluster 8:" in g.log())
            yield s


def confluent(setup: Setup, mode: str, username: str = f"7.{APP}", password: str = PASSWORD) -> dict[str, Any]:
    return {"bootstrap.servers": setup.gateway(mode).bootstrap, "security.protocol": "SASL_SSL",
            "ssl.ca.location": str(setup.pki.ca), "sasl.mechanism": "PLAIN", "sasl.username": username,
            "sasl.password": password}


def scrape(gateway: GatewayProcess) -> str:
    r = httpx.get(metrics_url(gateway), timeout=10)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    return r.text


def sample(text: str, name: str, **labels: str) -> float | None:
    """The value of the series ``name`` with exactly ``labels`` in a scrape; None when absent."""
    for line in text.splitlines():
        m = _SAMPLE.match(line)
        if m and m.group("name") == name and dict(_LABEL.findall(m.group("labels") or "")) == labels:
            return float(m.group("value"))
    return None


def difference(before: str, after: str, name: str, **labels: str) -> float:
    """How much a series grew between two scrapes (an absent series counts as 0)."""
    return (sample(after, name, **labels) or 0) - (sample(before, name, **labels) or 0)


@pytest.mark.parametrize("mode", ["discovery", "proxy"])
def test_confluent_kafka_over_sasl_ssl(setup: Setup, mode: str) -> None:
    topic = f"tls-{mode}-{uuid.uuid4().hex[:6]}"
    create_topic(setup.a.bootstrap, topic, partitions=1)
    values = [f"{mode}-{i}".encode() for i in range(20)]
    producer = Producer({**confluent(setup, mode), "enable.idempotence": True})
    errors: list[Any] = []
    for v in values:
        producer.produce(topic, v, on_delivery=lambda err, msg: errors.append(err))
    assert producer.flush(30) == 0 and errors == [None] * len(values)
    consumer = Consumer({**confluent(setup, mode), "group.id": f"g-{uuid.uuid4()}", "auto.offset.reset": "earliest"})
    try:
        got = poll_values(consumer, topic, len(values))
    finally:
        consumer.close()
    assert got == values
    # Where the client was sent: the brokers' own TLS listener, or the gateway's broker ports.
    brokers = AdminClient(confluent(setup, mode)).list_topics(timeout=10).brokers
    ports = {b.port for b in brokers.values()}
    direct = int(setup.a.bootstrap_for("SASL_SSL").rsplit(":", 1)[1])
    assert ports == ({direct} if mode == "discovery" else {setup.proxy_port(7)})


@pytest.mark.parametrize("mode", ["discovery", "proxy"])
def test_kafka_python_over_sasl_ssl(setup: Setup, mode: str) -> None:
    sasl = {"bootstrap_servers": setup.gateway(mode).bootstrap, "security_protocol": "SASL_SSL",
            "ssl_cafile": str(setup.pki.ca), "sasl_mechanism": "PLAIN", "sasl_plain_username": f"8.{APP}",
            "sasl_plain_password": PASSWORD}
    topic = f"kp-{mode}-{uuid.uuid4().hex[:6]}"
    create_topic(setup.b.bootstrap, topic, partitions=1)
    producer = KafkaProducer(acks=1, **sasl)
    try:
        for i in range(5):
            producer.send(topic, f"kp-{i}".encode()).get(timeout=20)
    finally:
        producer.close()
    got = kafka_python_values(topic, **sasl)
    assert got == [f"kp-{i}".encode() for i in range(5)]


def test_a_client_without_tls_is_closed_with_one_line(setup: Setup) -> None:
    errors: list[Any] = []
    admin = AdminClient({**confluent(setup, "proxy"), "security.protocol": "SASL_PLAINTEXT",
                         "error_cb": lambda e: errors.append(e)})
    deadline = time.monotonic() + 10
    while not errors and time.monotonic() < deadline:
        admin.poll(0.2)
    assert errors
    wait_for(lambda: "TLS handshake failed" in setup.proxy.log(), 10)


def test_metrics_count_real_traffic_in_both_modes(setup: Setup) -> None:
    import asyncio
    import ssl

    from kaflet.network.client import BrokerClient, ClientSecurity

    async def slow_app_requests(gateway: GatewayProcess, n: int) -> tuple[list[int], str]:
        """``n`` Metadata requests as 7.app_slow, as fast as answered, and a scrape while connected."""
        security = ClientSecurity("SASL_SSL", ssl_context=ssl.create_default_context(cafile=str(setup.pki.ca)),
                                  sasl_mechanism="PLAIN", sasl_username="7.app_slow", sasl_password=PASSWORD)
        throttles = []
        async with await BrokerClient.connect("127.0.0.1", gateway.port, security) as client:
            for _ in range(n):
                body = await client.send_raw(3, 4, b"\xff\xff\xff\xff\x00", timeout_s=30)
                throttles.append(int.from_bytes(body[:4], "big", signed=True))
            return throttles, await asyncio.to_thread(scrape, gateway)

    for mode in ("discovery", "proxy"):
        gateway = setup.gateway(mode)
        before = scrape(gateway)
        topic = f"m-{mode}-{uuid.uuid4().hex[:6]}"
        create_topic(setup.a.bootstrap, topic, partitions=1)
        producer = Producer(confluent(setup, mode))
        for i in range(10):
            producer.produce(topic, b"x" * 1000 + bytes([i]))
        assert producer.flush(30) == 0
        bad = AdminClient({**confluent(setup, mode, password="wrong"), "error_cb": lambda e: None})
        with pytest.raises(Exception):  # noqa: B017 - librdkafka's KafkaException of the refused login
            bad.list_topics(timeout=3)
        throttles, during = asyncio.run(slow_app_requests(gateway, 6))
        after = scrape(gateway)

        def grew(name: str, **labels: str) -> float:
            return difference(before, after, name, **labels)  # noqa: B023 - used before the loop moves on

        assert grew("kaflet_gateway_requests_total", cluster="7", request="Metadata") >= 1, mode
        assert grew("kaflet_gateway_requests_total", cluster="", request="SaslHandshake") >= 2, mode
        assert grew("kaflet_gateway_response_bytes_total", cluster="7", request="Metadata") > 0, mode
        if mode == "proxy":
            # Produce goes through the gateway: its requests, bytes and upstream times are counted.
            assert grew("kaflet_gateway_requests_total", cluster="7", request="Produce") >= 1
            assert grew("kaflet_gateway_request_bytes_total", cluster="7", request="Produce") >= 10_000
            assert grew("kaflet_gateway_upstream_request_time_ms_count", cluster="7", request="Produce") >= 1
        else:
            # Produce went straight to the broker, Metadata to the cluster (unless cached).
            assert sample(after, "kaflet_gateway_requests_total", cluster="7", request="Produce") is None
            assert (sample(after, "kaflet_gateway_upstream_request_time_ms_count", cluster="7", request="Metadata")
                    or 0) >= 1
        assert grew("kaflet_gateway_app_requests_total", cluster="7", app="app_slow") >= 6, mode
        assert any(throttles) and grew("kaflet_gateway_throttled_requests_total", cluster="7", app="app_slow") >= 1
        assert grew("kaflet_gateway_throttle_time_ms_total", cluster="7", app="app_slow") >= 1, mode
        assert grew("kaflet_gateway_failed_authentication_total") >= 1, mode
        assert (sample(during, "kaflet_gateway_connections", cluster="7", app="app_slow") or 0) >= 1, mode
        assert sample(after, "kaflet_gateway_upstream_available", cluster="7") == 1, mode
        assert sample(after, "kaflet_gateway_clusters") == 2, mode
        assert sample(after, "kaflet_gateway_sync_failures_total") == 0, mode
        age = sample(after, "kaflet_gateway_sync_last_success_age_seconds")
        assert age is not None and 0 <= age < 10, mode
        assert (sample(after, "process_resident_memory_bytes") or 0) > 0, mode
        producer.flush(1)


@pytest.mark.parametrize(("args", "props", "message"), [
    (["--listen", "SASL_SSL://127.0.0.1:0"], {}, "a TLS listener needs ssl.keystore.location"),
    (["--listen", "SASL_SSL://127.0.0.1:0"], {"ssl.keystore.location": "/nonexistent/keystore.pem"},
     "ssl.keystore.location=/nonexistent/keystore.pem: cannot read it"),
    (["--listen", "127.0.0.1:0"], {"ssl.keystore.location": "/k.pem"}, "ssl.* settings are for a SASL_SSL listener"),
    (["--listen", "SSL://127.0.0.1:0"], {}, "its protocol is one of SASL_PLAINTEXT, SASL_SSL"),
    (["--listen", "127.0.0.1:0"], {"upstream.security.protocol": "SASL_SSL"}, "the two must be the same"),
    (["--listen", "127.0.0.1:0", "--mode", "proxy"],
     {"proxy.broker.port.base": "30000", "upstream.security.protocol": "SASL_SSL",
      "upstream.ssl.truststore.location": "/nonexistent/ca.pem"}, "upstream.ssl.* keys"),
    (["--listen", "127.0.0.1:0", "--metrics-listener", "127.0.0.1:9404"], {}, "must be http://host:port"),
])
def test_a_bad_tls_or_metrics_setup_is_one_line_at_start(tmp_path: Path, args: list[str], props: dict[str, str],
                                                          message: str) -> None:
    config = tmp_path / "gateway.properties"
    config.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    done = subprocess.run([sys.executable, "-m", "kaflet.cli", "gateway", "--manager-url", "http://m:8080/gateway",
                           "--config", str(config), *args], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1 and message in done.stderr, done.stderr


def test_a_wrong_certificate_is_one_line_at_start(tmp_path: Path, setup: Setup) -> None:
    """A keystore whose key is not the certificate's: refused before anything listens."""
    other = make_pki(tmp_path / "other")
    keystore = tmp_path / "mismatched.pem"
    keystore.write_bytes(other.server_key.read_bytes() + setup.pki.server_cert.read_bytes())
    config = tmp_path / "gateway.properties"
    config.write_text(f"ssl.keystore.location={keystore}\n")
    done = subprocess.run([sys.executable, "-m", "kaflet.cli", "gateway", "--manager-url", "http://m:8080/gateway",
                           "--listen", "SASL_SSL://127.0.0.1:0", "--config", str(config)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1 and "cannot load the key and certificate chain" in done.stderr, done.stderr
