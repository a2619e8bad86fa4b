"""The InterBrokerConnector's endpoint look-up and its refusals (kaflet/network/connector.py)."""

from __future__ import annotations

import pytest

from kaflet.metadata.zkdata import BrokerInfo, EndPoint
from kaflet.network.client import InterBrokerSettings
from kaflet.network.connector import InterBrokerConnector
from kaflet.protocol.broker_connection import BrokerConnectionError

BROKERS = {
    1: BrokerInfo(id=1, endpoints=(EndPoint("INTERNAL", "10.0.0.1", 9093, "PLAINTEXT"),
                                   EndPoint("EXTERNAL", "example.com", 9092, "PLAINTEXT"))),
    2: BrokerInfo(id=2, endpoints=(EndPoint("EXTERNAL", "example.com", 9094, "PLAINTEXT"),)),
}


def test_endpoints_are_those_of_the_inter_broker_listener() -> None:
    connector = InterBrokerConnector(InterBrokerSettings(listener="INTERNAL"), broker_info=BROKERS.get)
    assert connector.listener == "INTERNAL"
    assert connector.endpoint(1) == ("10.0.0.1", 9093)
    assert connector.endpoint(2) is None  # registered no INTERNAL endpoint
    assert connector.endpoint(3) is None  # not a live broker


async def test_a_broker_without_the_endpoint_is_refused() -> None:
    connector = InterBrokerConnector(InterBrokerSettings(listener="INTERNAL"), broker_info=BROKERS.get)
    with pytest.raises(BrokerConnectionError, match="broker 2 has no INTERNAL endpoint"):
        await connector.connect_to(2, client_id="t", request_timeout_s=1)


async def test_without_a_usable_listener_every_connection_says_why() -> None:
    connector = InterBrokerConnector(InterBrokerSettings(listener="EXTERNAL"), broker_info=BROKERS.get,
                                     unusable="listener EXTERNAL needs SASL credentials")
    assert connector.endpoint(1) is None
    for attempt in (connector.connect("127.0.0.1", 1, client_id="t", request_timeout_s=1),
                    connector.connect_to(1, client_id="t", request_timeout_s=1)):
        with pytest.raises(BrokerConnectionError, match="no usable inter-broker listener: listener EXTERNAL"):
            await attempt
