"""The partitions this broker hosts, created and removed as the metadata says."""

from __future__ import annotations

import logging
from typing import Any

from kaflet.replication.partition import Partition

log = logging.getLogger("kaflet.replica")


class ReplicaManager:
    """Maps (topic, partition) to the Partition objects that own the logs."""

    def __init__(self, broker_id: int, log_manager: Any) -> None:
        self.broker_id = broker_id
        self.log_manager = log_manager
        self.partitions: dict[tuple[str, int], Partition] = {}

    def get(self, topic: str, partition: int) -> Partition | None:
        return self.partitions.get((topic, partition))

    def become_leader(
        self,
        topic: str,
        index: int,
        topic_id: str,
        leader_epoch: int,
        replicas: list[int],
        isr: list[int],
        log_config: Any,
    ) -> Partition:
        """Create the log if needed and lead the partition at `leader_epoch`."""
        part = self.partitions.get((topic, index))
        if part is None:
            log_ = self.log_manager.get_or_create_log(topic, index, topic_id, log_config)
            part = Partition(topic, index, topic_id, log_, self.broker_id)
            self.partitions[(topic, index)] = part
        part.make_leader(leader_epoch, replicas, isr)
        return part

    def update_config(self, topic: str, log_config: Any) -> None:
        for (t, _), part in self.partitions.items():
            if t == topic:
                part.log.update_config(log_config)

    def remove_topic(self, topic: str) -> None:
        """Stop and delete every local partition of a deleted topic."""
        for key in [k for k in self.partitions if k[0] == topic]:
            part = self.partitions.pop(key)
            part.wake_fetchers()
            self.log_manager.delete_log(topic, key[1])
