"""Fixtures shared by every test: real broker processes on 127.0.0.1, killed by PID."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

import pytest

from tests.support import filesystems
from tests.support.broker_process import BrokerProcess, running_broker
from tests.support.connect import ConnectUnavailable, class_path
from tests.support.java import JavaPrograms, JavaUnavailable, compile_programs


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"stopped by signal {signum}")


def pytest_configure(config: pytest.Config) -> None:
    """A SIGTERM (a CI timeout, `kill`, xdist stopping its workers) ends the run as Ctrl-C does:
    pytest then still runs the fixtures' finalizers, which stop every process they started."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _interrupt)


@pytest.fixture(scope="session", autouse=True)
def _no_stale_test_mounts() -> None:
    """File systems mounted by a test run that was killed before it unmounted them go now."""
    if filesystems.mounts_unavailable_reason() is None:
        filesystems.unmount_stale()


@pytest.fixture(scope="session")
def java(tmp_path_factory: pytest.TempPathFactory) -> JavaPrograms:
    """tests/java/*.java compiled once per session (per xdist worker), with the client's class path."""
    try:
        return compile_programs(tmp_path_factory.mktemp("java-classes"))
    except JavaUnavailable as exc:
        pytest.fail(str(exc))


@pytest.fixture(scope="session")
def connect_jars() -> list[Path]:
    """A Kafka Connect worker's class path (tests/support/connect.py). Missing jars skip the test,
    saying how to fetch them, except in CI (the CI variable set, as .ci/run sets it): there they fail."""
    try:
        return class_path()
    except ConnectUnavailable as exc:
        if os.environ.get("CI"):
            pytest.fail(str(exc))
        pytest.skip(str(exc))


@pytest.fixture(scope="module")
def kaflet_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One broker process for a test module (stopped, then killed if it hangs, by PID)."""
    with running_broker(tmp_path_factory.mktemp("broker") / "data") as broker:
        yield broker


@pytest.fixture
def fresh_broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    """A broker of the test's own, for tests that restart or kill it."""
    broker = BrokerProcess(tmp_path / "data")
    try:
        yield broker
    finally:
        broker.kill()


_BROKER_TROUBLE = ("Traceback", " ERROR ", " CRITICAL ")


def _broker_processes(item: pytest.Item) -> list[BrokerProcess]:
    found: list[BrokerProcess] = []
    for value in getattr(item, "funcargs", {}).values():
        if isinstance(value, BrokerProcess):
            found.append(value)
        for attr in ("brokers", "broker_list"):
            group = getattr(value, attr, None)
            if isinstance(group, dict):
                group = list(group.values())
            if isinstance(group, list):
                found.extend(b for b in group if isinstance(b, BrokerProcess))
    return found


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """On a failure, attach the errors the test's brokers logged (CI keeps no broker logs)."""
    outcome = yield
    report = outcome.get_result()
    if report.when != "call" or not report.failed:
        return
    for broker in _broker_processes(item):
        try:
            lines = broker.log_path.read_text(errors="replace").splitlines()
        except OSError:
            continue
        keep: list[str] = []
        for i, line in enumerate(lines):
            if any(mark in line for mark in _BROKER_TROUBLE):
                keep.extend(lines[i:i + 25] if "Traceback" in line else [line])
        if keep:
            report.sections.append((f"errors logged by {broker.log_path.name}", "\n".join(keep[-200:])))
