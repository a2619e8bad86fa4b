"""Codec classes for the APIs kafka-python's codec lacks, built by its schema-driven codec from
kaflet's own definitions in kaflet/protocol/schemas: the controller-to-broker APIs (LeaderAndIsr,
StopReplica, UpdateMetadata, ControlledShutdown) and KIP-848's ConsumerGroupHeartbeat and
ConsumerGroupDescribe. kaflet.protocol.codec serves them like every other generic API."""

from __future__ import annotations

import types
from typing import Any

from kafka.protocol.api_message import ApiMessage

_SCHEMAS = "kaflet.protocol.schemas"


def _message(name: str) -> Any:
    # The metaclass reads <name>.json from the package given as the `load_json` class keyword.
    return types.new_class(name, (ApiMessage,), {"load_json": _SCHEMAS})


LeaderAndIsrRequest = _message("LeaderAndIsrRequest")
LeaderAndIsrResponse = _message("LeaderAndIsrResponse")
StopReplicaRequest = _message("StopReplicaRequest")
StopReplicaResponse = _message("StopReplicaResponse")
UpdateMetadataRequest = _message("UpdateMetadataRequest")
UpdateMetadataResponse = _message("UpdateMetadataResponse")
ControlledShutdownRequest = _message("ControlledShutdownRequest")
ControlledShutdownResponse = _message("ControlledShutdownResponse")
ConsumerGroupHeartbeatRequest = _message("ConsumerGroupHeartbeatRequest")
ConsumerGroupHeartbeatResponse = _message("ConsumerGroupHeartbeatResponse")
ConsumerGroupDescribeRequest = _message("ConsumerGroupDescribeRequest")
ConsumerGroupDescribeResponse = _message("ConsumerGroupDescribeResponse")
