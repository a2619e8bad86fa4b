"""A partition this broker hosts: its log, leadership, ISR, and fetchers waiting for data."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from kaflet.protocol.errors import ErrorCode, KafkaError


class Partition:
    """Leader-side state of one partition (followers come with replication)."""

    def __init__(self, topic: str, index: int, topic_id: str, log: Any, broker_id: int) -> None:
        self.topic = topic
        self.index = index
        self.topic_id = topic_id
        self.log = log
        self.broker_id = broker_id
        self.leader = -1
        self.leader_epoch = 0
        self.replicas: list[int] = []
        self.isr: list[int] = []
        self._waiters: set[asyncio.Future[None]] = set()

    @property
    def is_leader(self) -> bool:
        return self.leader == self.broker_id

    def make_leader(self, leader_epoch: int, replicas: list[int], isr: list[int]) -> None:
        """Become leader at `leader_epoch` (LeaderAndIsr, or the single-node controller)."""
        self.leader = self.broker_id
        self.leader_epoch = leader_epoch
        self.replicas = list(replicas)
        self.isr = list(isr)
        self.log.maybe_assign_epoch_start_offset(leader_epoch, self.log.log_end_offset)
        self._maybe_advance_high_watermark()

    def _maybe_advance_high_watermark(self) -> None:
        # With only this broker in the ISR every appended offset is fully replicated.
        if self.isr == [self.broker_id]:
            self.log.update_high_watermark(self.log.log_end_offset)

    def check_leader_epoch(self, current_leader_epoch: int) -> ErrorCode:
        """Kafka's fencing of requests that carry a leader epoch (-1: no check)."""
        if current_leader_epoch < 0 or current_leader_epoch == self.leader_epoch:
            return ErrorCode.NONE
        if current_leader_epoch < self.leader_epoch:
            return ErrorCode.FENCED_LEADER_EPOCH
        return ErrorCode.UNKNOWN_LEADER_EPOCH

    def append(self, records: memoryview, required_acks: int) -> Any:
        """Append a produce request's record set as leader; raises KafkaError on refusal."""
        if not self.is_leader:
            raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        if required_acks == -1:
            min_isr = self.log.config.min_insync_replicas
            if len(self.isr) < min_isr:
                raise KafkaError(
                    ErrorCode.NOT_ENOUGH_REPLICAS,
                    f"The size of the current ISR {len(self.isr)} is insufficient to satisfy the "
                    f"min.isr requirement of {min_isr} for partition {self.topic}-{self.index}",
                )
        result = self.log.append_as_leader(records, self.leader_epoch, int(time.time() * 1000))
        self._maybe_advance_high_watermark()
        self.wake_fetchers()
        return result

    def delete_records(self, offset: int) -> int:
        """DeleteRecords on the leader: move the log start offset to ``offset`` (-1: the high
        watermark); returns the low watermark.  Raises KafkaError with Kafka's error codes.

        The caller drops the segments now below the start and checkpoints it
        (``LogManager.log_start_offset_moved``).
        """
        if not self.is_leader:
            raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                             f"Leader not local for partition {self.topic}-{self.index} on broker {self.broker_id}")
        if not self.log.config.delete:
            raise KafkaError(ErrorCode.POLICY_VIOLATION,
                             f"Records of partition {self.topic}-{self.index} can not be deleted due to the configured policy")
        target = self.log.high_watermark if offset == -1 else offset
        if target < 0:
            raise KafkaError(ErrorCode.OFFSET_OUT_OF_RANGE,
                             f"The offset {target} for partition {self.topic}-{self.index} is not valid")
        self.log.maybe_increment_log_start_offset(target)  # OffsetOutOfRangeError past the HW
        # With followers this would be the smallest log start offset in the ISR.
        return int(self.log.log_start_offset)

    def wake_fetchers(self) -> None:
        """Complete every long-polling fetch that waits on this partition."""
        waiters, self._waiters = self._waiters, set()
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)

    def data_waiter(self, fut: asyncio.Future[None]) -> None:
        """Register a future completed at the next append."""
        self._waiters.add(fut)

    def forget_waiter(self, fut: asyncio.Future[None]) -> None:
        self._waiters.discard(fut)
