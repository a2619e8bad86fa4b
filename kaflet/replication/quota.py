"""What replication asks of a replication quota (Kafka's ReplicaQuota trait).

The leader side (the read path, ``follower_fetch.should_leader_throttle``) and the follower
side (the replica fetchers) use one of these each; kaflet/quota/replication.py implements them
(KIP-73's leader and follower quotas), fed by the broker's configs.
"""

from __future__ import annotations

from typing import Protocol


class ReplicaQuota(Protocol):
    """A replication quota: which partitions it throttles, whether it is over its bound now,
    and the bytes of throttled partitions to count."""

    def is_throttled(self, topic: str, partition: int) -> bool: ...

    def is_quota_exceeded(self) -> bool: ...

    def record(self, nbytes: int) -> None: ...


class UnboundedQuota:
    """A quota that never throttles (Kafka's UnboundedQuota): what a part is given when the
    broker sets no quota for it."""

    def is_throttled(self, topic: str, partition: int) -> bool:
        return False

    def is_quota_exceeded(self) -> bool:
        return False

    def record(self, nbytes: int) -> None:
        """Nothing to count: there is no bound."""
