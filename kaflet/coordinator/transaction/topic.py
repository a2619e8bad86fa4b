"""__transaction_state's creation settings: the offsets topic's rules with Kafka's transaction
log configs (compacted, uncompressed, no unclean election, min.insync.replicas from
transaction.state.log.min.isr)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kaflet.coordinator.group.topic import OffsetsTopicConfig
from kaflet.coordinator.transaction.schemas import TRANSACTION_STATE_TOPIC


def transaction_topic_config(values: Mapping[str, Any]) -> OffsetsTopicConfig:
    """The creation settings of __transaction_state from the transaction.state.log.* configs."""
    return OffsetsTopicConfig(
        num_partitions=values["transaction.state.log.num.partitions"],
        replication_factor=values["transaction.state.log.replication.factor"],
        segment_bytes=values["transaction.state.log.segment.bytes"],
        name=TRANSACTION_STATE_TOPIC,
        configs=(("cleanup.policy", "compact"), ("compression.type", "uncompressed"),
                 ("unclean.leader.election.enable", "false"),
                 ("min.insync.replicas", str(values["transaction.state.log.min.isr"]))),
        prefix="transaction.state.log",
    )
