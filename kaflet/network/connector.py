"""How this broker connects to the other brokers: the one `InterBrokerConnector`.

The composition root (kaflet/server/broker.py) makes it once, from the inter-broker settings
(kaflet/server/inter_broker_security.py: the listener, its security, the response bound), and
hands it to everything that opens connections to other brokers: the replica fetchers, the
controller channel, the transaction marker writer and controlled shutdown. Each of them names
its client id and request timeout (Kafka's: the fetchers' replica.socket.timeout.ms, the
controller's controller.socket.timeout.ms, request.timeout.ms for markers), nothing else.

A broker alone may have no usable inter-broker listener (its listeners need credentials it has
no client side for): it never connects to another broker, so that is no error until it tries;
then every connection fails with the reason.
"""

from __future__ import annotations

from collections.abc import Callable

from kaflet.metadata.zkdata import BrokerInfo
from kaflet.network.client import BrokerClient, InterBrokerSettings
from kaflet.protocol.broker_connection import BrokerConnectionError


class InterBrokerConnector:
    """Opens `BrokerClient`s to the other brokers' inter-broker listener (a
    kaflet.protocol.broker_connection.BrokerConnector)."""

    def __init__(self, settings: InterBrokerSettings, *,
                 broker_info: Callable[[int], BrokerInfo | None] = lambda _broker_id: None,
                 unusable: str | None = None) -> None:
        """`broker_info` looks a live broker up (the metadata cache); `unusable` says why there
        is no usable inter-broker listener (None: there is)."""
        self.settings = settings
        self._broker_info = broker_info
        self._unusable = unusable

    @property
    def listener(self) -> str:
        return self.settings.listener

    def endpoint(self, broker_id: int) -> tuple[str, int] | None:
        """A live broker's (host, port) on the inter-broker listener; None when it has none."""
        info = self._broker_info(broker_id)
        if info is None or self._unusable is not None:
            return None
        ep = info.endpoint(self.settings.listener)
        return (ep.host or "", ep.port) if ep is not None else None

    async def connect(self, host: str, port: int, *, client_id: str, request_timeout_s: float) -> BrokerClient:
        """A connection to host:port, TLS and SASL done; raises BrokerConnectionError."""
        if self._unusable is not None:
            raise BrokerConnectionError(f"no usable inter-broker listener: {self._unusable}")
        settings = self.settings
        return await BrokerClient.connect(
            host, port, settings.security, client_id=client_id, connect_timeout_s=settings.connect_timeout_s,
            request_timeout_s=request_timeout_s, max_response_bytes=settings.max_response_bytes)

    async def connect_to(self, broker_id: int, *, client_id: str, request_timeout_s: float) -> BrokerClient:
        """A connection to a live broker by id; raises BrokerConnectionError (also when it is
        unknown or has no inter-broker endpoint)."""
        address = self.endpoint(broker_id)
        if address is None:
            if self._unusable is not None:
                raise BrokerConnectionError(f"no usable inter-broker listener: {self._unusable}")
            raise BrokerConnectionError(f"broker {broker_id} has no {self.settings.listener} endpoint")
        return await self.connect(address[0], address[1], client_id=client_id, request_timeout_s=request_timeout_s)
