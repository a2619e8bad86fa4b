"""Integration fixtures: the CLI tests' `bootstrap` is a real kaflet broker process."""

from __future__ import annotations

import pytest

from tests.support.broker_process import BrokerProcess


@pytest.fixture(scope="module")
def bootstrap(kaflet_broker: BrokerProcess) -> str:
    """"127.0.0.1:PORT" of the module's broker process."""
    return kaflet_broker.bootstrap

