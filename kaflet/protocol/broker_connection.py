"""What a connection to another broker offers the parts that send it requests, without I/O.

The controller channel, the replica fetchers and the transaction marker writer speak to other
brokers through these interfaces; kaflet/network/client.py's `BrokerClient` and
kaflet/network/connector.py's `InterBrokerConnector` implement them over sockets, and the
composition root (kaflet/server/broker.py) hands them in. So the layers above protocol/ that
send requests never import network/.

Every failure is one exception type, `BrokerConnectionError` (a ConnectionError): the connection
could not be opened, authentication failed, the peer closed it or broke the protocol (a
response that does not decode, a frame larger than the client's bound), or a request timed
out. Each of them closes the connection, and every other request in flight fails with it; the
caller reconnects.
"""

from __future__ import annotations

from typing import Any, Protocol


class BrokerConnectionError(ConnectionError):
    """The connection to the other broker failed or was closed; every request in flight fails with it."""


class BrokerAuthenticationError(BrokerConnectionError):
    """The TLS handshake or SASL authentication with the other broker failed."""


class RequestTimeoutError(BrokerConnectionError):
    """No response within the request timeout; the connection was closed (Kafka's NetworkClient does so)."""


class BrokerConnection(Protocol):
    """One connection to another broker, ready for requests (TLS and SASL done)."""

    @property
    def closed(self) -> bool:
        """True once the connection failed or was closed; it cannot be used again."""
        ...

    async def send(self, api_key: int, version: int, request: Any, *, timeout_s: float | None = None) -> Any:
        """Send a request (a codec object or its encoded body) and return the decoded response."""
        ...

    async def send_raw(self, api_key: int, version: int, request: Any, *,
                       timeout_s: float | None = None) -> memoryview:
        """Send a request and return the response body after its header, undecoded."""
        ...

    def close(self) -> None:
        """Close now; requests in flight fail with BrokerConnectionError."""
        ...


class BrokerConnector(Protocol):
    """Opens connections to the other brokers' inter-broker listener, secured as it requires."""

    @property
    def listener(self) -> str:
        """The inter-broker listener's name (the endpoint of a broker to connect to)."""
        ...

    async def connect(self, host: str, port: int, *, client_id: str, request_timeout_s: float) -> BrokerConnection:
        """A connection to host:port; raises BrokerConnectionError."""
        ...

    async def connect_to(self, broker_id: int, *, client_id: str, request_timeout_s: float) -> BrokerConnection:
        """A connection to a live broker's inter-broker endpoint; raises BrokerConnectionError
        (also when the broker is unknown or registered no such endpoint)."""
        ...
