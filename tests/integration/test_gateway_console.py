"""The manager's console lists the `kaflet gateway` processes that pull from it, with real
processes: two `kaflet manager` processes sharing one SQLite database and two gateways, each
pulling from one of them. Also: a discovery setting deleted in the manager stops being applied
by a running gateway (its version is raised by the deletion)."""

from __future__ import annotations

import struct
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from cryptography.fernet import Fernet

from kaflet.manager.gateway_instances import STALE_INTERVALS, WRITE_EVERY_MS
from tests.support.gateway_process import GatewayProcess, running_gateway
from tests.support.manager import ManagerProcess, Session, wait_for
from tests.support.raw_client import RawClient

SYNC_MS = 500
KEYS = {"secret_key": "gateway-console-test-secret-key-0123456789",
        "encryption_key": Fernet.generate_key().decode()}
#: An sp-limit for the test's own address, in requests per second.
SLOW_RATE = 2


@dataclass
class Setup:
    a: ManagerProcess
    b: ManagerProcess
    admin_a: Session
    admin_b: Session
    work: Path


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    work = tmp_path_factory.mktemp("gateway-console")
    url = f"sqlite:///{work / 'shared.db'}"
    a = ManagerProcess(work / "a", url, cluster_sample_interval_s=3600, **KEYS)
    b = ManagerProcess(work / "b", url, cluster_sample_interval_s=3600, **KEYS)
    try:
        a.start()
        b.start()
        assert a.admin_password or b.admin_password
        password = a.admin_password or b.admin_password or ""
        with httpx.Client(base_url=a.url, timeout=30) as on_a, httpx.Client(base_url=b.url, timeout=30) as on_b:
            yield Setup(a, b, Session(on_a, "admin", password), Session(on_b, "admin", password), work)
    finally:
        a.stop()
        b.stop()


def start_gateway(workdir: Path, manager: ManagerProcess) -> Any:
    return running_gateway(workdir, ["--manager-url", manager.gateway_url, "--listen", "127.0.0.1:0"],
                           {"gateway.sync.interval.ms": str(SYNC_MS)})


def listed(session: Session, gateway: GatewayProcess) -> dict[str, Any] | None:
    """The JSON API's entry of ``gateway`` (its instance id names its PID: it listens on port 0)."""
    assert gateway.proc is not None
    found = [g for g in session.api("GET", "/gateway-instances").json()
             if g["instance_id"].endswith(f"/pid{gateway.proc.pid}")]
    assert len(found) <= 1, found
    return found[0] if found else None


def row_of(page: str, instance: str) -> str:
    """The console table's row of ``instance``."""
    start = page.index(instance)
    return page[page.rindex("<tr", 0, start):page.index("</tr>", start)]


def test_the_console_lists_gateways_of_every_manager_process_and_marks_stopped_ones_stale(setup: Setup) -> None:
    with start_gateway(setup.work / "gw1", setup.a) as one, start_gateway(setup.work / "gw2", setup.b) as two:
        wait_for(lambda: listed(setup.admin_a, one) is not None and listed(setup.admin_a, two) is not None,
                 timeout=15)
        first = listed(setup.admin_a, two)
        assert first is not None
        assert first["address"] == "127.0.0.1" and first["sync_interval_ms"] == SYNC_MS and not first["stale"]
        assert first["version"] == -1  # no cluster addresses yet
        # A change of the cluster addresses made through one process: both gateways pull it
        # and the list shows the version they hold, on either process.
        r = setup.admin_b.form("/gateway-configs", {"type": "SD_CLUSTER_ID", "name": "7", "value": "h1:9093"})
        assert r.status_code == 303, r.text
        version = max(g["version"] for g in setup.admin_b.api("GET", "/gateway-instances").json()) + 1
        wait_for(lambda: all((listed(setup.admin_b, g) or {}).get("version", -1) >= version for g in (one, two)),
                 timeout=45)
        page = setup.admin_a.client.get("/gateway-instances").text
        assert one.proc is not None and two.proc is not None
        for gateway in (one, two):
            row = row_of(page, f"/pid{gateway.proc.pid}")
            entry = listed(setup.admin_a, gateway)
            assert entry is not None
            assert "127.0.0.1" in row and f"<td>{entry['version']}</td>" in row and "pulling" in row, row
        two.stop()
        stopped = time.monotonic()
        wait_for(lambda: (listed(setup.admin_a, two) or {}).get("stale", False), timeout=25)
        # Stale no sooner than the rule says (its last recorded pull may lag by one write period).
        assert time.monotonic() - stopped >= (STALE_INTERVALS * WRITE_EVERY_MS - WRITE_EVERY_MS) / 1000 - 1
        page = setup.admin_b.client.get("/gateway-instances").text
        assert "stale" in row_of(page, f"/pid{two.proc.pid}")
        assert "pulling" in row_of(page, f"/pid{one.proc.pid}")
        assert (listed(setup.admin_b, one) or {}).get("stale") is False


def api_versions_throttles(gateway: GatewayProcess, n: int) -> list[int]:
    """throttle_time_ms of ``n`` ApiVersions v1 answers on one connection (no login needed;
    the per-address rate applies to every request)."""
    client = RawClient(gateway.bootstrap, timeout=20)
    try:
        throttles = []
        for _ in range(n):
            client.send_raw(client.frame(18, 1, b""))
            body = client.read_frame()
            (count,) = struct.unpack_from(">i", body, 6)
            throttles.append(struct.unpack_from(">i", body, 10 + 6 * count)[0])
        return throttles
    finally:
        client.close()


def test_a_deleted_rate_stops_being_applied_by_a_running_gateway(setup: Setup) -> None:
    with start_gateway(setup.work / "gw3", setup.a) as gateway:
        r = setup.admin_a.form("/gateway-configs", {"type": "SD_SP_RATE", "name": "127.0.0.1",
                                                    "value": str(SLOW_RATE)})
        assert r.status_code == 303, r.text
        wait_for(lambda: "sp-limit: 1 special rates" in gateway.log(), timeout=15)
        assert any(api_versions_throttles(gateway, 12))
        page = setup.admin_a.client.get("/gateway-configs").text
        row = row_of(page, "<td>127.0.0.1</td>")
        config_id = row.split('action="/gateway-configs/', 1)[1].split("/", 1)[0]
        # Deleted through the other process: the gateway pulling from this one learns of it.
        r = setup.admin_b.form(f"/gateway-configs/{config_id}/delete", {})
        assert r.status_code == 303, r.text
        wait_for(lambda: "sp-limit: 0 special rates" in gateway.log(), timeout=15)
        assert not any(api_versions_throttles(gateway, 12))
        # A default rate deleted is dropped too (a null value of a newer version).
        r = setup.admin_b.form("/gateway-configs", {"type": "SD_IP_RATE", "value": str(SLOW_RATE)})
        assert r.status_code == 303, r.text
        wait_for(lambda: f"ip-rate: {SLOW_RATE} " in gateway.log(), timeout=15)
        assert any(api_versions_throttles(gateway, 12))
        page = setup.admin_b.client.get("/gateway-configs").text
        row = row_of(page, "<td>SD_IP_RATE</td>")
        config_id = row.split('action="/gateway-configs/', 1)[1].split("/", 1)[0]
        assert setup.admin_b.form(f"/gateway-configs/{config_id}/delete", {}).status_code == 303
        wait_for(lambda: "ip-rate: none" in gateway.log(), timeout=15)
        assert not any(api_versions_throttles(gateway, 12))
