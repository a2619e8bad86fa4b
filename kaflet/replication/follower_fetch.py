"""The leader's side of a follower's Fetch (Kafka's ReplicaManager.fetchMessages for a replica
id): what the read path (``fetch_path.py``) does differently for a follower, kept here so that
path stays the same for consumers and followers.

A follower (replica id >= 0) reads up to the log end offset, not the high watermark: it must
copy what is not committed yet for the high watermark to advance at all. After the read the
leader records the follower's position (the fetch offset: it holds everything below), which may
advance the high watermark (completing acks=all produces) and add the follower to the ISR. A
replica id that is not one of the partition's followers gets NOT_LEADER_OR_FOLLOWER (Kafka 2.8
answers such a fetch with empty records and no error; 3.x with this error).

Replication throttling (KIP-73, kaflet/quota/replication.py): while the leader's quota is
exceeded, a throttled partition is answered to a follower outside the ISR without records; the
bytes of throttled partitions sent to any follower count towards the quota.

Consumers read only from the leader here: kaflet does not implement ``replica.selector.class``
(KIP-392), so a consumer fetching from a follower gets NOT_LEADER_OR_FOLLOWER.
"""

from __future__ import annotations

import time

from kaflet.protocol.errors import ErrorCode, KafkaError
from kaflet.replication.partition import Partition
from kaflet.replication.quota import ReplicaQuota


def is_follower_fetch(replica_id: int) -> bool:
    """A broker's replica fetch (consumers send -1, debugging tools -2)."""
    return replica_id >= 0


def fetch_upper_bound(partition: Partition, replica_id: int) -> int:
    """The offset a fetch may read up to: the log end offset for a follower, the high
    watermark for a consumer."""
    log = partition.log
    return log.log_end_offset if replica_id >= 0 else log.high_watermark


def record_follower_fetch(partition: Partition, replica_id: int, fetch_offset: int, log_start_offset: int,
                          now_ms: int | None = None) -> ErrorCode:
    """Record a follower's fetch from ``fetch_offset`` after its data was read; returns
    NOT_LEADER_OR_FOLLOWER when the partition is not led here or the replica is not one of its
    followers (the answer then carries no records), else NONE."""
    try:
        partition.update_follower_fetch_state(replica_id, fetch_offset, log_start_offset,
                                              int(time.time() * 1000) if now_ms is None else now_ms)
    except KafkaError as exc:
        return exc.code
    return ErrorCode.NONE


def should_leader_throttle(quota: ReplicaQuota, partition: Partition, replica_id: int) -> bool:
    """Kafka's shouldLeaderThrottle: the follower is not in sync, the partition is throttled on
    this leader and the leader's replication rate is over its bound (in-sync followers are never
    held back, so the ISR does not shrink because of a throttle)."""
    return (replica_id not in partition.isr and quota.is_throttled(partition.topic, partition.index)
            and quota.is_quota_exceeded())
