"""The controller's channel to every live broker (Kafka's ControllerChannelManager).

Per broker there is one ordered queue and one sender task, as Kafka has one RequestSendThread
per broker: a request is sent, its response awaited, its callback run, and only then is the next
one taken, so a broker sees the controller's requests in the order they were made. When the
connection fails the sender reconnects with back-off and resends the same request, until it
succeeds or the broker is removed (the controller removes a broker whose registration is gone).

The controller's own broker is served in-process: its sender hands each request object to the
`LocalDelivery` callable instead of a socket, still one at a time and in order. The others are
reached through the broker's `BrokerConnector` (kaflet/protocol/broker_connection.py), so the
controller never touches sockets itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kaflet.metadata.zkdata import BrokerInfo
from kaflet.protocol.api_keys import ApiKey, api_name
from kaflet.protocol.broker_connection import BrokerConnection, BrokerConnectionError, BrokerConnector
from kaflet.protocol.controller_messages import ControllerRequest, ControllerResponse
from kaflet.util.outage_log import OutageLog

log = logging.getLogger("kaflet.controller")

#: (api key, request object) -> response object: the local broker's handling of a request.
LocalDelivery = Callable[[ApiKey, ControllerRequest], Awaitable[ControllerResponse]]
#: Runs on the loop with the response object.
ResponseCallback = Callable[[Any], None]

#: The one version kaflet speaks of each controller-to-broker API (kaflet/protocol/schemas).
CONTROLLER_API_VERSIONS: Mapping[int, int] = {
    ApiKey.LEADER_AND_ISR: 5, ApiKey.STOP_REPLICA: 3, ApiKey.UPDATE_METADATA: 7,
}

#: While a broker stays unreachable, its outage is summed up at WARN this often.
WARN_INTERVAL_S = 30.0


class BrokerEndpointNotAvailableError(ValueError):
    """The broker did not register an endpoint for the inter-broker listener."""


@dataclass(slots=True)
class _Item:
    api_key: ApiKey
    version: int
    request: Any
    callback: ResponseCallback | None
    enqueued: float


class _BrokerState:
    __slots__ = ("broker", "queue", "task", "client")

    def __init__(self, broker: BrokerInfo) -> None:
        self.broker = broker
        self.queue: asyncio.Queue[_Item] = asyncio.Queue()
        self.task: asyncio.Task[None] | None = None
        self.client: BrokerConnection | None = None


class ControllerChannel:
    """One ordered request queue and sender task per live broker; the local broker in-process."""

    def __init__(self, controller_id: int, connector: BrokerConnector, local_delivery: LocalDelivery, *,
                 request_timeout_s: float = 30.0, api_versions: Mapping[int, int] | None = None,
                 backoff_s: float = 0.1, max_backoff_s: float = 1.0) -> None:
        """`request_timeout_s` is controller.socket.timeout.ms."""
        self.controller_id = controller_id
        self.connector = connector
        self.request_timeout_s = request_timeout_s
        self._local_delivery = local_delivery
        self._versions = dict(CONTROLLER_API_VERSIONS)
        self._versions.update(api_versions or {})
        self._backoff_s = backoff_s
        self._max_backoff_s = max_backoff_s
        self._brokers: dict[int, _BrokerState] = {}
        self._closed = False

    @property
    def broker_ids(self) -> list[int]:
        """The brokers this channel has a queue for."""
        return list(self._brokers)

    def queued(self, broker_id: int) -> int:
        """Requests waiting for the broker, not counting the one being sent (0 for an unknown broker)."""
        state = self._brokers.get(broker_id)
        return state.queue.qsize() if state else 0

    def add_broker(self, broker: BrokerInfo) -> None:
        """Start the broker's queue and sender; a broker already present is left as it is.

        Raises BrokerEndpointNotAvailableError when a remote broker has no inter-broker endpoint.
        """
        if self._closed:
            raise RuntimeError("the controller channel is closed")
        if broker.id in self._brokers:
            return
        state = _BrokerState(broker)
        if broker.id == self.controller_id:
            sender = self._send_local(state)
            where = "in-process"
        else:
            listener = self.connector.listener
            ep = broker.endpoint(listener)
            if ep is None:
                raise BrokerEndpointNotAvailableError(
                    f"broker {broker.id} has no endpoint for the inter-broker listener {listener} "
                    f"(it registered {', '.join(e.listener for e in broker.endpoints) or 'none'})")
            sender = self._send_remote(state, ep.host or "localhost", ep.port)
            where = f"{ep.host or 'localhost'}:{ep.port} ({listener})"
        state.task = asyncio.create_task(sender, name=f"controller-{self.controller_id}-to-broker-{broker.id}")
        self._brokers[broker.id] = state
        log.info("Controller %d: added broker %d to the channel, at %s", self.controller_id, broker.id, where)

    def remove_broker(self, broker_id: int) -> None:
        """Stop the broker's sender (closing its connection); its queued requests are dropped."""
        state = self._brokers.pop(broker_id, None)
        if state is None:
            return
        dropped = state.queue.qsize()
        if state.task is not None:
            state.task.cancel()
        if state.client is not None:
            state.client.close()
            state.client = None
        log.info("Controller %d: removed broker %d from the channel (%d queued request(s) dropped)",
                 self.controller_id, broker_id, dropped)

    def send(self, broker_id: int, api_key: ApiKey, request: Any, callback: ResponseCallback | None = None) -> None:
        """Queue a request for the broker; the callback gets the response object, on the loop."""
        version = self._versions.get(api_key)
        if version is None:
            raise ValueError(f"the controller channel has no version for API {api_key!r}")
        state = self._brokers.get(broker_id)
        if state is None:
            log.warning("Controller %d: not sending %s to broker %d, since it is offline",
                        self.controller_id, api_name(api_key), broker_id)
            return
        state.queue.put_nowait(_Item(api_key, version, request, callback, time.monotonic()))

    async def close(self) -> None:
        """Stop every sender and close every connection."""
        self._closed = True
        tasks = [s.task for s in self._brokers.values() if s.task is not None]
        for broker_id in list(self._brokers):
            self.remove_broker(broker_id)
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    # -- senders ----------------------------------------------------------------------------

    async def _send_local(self, state: _BrokerState) -> None:
        while True:
            item = await state.queue.get()
            try:
                response = await self._local_delivery(item.api_key, item.request)
            except Exception:
                # A failure here is a bug in this broker's handler: resending cannot help, and
                # blocking the queue would stop every later request; Kafka's broker would have
                # answered with an error code.
                log.exception("Controller %d: the local broker failed to handle %s; the request is dropped",
                              self.controller_id, api_name(item.api_key))
                continue
            self._run_callback(item, response, state.broker.id)

    async def _send_remote(self, state: _BrokerState, host: str, port: int) -> None:
        outage = OutageLog(log, f"Controller {self.controller_id}: sending to broker {state.broker.id} at {host}:{port}",
                           summary_every_s=WARN_INTERVAL_S)
        try:
            while True:
                item = await state.queue.get()
                try:
                    body = bytes(item.request.encode(version=item.version))
                except Exception as exc:
                    # A request that does not encode is a bug in whoever built it; resending it
                    # would fail the same way and hold up every request behind it.
                    log.error("Controller %d: cannot encode %s v%d for broker %d (%s); the request is dropped",
                              self.controller_id, api_name(item.api_key), item.version, state.broker.id, exc)
                    continue
                response = await self._send_until_answered(state, host, port, item, body, outage)
                self._run_callback(item, response, state.broker.id)
        finally:
            if state.client is not None:
                state.client.close()
                state.client = None

    async def _send_until_answered(self, state: _BrokerState, host: str, port: int, item: _Item,
                                   body: bytes, outage: OutageLog) -> Any:
        """The decoded response, after as many reconnects and resends as it takes."""
        broker_id = state.broker.id
        backoff = self._backoff_s
        while True:
            try:
                if state.client is None:
                    state.client = await self.connector.connect(
                        host, port, client_id=f"controller-{self.controller_id}",
                        request_timeout_s=self.request_timeout_s)
                    log.info("Controller %d connected to broker %d at %s:%d for sending state change requests",
                             self.controller_id, broker_id, host, port)
                response = await state.client.send(item.api_key, item.version, body)
                outage.succeeded()
                return response
            except BrokerConnectionError as exc:
                if state.client is not None:
                    state.client.close()
                    state.client = None
                outage.failed(f"{api_name(item.api_key)}: {exc}", "reconnecting and resending")
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, self._max_backoff_s)

    def _run_callback(self, item: _Item, response: Any, broker_id: int) -> None:
        if item.callback is None:
            return
        try:
            item.callback(response)
        except Exception:
            log.exception("Controller %d: the callback of %s to broker %d failed",
                          self.controller_id, api_name(item.api_key), broker_id)


