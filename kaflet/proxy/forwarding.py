"""Proxy mode: every request of a client goes through the gateway to its cluster.

A client connection is served as in discovery mode up to its login (ApiVersions, SASL as
``<clusterId>.<appId>``, the manager's degradation settings: `DiscoveryRouter`); then each
request is passed on, body untouched, over the connection's own upstream connection, opened
with the client's credentials and client id (so the brokers check the password and apply the
application's ACLs and quotas). On the bootstrap port that is one of the cluster's service
addresses; on a broker's port (kaflet/proxy/ports.py) that broker. Requests are written upstream
in the order they arrive and their answers are sent back in that order with the client's
correlation ids, while later requests are already read (up to ``proxy.max.inflight.requests``).
Only the answers naming brokers (Metadata, FindCoordinator, DescribeCluster) are decoded, to put
the gateway's address in; throttle times from the brokers pass through as they are.

When the manager moves a cluster, an upstream connection opened before is not used for new
requests (it is closed once its last answer is in): the next request goes to the new place, so
connected clients follow at their next metadata refresh. A broker port whose broker the moved
cluster does not have closes its client connections with a log line; clients then bootstrap
again. An idempotent producer's batch whose producer id another cluster gave is answered with
UNKNOWN_PRODUCER_ID, so the client starts afresh (kaflet/proxy/producers.py). While the cluster cannot be reached, Metadata, FindCoordinator and DescribeCluster get
Kafka's retriable errors and any other request closes the connection (as a broker that is down
does), and clients retry.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence

from kaflet.network.client import BrokerClient
from kaflet.network.connection import Chunk, Connection, DeferredResponse, FrameError, HandlerResult
from kaflet.protocol import codec
from kaflet.protocol.api_keys import ApiKey, api_name
from kaflet.protocol.broker_connection import BrokerConnectionError
from kaflet.protocol.header import RequestHeader, response_header
from kaflet.protocol.primitives import DecodeError
from kaflet.protocol.produce import decode_produce_request
from kaflet.proxy.degradation import Degradation
from kaflet.proxy.login import RelaySaslServer
from kaflet.proxy.metrics import GatewayMetrics
from kaflet.proxy.ports import ADDRESS_APIS, BrokerPorts
from kaflet.proxy.producers import ProducerPlacements, produce_head, unknown_producer_answer
from kaflet.proxy.router import DISCOVERY_APIS, ApiRanges, DiscoveryRouter, unavailable_answer, with_throttle
from kaflet.proxy.upstream import Credentials, LoginRefusedError, UpstreamPool, UpstreamUnavailableError
from kaflet.security.session import SaslSession

log = logging.getLogger("kaflet.proxy")


class _Upstream:
    """A client connection's connection to its broker, and the cluster move it was opened under."""

    __slots__ = ("client", "generation", "last", "kafka_cluster")

    def __init__(self, client: BrokerClient, generation: int) -> None:
        self.client = client
        self.generation = generation
        #: The answer of the latest request sent: answers come in order, so once it is in, all are.
        self.last: asyncio.Future[memoryview] | None = None
        #: The Kafka cluster id of the broker behind it ("": it names none), once asked.
        self.kafka_cluster: str | None = None

    def retire(self) -> None:
        """Close once the answers owed to the client are in."""
        if self.last is None or self.last.done():
            self.client.close()
        else:
            self.last.add_done_callback(lambda _: self.client.close())


class ProxyRouter(DiscoveryRouter):
    """The request handler of one proxy-mode port: the bootstrap port (``target`` None) or the
    port of broker ``target = (cluster id, broker id)``."""

    def __init__(self, pool: UpstreamPool, ranges: ApiRanges, failed_delay_s: float, degradation: Degradation,
                 ports: BrokerPorts, advertised_host: str, target: tuple[int, int] | None,
                 metrics: GatewayMetrics | None = None, placements: ProducerPlacements | None = None) -> None:
        """``placements``: shared by every port of the gateway, as a producer's connections are."""
        super().__init__(pool, ranges, failed_delay_s, degradation, metrics)
        self.placements = placements if placements is not None else ProducerPlacements()
        self.ports = ports
        self.advertised_host = advertised_host
        self.target = target
        self._upstreams: dict[Connection, _Upstream] = {}

    def _check_served(self, key: int, version: int) -> None:
        """Every API the gateway advertises is passed on."""

    def close_all(self) -> None:
        """Close every upstream connection of this port (the gateway is stopping)."""
        for upstream in self._upstreams.values():
            upstream.client.close()
        self._upstreams.clear()

    async def _forward(self, conn: Connection, sasl: SaslSession, header: RequestHeader,
                       body: memoryview, throttle_ms: int) -> HandlerResult:
        server = sasl.server
        assert isinstance(server, RelaySaslServer) and server.credentials is not None
        cluster_id, key, version = server.cluster_id, header.api_key, header.api_version
        expect_response, pair = True, None
        if key == ApiKey.PRODUCE:
            try:
                acks, pair = produce_head(version, body)
            except DecodeError as exc:
                raise FrameError(f"Produce v{version} does not decode: {exc}") from None
            expect_response = acks != 0
        try:
            upstream = await self._upstream(conn, cluster_id, server.credentials, header.client_id or "")
            if pair is not None and expect_response:
                where = await self._kafka_cluster(upstream)
                if where and self.placements.stale(cluster_id, where, pair):
                    log.info("producer id %d (epoch %d) of %s was given by another cluster than the one cluster "
                             "%d is now (%s): answered UNKNOWN_PRODUCER_ID so the client starts afresh", *pair,
                             server.credentials.username, cluster_id, where)
                    try:
                        answer = unknown_producer_answer(decode_produce_request(body, version), version)
                    except DecodeError as exc:
                        raise FrameError(f"Produce v{version} does not decode: {exc}") from None
                    return self._sent(cluster_id, key, [response_header(header.correlation_id, key, header.flexible),
                                                        answer])
            await upstream.client.writable()
            pending = upstream.client.submit_raw(key, version, body, expect_response=expect_response)
        except LoginRefusedError as exc:
            raise FrameError(f"cluster {cluster_id} refused the login of {server.credentials.username}: {exc}") from None
        except (UpstreamUnavailableError, BrokerConnectionError) as exc:
            self._drop(conn)
            self.unreachable(cluster_id, exc)
            if key in DISCOVERY_APIS:
                answer = unavailable_answer(key, version, bytes(body), f"cluster {cluster_id} is not reachable")
                return self._sent(cluster_id, key, [response_header(header.correlation_id, key, header.flexible),
                                                    answer])
            raise FrameError(f"{api_name(key)} cannot be passed on to cluster {cluster_id}: {exc}") from None
        if pending is None:
            return None  # acks=0: the broker does not answer, so neither does the gateway
        upstream.last = pending
        # Without --advertised-host, the address the client reached the gateway at.
        host = self.advertised_host or (conn.sock.getsockname()[0] if key in ADDRESS_APIS else "")
        return DeferredResponse(self._answer(upstream, cluster_id, header, bytes(body) if key in DISCOVERY_APIS
                                             else None, pending, throttle_ms, host, time.monotonic()))

    async def _answer(self, upstream: _Upstream, cluster_id: int, header: RequestHeader, request: bytes | None,
                      pending: asyncio.Future[memoryview], throttle_ms: int, host: str,
                      sent_at: float) -> Sequence[Chunk]:
        """The cluster's answer to one request, for the client (``request``: the body of a
        request that gets a retriable answer when the cluster cannot be reached; ``host``: the
        gateway's name for the client; ``sent_at``: when it was written upstream)."""
        key, version = header.api_key, header.api_version
        try:
            body: bytes | memoryview = await upstream.client.response_body(key, version, pending)
        except BrokerConnectionError as exc:
            self.unreachable(cluster_id, exc)
            if request is None:
                raise FrameError(f"{api_name(key)} to cluster {cluster_id} got no answer: {exc}") from None
            body = unavailable_answer(key, version, request, f"cluster {cluster_id} is not reachable")
        else:
            if self.metrics is not None:
                self.metrics.on_upstream(cluster_id, key, (time.monotonic() - sent_at) * 1000)
            self.outage(cluster_id).succeeded()
            if key == ApiKey.INIT_PRODUCER_ID:
                await self._issued(cluster_id, upstream, version, body)
            elif key in ADDRESS_APIS:
                try:
                    body = self.ports.rewrite_answer(cluster_id, key, version, body, host, upstream.generation)
                except DecodeError as exc:
                    raise FrameError(f"cluster {cluster_id}'s {api_name(key)} answer does not decode: {exc}") from None
        if throttle_ms and codec.has_throttle_time(key, version):
            body = throttled(key, version, body, throttle_ms)
        return self._sent(cluster_id, key, [response_header(header.correlation_id, key, header.flexible), body])

    async def _issued(self, cluster_id: int, upstream: _Upstream, version: int, body: bytes | memoryview) -> None:
        """Note the producer id an InitProducerId answer gives out: the cluster's own from now on."""
        try:
            answer = codec.decode_response(ApiKey.INIT_PRODUCER_ID, version, memoryview(body))
        except DecodeError as exc:
            raise FrameError(f"cluster {cluster_id}'s InitProducerId answer does not decode: {exc}") from None
        if answer.error_code == 0 and answer.producer_id >= 0:
            try:
                where = await self._kafka_cluster(upstream)
            except BrokerConnectionError:
                return  # the client's next request finds the connection gone and opens another
            if where:
                self.placements.issued(cluster_id, where, (answer.producer_id, answer.producer_epoch))

    async def _kafka_cluster(self, upstream: _Upstream) -> str:
        """The Kafka cluster id of the broker behind ``upstream``, asked of it once (Metadata
        without topics); "" when it names none (Metadata before v2)."""
        if upstream.kafka_cluster is None:
            version, request = self._brokers_request()
            body = await upstream.client.send_raw(ApiKey.METADATA, version, request)
            try:
                answer = codec.decode_response(ApiKey.METADATA, version, memoryview(body))
            except DecodeError as exc:
                raise FrameError(f"a Metadata answer of the cluster does not decode: {exc}") from None
            upstream.kafka_cluster = getattr(answer, "cluster_id", None) or ""
        return upstream.kafka_cluster

    def _brokers_request(self) -> tuple[int, bytes]:
        """(version, body) of a Metadata request for the brokers and cluster id only."""
        version = min(self.ranges.ranges.get(ApiKey.METADATA, (0, 12))[1], 12)
        request = codec.request_class(ApiKey.METADATA)(topics=[], allow_auto_topic_creation=False,
                                                        include_cluster_authorized_operations=False,
                                                        include_topic_authorized_operations=False)
        return version, bytes(request.encode(version=version))

    async def _upstream(self, conn: Connection, cluster_id: int, credentials: Credentials,
                        client_id: str) -> _Upstream:
        generation = self.ports.generation(cluster_id)
        upstream = self._upstreams.get(conn)
        if upstream is not None:
            if not upstream.client.closed and upstream.generation == generation:
                return upstream
            del self._upstreams[conn]
            upstream.retire()  # the cluster moved: new requests go to the new place
        at = None
        if self.target is not None:
            broker_id = self.target[1]
            at = self.ports.upstream(cluster_id, broker_id)
            if at is None:
                await self._learn_brokers(cluster_id, credentials)
                at = self.ports.upstream(cluster_id, broker_id)
            if at is None:
                raise FrameError(f"cluster {cluster_id} has no broker {broker_id} (any more); the client "
                                 "bootstraps again")
        client = await self.pool.open(cluster_id, credentials, client_id=client_id, at=at)
        if conn.closed:
            client.close()
            raise FrameError("the client left while its upstream connection was opened")
        if upstream is None and conn.task is not None:
            # The first upstream of this client connection: closed with it.
            conn.task.add_done_callback(lambda _: self._drop(conn))
        upstream = self._upstreams[conn] = _Upstream(client, generation)
        return upstream

    def _drop(self, conn: Connection) -> None:
        upstream = self._upstreams.pop(conn, None)
        if upstream is not None:
            upstream.client.close()

    async def _learn_brokers(self, cluster_id: int, credentials: Credentials) -> None:
        """Ask the cluster where its brokers are (a client came to a broker port this gateway has
        not named since it started, or since the cluster moved)."""
        version, request = self._brokers_request()
        generation = self.ports.generation(cluster_id)
        answer = await self.pool.request(cluster_id, credentials, ApiKey.METADATA, version, request, cache=True)
        self.ports.rewrite_answer(cluster_id, ApiKey.METADATA, version, answer, self.advertised_host, generation)


def throttled(api_key: int, version: int, body: bytes | memoryview, throttle_ms: int) -> bytes:
    """The answer with its throttle_time_ms at least ``throttle_ms``."""
    if api_key != ApiKey.PRODUCE:
        return with_throttle(bytes(body), throttle_ms)
    # Produce's throttle_time_ms is its last field (before tagged fields): re-encoded, which
    # happens only to a client the gateway throttles.
    response = codec.decode_response(api_key, version, memoryview(body))
    response.throttle_time_ms = max(response.throttle_time_ms or 0, throttle_ms)
    return codec.encode_decoded_response(version, response)
