"""Discovery mode: what the gateway answers on a client connection.

A client connects to the gateway only to find its cluster: ApiVersions, SASL (SaslHandshake and
SaslAuthenticate, or the raw tokens after SaslHandshake v0), then Metadata, FindCoordinator and
DescribeCluster, which are sent to the cluster the username names as the client
(kaflet/proxy/upstream.py) and answered with the cluster's own bytes: its real brokers, so
produce and fetch go straight to them. Requests are answered one at a time, in order (the
network/ connection reads the next frame after the answer is out), with the client's
correlation id.

Requests that any broker answers correctly for the whole cluster (InitProducerId, the admin
APIs: a broker that is not the controller says so) are passed on the same way, uncached, since
clients may send them to their bootstrap broker. What the gateway advertises in ApiVersions is
described at `ApiRanges`. A request that belongs to one broker (Produce, Fetch, the group and
transaction APIs), which clients send to the broker the Metadata names and never to their
bootstrap broker, closes the connection with a log line, as Kafka closes a connection for an
API it does not serve. A frame that does not parse closes its connection only.

The manager's degradation settings are applied to every request (kaflet/proxy/degradation.py).

While no broker of the target cluster answers, the forwarded APIs get Kafka's retriable errors
(Metadata: LEADER_NOT_AVAILABLE for each topic asked and no brokers; FindCoordinator:
COORDINATOR_NOT_AVAILABLE; DescribeCluster: BROKER_NOT_AVAILABLE), and clients retry.
"""

from __future__ import annotations

import asyncio
import logging
import struct
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from kaflet.network.connection import Chunk, Connection, FrameError, HandlerResult
from kaflet.protocol import codec
from kaflet.protocol.api_keys import ApiKey, api_name
from kaflet.protocol.api_versions import encode_api_versions_response
from kaflet.protocol.errors import ErrorCode
from kaflet.protocol.header import RequestHeader, parse_request_header, response_header
from kaflet.protocol.primitives import DecodeError
from kaflet.proxy.degradation import Degradation
from kaflet.proxy.login import RelaySaslServer
from kaflet.proxy.metrics import GatewayMetrics
from kaflet.proxy.upstream import LoginRefusedError, UpstreamPool, UpstreamUnavailableError
from kaflet.security.sasl import SaslAuthenticationError
from kaflet.security.session import SaslSession, SaslState
from kaflet.util.outage_log import OutageLog

log = logging.getLogger("kaflet.proxy")

#: APIs the gateway answers itself, and their versions.
LOCAL_APIS: dict[int, tuple[int, int]] = {
    ApiKey.API_VERSIONS: (0, 3),
    ApiKey.SASL_HANDSHAKE: (0, 1),
    ApiKey.SASL_AUTHENTICATE: (0, 2),
}
#: The discovery APIs: answered from the target cluster (cached briefly), or with Kafka's
#: retriable errors while it is unreachable, for which the gateway builds the answers (kaflet's
#: codec, these versions). The clusters' own ranges narrow them.
DISCOVERY_APIS: dict[int, tuple[int, int]] = {
    ApiKey.METADATA: (0, 12),
    ApiKey.FIND_COORDINATOR: (0, 4),
    ApiKey.DESCRIBE_CLUSTER: (0, 1),
}
#: Requests any broker of a cluster answers correctly for the whole cluster (a broker that is
#: not the controller or coordinator says so, and the client looks again): clients may send
#: them to the gateway, their bootstrap broker, and they are passed on, uncached.
ANY_BROKER_APIS = frozenset({
    ApiKey.INIT_PRODUCER_ID, ApiKey.CREATE_TOPICS, ApiKey.DELETE_TOPICS, ApiKey.CREATE_PARTITIONS,
    ApiKey.DESCRIBE_CONFIGS, ApiKey.ALTER_CONFIGS, ApiKey.INCREMENTAL_ALTER_CONFIGS, ApiKey.DESCRIBE_ACLS,
    ApiKey.CREATE_ACLS, ApiKey.DELETE_ACLS, ApiKey.DESCRIBE_CLIENT_QUOTAS, ApiKey.ALTER_CLIENT_QUOTAS,
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, ApiKey.ALTER_USER_SCRAM_CREDENTIALS, ApiKey.ELECT_LEADERS,
    ApiKey.ALTER_PARTITION_REASSIGNMENTS, ApiKey.LIST_PARTITION_REASSIGNMENTS,
})
_BEFORE_AUTH = (ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE)
_I32 = struct.Struct(">i")


class ApiRanges:
    """The versions the gateway advertises in ApiVersions.

    Some clients (kafka-python) take the bootstrap broker's versions for every broker of the
    cluster, so the gateway advertises what every cluster it could reach serves, with its own
    versions of ApiVersions and SASL and the discovery APIs narrowed to what it can answer
    itself. APIs that belong to one broker (Produce, Fetch, the group and transaction APIs) are
    advertised too, as the clusters serve them, but clients send those to the broker the
    Metadata names; one sent here closes the connection with a log line.
    """

    def __init__(self) -> None:
        self.ranges: dict[int, tuple[int, int]] = {**DISCOVERY_APIS, **LOCAL_APIS}
        #: Whether a cluster has answered yet (until then only the gateway's own APIs are advertised).
        self.from_clusters = False

    def update(self, clusters: Sequence[Mapping[int, tuple[int, int]]]) -> None:
        """Advertise what every one of ``clusters`` serves (an API one of them lacks is left out);
        with no cluster reachable, only what the gateway answers itself."""
        if not clusters:
            return
        self.from_clusters = True
        common = dict(clusters[0])
        for served in clusters[1:]:
            for key in list(common):
                theirs = served.get(key)
                lo, hi = common[key]
                if theirs is None or max(lo, theirs[0]) > min(hi, theirs[1]):
                    del common[key]
                else:
                    common[key] = (max(lo, theirs[0]), min(hi, theirs[1]))
        for key, (lo, hi) in DISCOVERY_APIS.items():
            if key in common:
                theirs = common[key]
                if max(lo, theirs[0]) > min(hi, theirs[1]):
                    del common[key]
                else:
                    common[key] = (max(lo, theirs[0]), min(hi, theirs[1]))
        ranges = {**common, **LOCAL_APIS}
        if ranges != self.ranges:
            log.info("advertising %d APIs as the clusters serve them (Metadata %s)", len(ranges),
                     "-".join(map(str, ranges.get(ApiKey.METADATA, ("none",)))))
        self.ranges = ranges

    def advertised(self) -> list[tuple[int, int, int]]:
        return [(key, lo, hi) for key, (lo, hi) in sorted(self.ranges.items())]

    def serves(self, api_key: int, version: int) -> bool:
        lo, hi = self.ranges.get(api_key, (0, -1))
        return lo <= version <= hi


class DiscoveryRouter:
    """The request handler of every gateway connection in discovery mode."""

    def __init__(self, pool: UpstreamPool, ranges: ApiRanges, failed_delay_s: float,
                 degradation: Degradation, metrics: GatewayMetrics | None = None) -> None:
        self.pool = pool
        #: The counters behind /metrics (None: metrics.listener is off).
        self.metrics = metrics
        self.ranges = ranges
        self.failed_delay_s = failed_delay_s
        self.degradation = degradation
        self._outages: dict[int, OutageLog] = {}

    async def __call__(self, conn: Connection, frame: memoryview) -> HandlerResult:
        degradation = self.degradation
        if not degradation.try_enter():
            await degradation.enter()
        try:
            return await self._handle(conn, frame)
        finally:
            degradation.leave()

    async def _handle(self, conn: Connection, frame: memoryview) -> HandlerResult:
        sasl = conn.sasl
        assert sasl is not None, "the gateway's listener is a SASL listener"
        if sasl.state is SaslState.AUTHENTICATE_RAW:
            return await self._raw_token(conn, sasl, frame)
        try:
            header = parse_request_header(frame)
        except (DecodeError, UnicodeDecodeError) as exc:
            raise FrameError(f"malformed request header: {exc}") from None
        key, version = header.api_key, header.api_version
        if not sasl.complete:
            allowed = _BEFORE_AUTH if sasl.in_handshake else (ApiKey.SASL_AUTHENTICATE,)
            if key not in allowed:
                raise FrameError(f"unexpected {api_name(key)} request during SASL authentication")
        server = sasl.server
        app = (server.credentials.username.partition(".")[2]
               if sasl.complete and isinstance(server, RelaySaslServer) and server.credentials else None)
        throttle_ms = self.degradation.throttle_ms(app, conn.peer[0])
        cluster_id = server.cluster_id if app is not None and isinstance(server, RelaySaslServer) else None
        if self.metrics is not None:
            self.metrics.on_request(cluster_id, app, key, len(frame), throttle_ms)
        if throttle_ms:
            # Kafka's way (KIP-219): answered now, with the time, and nothing read for that long.
            conn.throttled_until = time.monotonic() + throttle_ms / 1000
        if key == ApiKey.API_VERSIONS:
            sasl.on_api_versions()
            return self._sent(cluster_id, key, self._api_versions(header, throttle_ms))
        if not self.ranges.serves(key, version):
            raise FrameError(f"{api_name(key)} v{version} is not advertised by the gateway")
        self._check_served(key, version)
        body = frame[header.body_offset:]
        try:
            if key == ApiKey.SASL_HANDSHAKE:
                answer = self._handshake(conn, sasl, header, body)
            elif key == ApiKey.SASL_AUTHENTICATE:
                answer = await self._authenticate(conn, sasl, header, body)
            else:
                return await self._forward(conn, sasl, header, body, throttle_ms)
        except DecodeError as exc:
            raise FrameError(f"{api_name(key)} v{version} does not decode: {exc}") from None
        return self._sent(cluster_id, key, [response_header(header.correlation_id, key, header.flexible), answer])

    def _sent(self, cluster_id: int | None, api_key: int, chunks: Sequence[Chunk]) -> Sequence[Chunk]:
        """``chunks``, counted as an answer for the client (they are bytes: the gateway sends no files)."""
        if self.metrics is not None:
            self.metrics.on_response(cluster_id, api_key, sum(len(c) for c in chunks if isinstance(c, bytes | bytearray | memoryview)))
        return chunks

    def _check_served(self, key: int, version: int) -> None:
        """Refuse (FrameError) a request this mode does not pass on."""
        if key not in LOCAL_APIS and key not in DISCOVERY_APIS and key not in ANY_BROKER_APIS:
            raise FrameError(
                f"{api_name(key)} v{version} is not served by the gateway in discovery mode: it belongs to the "
                "broker the Metadata answer names (the gateway answers ApiVersions, SASL, Metadata, "
                "FindCoordinator, DescribeCluster and passes on requests any broker answers)")

    def outage(self, cluster_id: int) -> OutageLog:
        """The log of the cluster's unreachability: one warning, a summary, one line when it is back."""
        outage = self._outages.get(cluster_id)
        if outage is None:
            outage = self._outages[cluster_id] = OutageLog(log, f"cluster {cluster_id}'s brokers")
        return outage

    def unreachable(self, cluster_id: int, exc: Exception) -> None:
        """The cluster's brokers could not be reached for a request (logged as an outage)."""
        self.outage(cluster_id).failed(exc, "clients are answered with retriable errors meanwhile")
        if self.metrics is not None:
            self.metrics.on_upstream_error(cluster_id)

    def failing(self, cluster_id: int) -> bool:
        """Whether the cluster's brokers did not answer this router's last request to them."""
        outage = self._outages.get(cluster_id)
        return outage is not None and outage.failing

    # -- local answers ------------------------------------------------------------------------

    def _api_versions(self, header: RequestHeader, throttle_ms: int) -> Sequence[Chunk]:
        version = header.api_version
        ranges = self.ranges.advertised()
        if not self.ranges.serves(ApiKey.API_VERSIONS, version):
            # As Kafka: a v0 answer with UNSUPPORTED_VERSION and the ranges, so the client retries lower.
            body = encode_api_versions_response(ErrorCode.UNSUPPORTED_VERSION, ranges, 0, 0)
        else:
            body = encode_api_versions_response(ErrorCode.NONE, ranges, throttle_ms, version)
        return [response_header(header.correlation_id, ApiKey.API_VERSIONS, False), body]

    def _handshake(self, conn: Connection, sasl: SaslSession, header: RequestHeader, body: memoryview) -> bytes:
        req = codec.decode_request(ApiKey.SASL_HANDSHAKE, header.api_version, body)
        R = codec.response_class(ApiKey.SASL_HANDSHAKE)
        enabled = sasl.enabled_mechanisms()
        if not sasl.in_handshake:
            response = R(error_code=ErrorCode.ILLEGAL_SASL_STATE, mechanisms=[])
        elif not sasl.handshake(req.mechanism, header.api_version):
            log.info("connection %s from %s asked for SASL mechanism %r; the gateway offers %s", conn.conn_id,
                     conn.peer[0], req.mechanism, ", ".join(enabled))
            conn.close_after_response = True
            response = R(error_code=ErrorCode.UNSUPPORTED_SASL_MECHANISM, mechanisms=enabled)
        else:
            response = R(error_code=ErrorCode.NONE, mechanisms=enabled)
        return codec.encode_response(ApiKey.SASL_HANDSHAKE, header.api_version, response)

    async def _authenticate(self, conn: Connection, sasl: SaslSession, header: RequestHeader,
                            body: memoryview) -> bytes:
        req = codec.decode_request(ApiKey.SASL_AUTHENTICATE, header.api_version, body)
        R = codec.response_class(ApiKey.SASL_AUTHENTICATE)

        def answer(code: int, message: str | None, auth_bytes: bytes = b"") -> bytes:
            return codec.encode_response(ApiKey.SASL_AUTHENTICATE, header.api_version, R(
                error_code=code, error_message=message, auth_bytes=auth_bytes, session_lifetime_ms=0))

        if sasl.state is not SaslState.AUTHENTICATE:
            return answer(ErrorCode.ILLEGAL_SASL_STATE, "SaslAuthenticate request received "
                          + ("after successful authentication" if sasl.complete else "before SaslHandshake"))
        try:
            token = await sasl.authenticate(bytes(req.auth_bytes))
        except SaslAuthenticationError as exc:
            log.info("failed authentication of %s from %s: %s", conn.conn_id, conn.peer[0], exc)
            if self.metrics is not None:
                self.metrics.on_failed_authentication()
            await asyncio.sleep(self.failed_delay_s)  # slows password guessing down, as Kafka does
            conn.close_after_response = True
            return answer(ErrorCode.SASL_AUTHENTICATION_FAILED, str(exc))
        return answer(ErrorCode.NONE, None, token)

    async def _raw_token(self, conn: Connection, sasl: SaslSession, frame: memoryview) -> Sequence[Chunk] | None:
        """A token of the exchange after SaslHandshake v0: no header, the answer size-prefixed."""
        try:
            token = await sasl.authenticate(bytes(frame))
        except SaslAuthenticationError as exc:
            log.info("failed authentication of %s from %s: %s", conn.conn_id, conn.peer[0], exc)
            if self.metrics is not None:
                self.metrics.on_failed_authentication()
            await asyncio.sleep(self.failed_delay_s)
            conn.close_after_response = True
            return None
        return [token]

    # -- answers from the cluster -------------------------------------------------------------

    async def _forward(self, conn: Connection, sasl: SaslSession, header: RequestHeader,
                       body: memoryview, throttle_ms: int) -> HandlerResult:
        server = sasl.server
        assert isinstance(server, RelaySaslServer) and server.credentials is not None
        cluster_id, key, version = server.cluster_id, header.api_key, header.api_version
        # The upstream connection is shared by the application's clients: a body the cluster would
        # close it for is refused here (DecodeError: this connection closes), not passed on.
        codec.decode_request(key, version, body)
        try:
            answer = await self.pool.request(cluster_id, server.credentials, key, version, bytes(body),
                                             cache=key in DISCOVERY_APIS)
        except LoginRefusedError as exc:
            raise FrameError(f"cluster {cluster_id} refused the login of {server.credentials.username}: {exc}") from None
        except UpstreamUnavailableError as exc:
            self.unreachable(cluster_id, exc)
            if key not in DISCOVERY_APIS:
                raise FrameError(f"{api_name(key)} cannot be passed on: {exc}") from None
            answer = unavailable_answer(key, version, bytes(body), f"cluster {cluster_id} is not reachable")
        else:
            self.outage(cluster_id).succeeded()
        if throttle_ms and codec.has_throttle_time(key, version):
            answer = with_throttle(answer, throttle_ms)
        return self._sent(cluster_id, key, [response_header(header.correlation_id, key, header.flexible), answer])


def with_throttle(body: bytes, throttle_ms: int) -> bytes:
    """``body`` with its throttle_time_ms (the first field of every response the gateway passes
    on) raised to ``throttle_ms``; the cluster's own, if longer, is kept."""
    theirs = _I32.unpack_from(body, 0)[0]
    return _I32.pack(max(theirs, throttle_ms)) + body[4:]


def unavailable_answer(api_key: int, version: int, body: bytes, message: str) -> bytes:
    """Kafka's retriable answer to a forwarded request while its cluster cannot be reached."""
    req = codec.decode_request(api_key, version, memoryview(body))
    R: Any = codec.response_class(api_key)
    if api_key == ApiKey.METADATA:
        topics = [R.MetadataResponseTopic(error_code=ErrorCode.LEADER_NOT_AVAILABLE, name=t.name,
                                          topic_id=getattr(t, "topic_id", None) or uuid.UUID(int=0),
                                          is_internal=False, partitions=[])
                  for t in req.topics or ()]
        response = R(brokers=[], cluster_id=None, controller_id=-1, topics=topics)
    elif api_key == ApiKey.FIND_COORDINATOR:
        if version >= 4:
            response = R(coordinators=[R.Coordinator(key=k, node_id=-1, host="", port=-1,
                                                     error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                                     error_message=message) for k in req.coordinator_keys])
        else:
            response = R(error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE, error_message=message, node_id=-1, host="",
                         port=-1)
    else:
        response = R(error_code=ErrorCode.BROKER_NOT_AVAILABLE, error_message=message,
                     endpoint_type=getattr(req, "endpoint_type", 1), cluster_id="", controller_id=-1, brokers=[])
    return codec.encode_response(api_key, version, response)
