"""The partitions this broker hosts, created and removed as the metadata says."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from kaflet.log.config import LogConfig
from kaflet.log.log_manager import LogManager
from kaflet.protocol.errors import ErrorCode
from kaflet.replication.partition import DEFAULT_REPLICA_LAG_TIME_MAX_MS, Partition

log = logging.getLogger("kaflet.replica")


def _now_ms() -> int:
    return int(time.time() * 1000)


class ReplicaManager:
    """Maps (topic, partition) to the Partition objects that own the logs."""

    def __init__(self, broker_id: int, log_manager: LogManager, *,
                 replica_lag_time_max_ms: int = DEFAULT_REPLICA_LAG_TIME_MAX_MS,
                 now_ms: Callable[[], int] = _now_ms) -> None:
        self.broker_id = broker_id
        self.log_manager = log_manager
        self.replica_lag_time_max_ms = replica_lag_time_max_ms
        self._time = now_ms
        self.partitions: dict[tuple[str, int], Partition] = {}

    def get(self, topic: str, partition: int) -> Partition | None:
        """The hosted partition, or None (a ``PartitionLookup``)."""
        return self.partitions.get((topic, partition))

    def become_leader(
        self,
        topic: str,
        index: int,
        topic_id: str,
        leader_epoch: int,
        replicas: list[int],
        isr: list[int],
        log_config: LogConfig,
    ) -> Partition:
        """Create the log if needed and lead the partition at `leader_epoch`."""
        part = self.partitions.get((topic, index))
        if part is None:
            log_ = self.log_manager.get_or_create_log(topic, index, topic_id, log_config)
            part = Partition(topic, index, topic_id, log_, self.broker_id,
                             replica_lag_time_max_ms=self.replica_lag_time_max_ms, now_ms=self._time)
            self.partitions[(topic, index)] = part
        part.make_leader(leader_epoch, replicas, isr)
        return part

    def update_config(self, topic: str, log_config: LogConfig) -> None:
        for (t, _), part in self.partitions.items():
            if t == topic:
                part.log.update_config(log_config)

    def remove_topic(self, topic: str) -> None:
        """Stop and delete every local partition of a deleted topic."""
        for key in [k for k in self.partitions if k[0] == topic]:
            part = self.partitions.pop(key)
            # The topic is gone from the metadata: Kafka answers such waiters this way.
            part.close(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            self.log_manager.delete_log(topic, key[1])

    def shutdown(self) -> None:
        """The broker is stopping: answer everything waiting on a partition, as if leadership
        moved away (acks=all: NOT_LEADER_OR_FOLLOWER, so producers retry elsewhere)."""
        for part in self.partitions.values():
            part.close(ErrorCode.NOT_LEADER_OR_FOLLOWER)
