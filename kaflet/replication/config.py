"""The replication settings of a broker (Kafka's replica.* configs and their defaults)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class ReplicationConfig:
    """What the replica manager and its fetchers honour; ``from_broker`` reads server.properties
    values by their Kafka names."""

    #: replica.lag.time.max.ms: an ISR follower that has not caught up for this long is removed.
    replica_lag_time_max_ms: int = 30000
    #: num.replica.fetchers: fetchers (each one connection) per leader broker.
    num_replica_fetchers: int = 1
    #: replica.fetch.wait.max.ms / replica.fetch.min.bytes: the follower's long poll.
    fetch_wait_max_ms: int = 500
    fetch_min_bytes: int = 1
    #: replica.fetch.max.bytes: per partition; replica.fetch.response.max.bytes: per response.
    fetch_max_bytes: int = 1048576
    fetch_response_max_bytes: int = 10485760
    #: replica.fetch.backoff.ms: pause after a failed fetch or a partition error.
    fetch_backoff_ms: int = 1000
    #: replica.socket.timeout.ms: how long a fetcher waits for the leader's answer.
    socket_timeout_ms: int = 30000

    @classmethod
    def from_broker(cls, values: Mapping[str, Any]) -> ReplicationConfig:
        return cls(
            replica_lag_time_max_ms=values["replica.lag.time.max.ms"],
            num_replica_fetchers=values["num.replica.fetchers"],
            fetch_wait_max_ms=values["replica.fetch.wait.max.ms"],
            fetch_min_bytes=values["replica.fetch.min.bytes"],
            fetch_max_bytes=values["replica.fetch.max.bytes"],
            fetch_response_max_bytes=values["replica.fetch.response.max.bytes"],
            fetch_backoff_ms=values["replica.fetch.backoff.ms"],
            socket_timeout_ms=values["replica.socket.timeout.ms"],
        )
