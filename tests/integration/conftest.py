"""Integration fixtures: the CLI tests' `bootstrap` is a real kaflet broker process."""

from __future__ import annotations

import pytest

from tests.support.broker_process import BrokerProcess


@pytest.fixture(scope="module")
def bootstrap(kaflet_broker: BrokerProcess) -> str:
    """"127.0.0.1:PORT" of the module's broker process."""
    return kaflet_broker.bootstrap


@pytest.fixture(scope="session")
def broker_known_gaps() -> set[str]:
    """Kafka features kaflet does not offer yet; tests that need them are skipped, saying so."""
    return set()
