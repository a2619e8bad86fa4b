"""Proxy mode's port-per-broker scheme and the broker addresses in the answers that name brokers.

Every upstream broker a client may be sent to gets a gateway port of its own (as Kroxylicious
does): broker ``B`` of cluster ``C`` is ``proxy.broker.port.base + C * proxy.broker.ports.per.cluster
+ B``. The scheme is arithmetic, not an assignment the gateway remembers, so every gateway behind
one DNS name gives the same broker the same port, and a restarted gateway the ports it gave
before. A broker whose id does not fit (``B >= ports.per.cluster``, or a port above 65535) is left
out of the answers with one log line; clients then treat its partitions as leaderless.

The gateway learns where each broker really is from the cluster's own answers (Metadata,
FindCoordinator, DescribeCluster), rewrites them to the gateway's address (`rewrite_answer`,
the only answers proxy mode decodes), and binds a broker's port the first time it names it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from kaflet.protocol import codec
from kaflet.protocol.api_keys import ApiKey
from kaflet.protocol.errors import ErrorCode
from kaflet.proxy.upstream import Address

log = logging.getLogger("kaflet.proxy.ports")

#: The answers that name brokers, which proxy mode rewrites.
ADDRESS_APIS = frozenset({ApiKey.METADATA, ApiKey.FIND_COORDINATOR, ApiKey.DESCRIBE_CLUSTER})


class BrokerPorts:
    """The port of each (cluster, broker) and where the broker behind it is.

    ``expose(cluster, broker, port)`` makes the gateway listen on ``port`` (True when it does).
    """

    def __init__(self, base: int, per_cluster: int, expose: Callable[[int, int, int], bool]) -> None:
        self.base = base
        self.per_cluster = per_cluster
        self._expose = expose
        self._upstream: dict[tuple[int, int], Address] = {}
        self._generation: dict[int, int] = {}
        self._unfit: set[tuple[int, int]] = set()

    def port_of(self, cluster_id: int, broker_id: int) -> int | None:
        """The gateway port of the broker, None when its id does not fit the scheme."""
        port = self.base + cluster_id * self.per_cluster + broker_id
        if not 0 <= broker_id < self.per_cluster or port > 65535:
            if (cluster_id, broker_id) not in self._unfit:
                self._unfit.add((cluster_id, broker_id))
                log.error("broker %d of cluster %d has no gateway port (proxy.broker.port.base %d + cluster id * "
                          "proxy.broker.ports.per.cluster %d + broker id must be below 65536 with the broker id "
                          "below ports.per.cluster); it is left out of the answers", broker_id, cluster_id,
                          self.base, self.per_cluster)
            return None
        return port

    def target_of(self, port: int) -> tuple[int, int]:
        """(cluster id, broker id) of a broker port."""
        cluster_id, broker_id = divmod(port - self.base, self.per_cluster)
        return cluster_id, broker_id

    def upstream(self, cluster_id: int, broker_id: int) -> Address | None:
        """Where the broker is, as its cluster last said (None: not known yet)."""
        return self._upstream.get((cluster_id, broker_id))

    def generation(self, cluster_id: int) -> int:
        """Counts the changes of the cluster's addresses in the manager: an upstream connection
        opened under an older one goes to where the cluster was."""
        return self._generation.get(cluster_id, 0)

    def forget_cluster(self, cluster_id: int) -> None:
        """The cluster moved: its brokers are learned again from the new place."""
        for key in [k for k in self._upstream if k[0] == cluster_id]:
            del self._upstream[key]
        self._generation[cluster_id] = self.generation(cluster_id) + 1

    def _gateway_port(self, cluster_id: int, broker_id: int, host: str, port: int, learn: bool) -> int | None:
        if learn:
            self._upstream[(cluster_id, broker_id)] = (host, port)
        ours = self.port_of(cluster_id, broker_id)
        if ours is None or not self._expose(cluster_id, broker_id, ours):
            return None
        return ours

    def rewrite_answer(self, cluster_id: int, api_key: int, version: int, body: bytes | memoryview,
                       advertised_host: str, generation: int | None = None) -> bytes:
        """The cluster's answer naming its brokers, with the gateway's host and ports in their
        place (everything else, throttle_time_ms included, as the cluster said).

        ``generation``: the cluster's `generation` when the request was sent. An answer from
        before a move still reaches its client, but the gateway does not learn the brokers from
        it: they are where the cluster was, and a broker port must lead to where it is now."""
        learn = generation is None or generation == self.generation(cluster_id)
        response: Any = codec.decode_response(api_key, version, memoryview(body))
        if api_key in (ApiKey.METADATA, ApiKey.DESCRIBE_CLUSTER):
            id_field = "node_id" if api_key == ApiKey.METADATA else "broker_id"
            kept = []
            for broker in response.brokers:
                ours = self._gateway_port(cluster_id, getattr(broker, id_field), broker.host, broker.port, learn)
                if ours is not None:
                    broker.host, broker.port = advertised_host, ours
                    kept.append(broker)
            response.brokers = kept
        elif version >= 4:
            for coordinator in response.coordinators:
                self._rewrite_coordinator(cluster_id, coordinator, advertised_host, learn)
        else:
            self._rewrite_coordinator(cluster_id, response, advertised_host, learn)
        return codec.encode_decoded_response(version, response)

    def _rewrite_coordinator(self, cluster_id: int, found: Any, advertised_host: str, learn: bool) -> None:
        if found.error_code or found.node_id < 0:
            return
        ours = self._gateway_port(cluster_id, found.node_id, found.host, found.port, learn)
        if ours is None:
            # As a broker answers while the coordinator cannot be reached: the client asks again.
            found.error_message = f"broker {found.node_id} has no gateway port"
            found.error_code, found.node_id, found.host, found.port = ErrorCode.COORDINATOR_NOT_AVAILABLE, -1, "", -1
        else:
            found.host, found.port = advertised_host, ours
