"""`kaflet gateway` under hostile input and a connection storm, in discovery and proxy modes, with
real processes: a `kaflet manager`, two single-broker kaflet clusters (ids 7 and 8) and one
gateway of each mode. A corpus of malformed frames (truncated, huge or negative sizes, unknown
API keys and versions, bad SASL payloads, garbage after a real login) is sent on raw sockets:
each closes its own connection with one log line, while a logged-in connection opened before
goes on being answered. A peer announcing a request of 100 MB costs the gateway only what it
sent. Then 1,000 clients connect, log in and ask for Metadata in waves; every one is answered
and the gateway's RSS is reported."""

from __future__ import annotations

import asyncio
import os
import random
import socket
import struct
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from kaflet.network.client import BrokerClient, ClientSecurity
from tests.support.cli import free_port_range
from tests.support.gateway_process import GatewayProcess, gateway_broker, running_gateway, two_clusters
from tests.support.manager import wait_for

SYNC_MS = 300
APP = "app_a"
PASSWORD = "pw-a"
PER_CLUSTER = 10
JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
        f'password="admin-secret" user_admin="admin-secret" user_7.{APP}="{PASSWORD}" user_8.{APP}="{PASSWORD}";')
METADATA_ALL = b"\xff\xff\xff\xff\x00"  # Metadata v4: every topic, no auto-creation
STORM_CLIENTS = 1000
STORM_WAVE = 250


@dataclass
class Setup:
    gateways: dict[str, GatewayProcess]


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    work = tmp_path_factory.mktemp("gateway-hostile")

    def overrides(cluster_id: int, gateway_url: str) -> dict[str, str]:
        # The storm's clients, each logged in as the same application through a proxy.
        return {**gateway_broker(cluster_id, gateway_url, JAAS), "broker.id": "1",
                "max.sessions.per.user": str(4 * STORM_CLIENTS)}

    with two_clusters(work, overrides) as (manager, admin, a, b):
        for cluster_id, broker in ((7, a), (8, b)):
            r = admin.form("/gateway-configs", {"type": "SD_CLUSTER_ID", "name": str(cluster_id),
                                                "value": broker.bootstrap_for("SASL_PLAINTEXT")})
            assert r.status_code == 303, r.text
        base = free_port_range(2 * PER_CLUSTER) - 7 * PER_CLUSTER
        args = ["--manager-url", manager.gateway_url, "--listen", "127.0.0.1:0"]
        props = {"gateway.sync.interval.ms": str(SYNC_MS), "connection.failed.authentication.delay.ms": "0"}
        with running_gateway(work / "discovery", args, props) as discovery, \
                running_gateway(work / "proxy", [*args, "--mode", "proxy"],
                                {**props, "proxy.broker.port.base": str(base),
                                 "proxy.broker.ports.per.cluster": str(PER_CLUSTER)}) as proxy:
            for gateway in (discovery, proxy):
                wait_for(lambda g=gateway: "cluster 8:" in g.log())
            yield Setup({"discovery": discovery, "proxy": proxy})


# -- raw frames ----------------------------------------------------------------------------------

def frame(api_key: int, version: int, body: bytes = b"", correlation_id: int = 1) -> bytes:
    """A request with a v1 header (client id "hostile")."""
    payload = struct.pack(">hhih", api_key, version, correlation_id, 7) + b"hostile" + body
    return struct.pack(">i", len(payload)) + payload


def read_frame(sock: socket.socket) -> bytes:
    size = struct.unpack(">i", _read_exactly(sock, 4))[0]
    return _read_exactly(sock, size)


def _read_exactly(sock: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise ConnectionError("closed by the gateway")
        out += chunk
    return out


def plain_token(username: str, password: str) -> bytes:
    return b"\x00" + username.encode() + b"\x00" + password.encode()


def logged_in(port: int, username: str = f"7.{APP}") -> socket.socket:
    """A socket logged in with SaslHandshake v1 and SaslAuthenticate v1 (PLAIN)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=15)
    sock.sendall(frame(17, 1, struct.pack(">h", 5) + b"PLAIN"))
    assert read_frame(sock)[4:6] == b"\x00\x00"  # correlation id, then error_code NONE
    token = plain_token(username, PASSWORD)
    sock.sendall(frame(36, 1, struct.pack(">i", len(token)) + token, correlation_id=2))
    assert read_frame(sock)[4:6] == b"\x00\x00"
    return sock


def metadata_answered(sock: socket.socket, correlation_id: int) -> bool:
    sock.sendall(frame(3, 4, METADATA_ALL, correlation_id))
    return struct.unpack(">i", read_frame(sock)[:4])[0] == correlation_id


def closed_by_gateway(sock: socket.socket, timeout: float = 15) -> bool:
    """Whether the gateway closes the connection (whatever it answered first) within ``timeout``."""
    sock.settimeout(timeout)
    try:
        while sock.recv(65536):
            pass
    except TimeoutError:
        return False
    except ConnectionResetError:
        return True
    return True


def lines_about(gateway: GatewayProcess, after: int, port: int, timeout: float = 10) -> list[str]:
    """The gateway's log lines past line ``after`` naming client port ``port``, once there is one."""
    deadline = time.monotonic() + timeout
    while True:
        lines = [line for line in gateway.log().splitlines()[after:] if f":{port}" in line]
        if lines or time.monotonic() > deadline:
            time.sleep(0.2)  # a second line would be written right after the first
            return [line for line in gateway.log().splitlines()[after:] if f":{port}" in line]
        time.sleep(0.05)


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError(f"no VmRSS for {pid}")


_rng = random.Random(17)
_GARBAGE = bytes(_rng.getrandbits(8) for _ in range(1024))
_SASL_TOKEN_TOO_BIG = struct.pack(">i", 4 * 1024 * 1024)  # over sasl.server.max.receive.size
# (name, log in first, bytes sent, the client closes its side after them)
CORPUS: list[tuple[str, bool, bytes, bool]] = [
    ("truncated-size", False, b"\x00\x00", True),
    ("truncated-frame", False, struct.pack(">i", 100) + b"\x00\x12\x00\x00", True),
    ("huge-size", False, b"\x7f\xff\xff\xff", False),
    ("negative-size", False, b"\xff\xff\xff\xfe", False),
    ("sasl-frame-over-the-limit", False, _SASL_TOKEN_TOO_BIG + b"x" * 100, False),
    ("empty-frame", False, b"\x00\x00\x00\x00", False),
    ("short-header", False, b"\x00\x00\x00\x03\x00\x12\x00", False),
    ("unknown-api-key", False, frame(999, 0), False),
    ("produce-before-login", False, frame(0, 7, b"\x00" * 20), False),
    ("metadata-before-login", False, frame(3, 99, METADATA_ALL), False),
    ("authenticate-before-handshake", False, frame(36, 1, struct.pack(">i", 3) + b"abc"), False),
    ("handshake-body-truncated", False, frame(17, 1, b"\x00\x40PL"), False),
    ("unknown-mechanism", False, frame(17, 1, struct.pack(">h", 5) + b"GSSAP"), False),
    ("garbage-plain-token", False,
     frame(17, 1, struct.pack(">h", 5) + b"PLAIN") + frame(36, 1, struct.pack(">i", 9) + b"no-nul-at", 2), False),
    ("token-length-past-the-frame", False,
     frame(17, 1, struct.pack(">h", 5) + b"PLAIN") + frame(36, 1, struct.pack(">i", 1 << 30) + b"x", 2), False),
    ("raw-token-garbage", False, frame(17, 0, struct.pack(">h", 5) + b"PLAIN") + struct.pack(">i", 64) + _GARBAGE[:64],
     False),
    ("random-bytes", False, _GARBAGE, False),
    ("garbage-after-login", True, struct.pack(">i", 200) + _GARBAGE[:200], False),
    ("unknown-api-key-after-login", True, frame(999, 3, b"\x00" * 8, 3), False),
    ("metadata-version-99-after-login", True, frame(3, 99, METADATA_ALL, 3), False),
    ("metadata-body-truncated-after-login", True, frame(3, 4, b"\x00\x00\x00\x05\x00\x03ab", 3), False),
    ("truncated-after-login", True, struct.pack(">i", 5000) + b"\x00\x03\x00\x04", True),
]


@pytest.mark.parametrize("mode", ["discovery", "proxy"])
def test_a_corpus_of_malformed_frames_closes_only_its_own_connections(setup: Setup, mode: str) -> None:
    gateway = setup.gateways[mode]
    assert gateway.proc is not None
    bystander = logged_in(gateway.port)
    correlation_id = 100
    try:
        for name, login, payload, half_close in CORPUS:
            lines_before = len(gateway.log().splitlines())
            sock = logged_in(gateway.port) if login else socket.create_connection(("127.0.0.1", gateway.port),
                                                                                  timeout=15)
            port = sock.getsockname()[1]
            try:
                sock.sendall(payload)
                if half_close:
                    sock.shutdown(socket.SHUT_WR)
                assert closed_by_gateway(sock), f"{name}: the gateway kept the connection open"
            finally:
                sock.close()
            # One line says why, and names the connection.
            lines = lines_about(gateway, lines_before, port)
            assert len(lines) == 1, (name, lines)
            assert gateway.proc.poll() is None, f"{name}: the gateway exited"
            correlation_id += 1
            assert metadata_answered(bystander, correlation_id), name
    finally:
        bystander.close()
    assert "Traceback" not in gateway.log()


@pytest.mark.parametrize("mode", ["discovery", "proxy"])
def test_announcing_huge_requests_costs_only_what_was_sent(setup: Setup, mode: str) -> None:
    """40 logged-in connections each announce a 100 MB request (within socket.request.max.bytes)
    and send 10 KB of it: the gateway's RSS grows by a few MB, not 4 GB."""
    gateway = setup.gateways[mode]
    assert gateway.proc is not None
    before = rss_kib(gateway.proc.pid)
    socks = []
    try:
        for _ in range(40):
            sock = logged_in(gateway.port)
            sock.sendall(struct.pack(">i", 100_000_000) + frame(0, 7)[4:] + b"\x00" * 10_000)
            socks.append(sock)
        time.sleep(1)
        grown_mib = (rss_kib(gateway.proc.pid) - before) / 1024
        print(f"\n{mode}: RSS {before / 1024:.1f} MiB before, +{grown_mib:.1f} MiB with 40 connections "
              "each announcing 100 MB")
        assert grown_mib < 64
        bystander = logged_in(gateway.port)
        try:
            assert metadata_answered(bystander, 5)
        finally:
            bystander.close()
    finally:
        for sock in socks:
            sock.close()


@pytest.mark.parametrize("mode", ["discovery", "proxy"])
def test_a_storm_of_1000_clients_is_served(setup: Setup, mode: str) -> None:
    """1,000 clients connect, log in and ask for Metadata, 250 at a time; all are answered, the
    connections stay open to the end, and the gateway's RSS is reported."""
    gateway = setup.gateways[mode]
    assert gateway.proc is not None
    security = ClientSecurity("SASL_PLAINTEXT", sasl_mechanism="PLAIN", sasl_username=f"7.{APP}",
                              sasl_password=PASSWORD)
    before = rss_kib(gateway.proc.pid)

    async def client() -> BrokerClient:
        c = await BrokerClient.connect("127.0.0.1", gateway.port, security, connect_timeout_s=60,
                                       request_timeout_s=60)
        await c.send_raw(3, 4, METADATA_ALL)
        return c

    async def storm() -> tuple[list[float], int]:
        clients: list[BrokerClient] = []
        waves = []
        try:
            for _ in range(STORM_CLIENTS // STORM_WAVE):
                began = time.monotonic()
                clients += await asyncio.gather(*(client() for _ in range(STORM_WAVE)))
                waves.append(time.monotonic() - began)
            return waves, rss_kib(gateway.proc.pid) if gateway.proc else 0
        finally:
            for c in clients:
                await c.aclose()

    began = time.monotonic()
    waves, during = asyncio.run(asyncio.wait_for(storm(), 300))
    print(f"\n{mode}: {STORM_CLIENTS} clients (login + Metadata) in {time.monotonic() - began:.1f} s, waves of "
          f"{STORM_WAVE}: {', '.join(f'{w:.1f}' for w in waves)} s; gateway RSS {before / 1024:.1f} MiB before, "
          f"{during / 1024:.1f} MiB with {STORM_CLIENTS} connections open (pid {gateway.proc.pid}, "
          f"{len(os.listdir(f'/proc/{gateway.proc.pid}/fd'))} fds after)")
    assert len(waves) == STORM_CLIENTS // STORM_WAVE
    bystander = logged_in(gateway.port)
    try:
        assert metadata_answered(bystander, 9)
    finally:
        bystander.close()
