"""Codec classes for the controller-to-broker APIs (LeaderAndIsr, StopReplica, UpdateMetadata,
ControlledShutdown), built by kafka-python's schema-driven codec from kaflet's own definitions in
kaflet/protocol/schemas. kaflet.protocol.codec serves them like every other generic API."""

from __future__ import annotations

from kafka.protocol.api_message import ApiMessage

_SCHEMAS = "kaflet.protocol.schemas"


class LeaderAndIsrRequest(ApiMessage, load_json=_SCHEMAS):
    pass


class LeaderAndIsrResponse(ApiMessage, load_json=_SCHEMAS):
    pass


class StopReplicaRequest(ApiMessage, load_json=_SCHEMAS):
    pass


class StopReplicaResponse(ApiMessage, load_json=_SCHEMAS):
    pass


class UpdateMetadataRequest(ApiMessage, load_json=_SCHEMAS):
    pass


class UpdateMetadataResponse(ApiMessage, load_json=_SCHEMAS):
    pass


class ControlledShutdownRequest(ApiMessage, load_json=_SCHEMAS):
    pass


class ControlledShutdownResponse(ApiMessage, load_json=_SCHEMAS):
    pass
