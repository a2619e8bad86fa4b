"""Fixtures shared by every test: real broker processes on 127.0.0.1, killed by PID."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.broker_process import BrokerProcess, running_broker


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
