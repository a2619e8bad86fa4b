"""The generic message codec behind one interface of ours.

Non-hot-path APIs are decoded and encoded from Kafka's message definitions by kafka-python's
schema-driven codec (it covers every version the common clients send, flexible or not, and
raises ordinary exceptions on malformed input). Handlers only use `request_class`,
`response_class` and `decode_request`, and return the response message unencoded; the
dispatcher encodes it with `encode_response` once the throttle time is known
(protocol/response.py). So the library can be swapped.
"""

from __future__ import annotations

import importlib
import struct
from functools import cache
from typing import Any

from kaflet.protocol import controller_codec
from kaflet.protocol.primitives import DecodeError

_MODULES = {
    0: "producer.produce", 1: "consumer.fetch", 2: "consumer.offsets", 3: "metadata.metadata",
    8: "consumer.group", 9: "consumer.group", 10: "metadata.find_coordinator", 11: "consumer.group",
    12: "consumer.group", 13: "consumer.group", 14: "consumer.group", 15: "admin.groups",
    16: "admin.groups", 17: "sasl", 18: "metadata.api_versions", 19: "admin.topics",
    20: "admin.topics", 21: "admin.topics", 22: "producer.transaction", 23: "consumer.offsets",
    24: "producer.transaction", 25: "producer.transaction", 26: "producer.transaction",
    27: "producer.transaction", 28: "producer.transaction", 29: "admin.acl", 30: "admin.acl",
    31: "admin.acl", 32: "admin.configs", 33: "admin.configs", 34: "admin.cluster",
    35: "admin.cluster", 36: "sasl", 37: "admin.topics", 42: "admin.groups", 43: "admin.topics",
    44: "admin.configs", 45: "admin.topics", 46: "admin.topics", 47: "consumer.group",
    48: "admin.client_quotas", 49: "admin.client_quotas", 50: "admin.users", 51: "admin.users",
    60: "admin.cluster", 61: "admin.transactions", 65: "admin.transactions", 66: "admin.transactions",
    75: "admin.topics",
    # The controller-to-broker APIs: kaflet's own definitions (kafka-python has none).
    4: "kaflet.protocol.inter_broker", 5: "kaflet.protocol.inter_broker",
    6: "kaflet.protocol.inter_broker", 7: "kaflet.protocol.inter_broker",
    # KIP-848's APIs: kaflet's definitions too.
    68: "kaflet.protocol.inter_broker", 69: "kaflet.protocol.inter_broker",
}


@cache
def _classes(api_key: int) -> tuple[Any, Any]:
    name = _MODULES[api_key]
    mod = importlib.import_module(name if name.startswith("kaflet.") else "kafka.protocol." + name)
    req = resp = None
    for obj in vars(mod).values():
        if getattr(obj, "_json", None) and getattr(obj, "API_KEY", None) == api_key:
            if obj._json["type"] == "request":  # not .type: LeaderAndIsr has a field named Type
                req = obj
            else:
                resp = obj
    if req is None or resp is None:
        raise LookupError(f"no message definition for API key {api_key}")
    return req, resp


# What kafka-python's decoder raises on malformed or hostile input.
_DECODE_ERRORS = (ValueError, IndexError, KeyError, TypeError, OverflowError, AttributeError,
                  MemoryError, EOFError, struct.error)


def request_class(api_key: int) -> Any:
    """The request message class (attributes named as in Kafka's JSON, snake_case)."""
    return _classes(api_key)[0]


def response_class(api_key: int) -> Any:
    """The response message class; nested structs are attributes of it (e.g. `.CreatableTopicResult`)."""
    return _classes(api_key)[1]


#: The hand-written decoders of the controller's per-partition messages (controller_codec.py):
#: (api key, version) -> parser.
_OWN_REQUEST_DECODERS = {
    (4, controller_codec.LEADER_AND_ISR_VERSION): controller_codec.decode_leader_and_isr_request,
    (6, controller_codec.UPDATE_METADATA_VERSION): controller_codec.decode_update_metadata_request,
}
_OWN_RESPONSE_DECODERS = {
    (4, controller_codec.LEADER_AND_ISR_VERSION): controller_codec.decode_leader_and_isr_response,
    (6, controller_codec.UPDATE_METADATA_VERSION): controller_codec.decode_update_metadata_response,
}


def decode_request(api_key: int, version: int, body: memoryview) -> Any:
    """Decode a request body; raises DecodeError for anything malformed."""
    own = _OWN_REQUEST_DECODERS.get((api_key, version))
    if own is not None:
        return own(body)
    try:
        return request_class(api_key).decode(body, version=version)
    except _DECODE_ERRORS as exc:
        raise DecodeError(f"malformed {request_class(api_key).__name__} v{version}: {exc}") from exc


def decode_response(api_key: int, version: int, body: memoryview) -> Any:
    """Decode a response body (what another broker answered); raises DecodeError for anything malformed."""
    own = _OWN_RESPONSE_DECODERS.get((api_key, version))
    if own is not None:
        return own(body)
    try:
        return response_class(api_key).decode(body, version=version)
    except _DECODE_ERRORS as exc:
        raise DecodeError(f"malformed {response_class(api_key).__name__} v{version}: {exc}") from exc


def encode_decoded_response(version: int, response: Any) -> bytes:
    """Encode again a response `decode_response` gave (a proxy's rewritten answer). The
    library's decode skips the constructor, leaving unset the header slot its encode reads."""
    try:
        response.header  # noqa: B018 (reads the slot)
    except AttributeError:
        response._header = None
    return bytes(response.encode(version=version))


@cache
def has_throttle_time(api_key: int, version: int) -> bool:
    """Does this version of the API's response have a throttle_time_ms field?"""
    field = response_class(api_key).fields.get("throttle_time_ms")
    return field is not None and bool(field.for_version_q(version))


def encode_response(api_key: int, version: int, response: Any, throttle_time_ms: int = 0) -> bytes:
    """Encode a response body (without header), with its throttle_time_ms when the version has one."""
    if has_throttle_time(api_key, version):
        response.throttle_time_ms = throttle_time_ms
    return bytes(response.encode(version=version))


def build_response(api_key: int, **fields: Any) -> Any:
    """Construct a response message from keyword fields."""
    return response_class(api_key)(**fields)
