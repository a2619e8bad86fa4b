"""Response bodies as handlers return them, and their one encoding, with the throttle time.

A handler returns its response unencoded, because throttle_time_ms is known only after the
handler has run (Kafka's `sendResponseMaybeThrottle` passes it to the response's constructor
the same way). Either a message of the generic codec (protocol/codec.py), or, on the hot paths,
an `OwnEncoding` of our own encoders, with `encode(throttle_time_ms)`. `encode_body`
turns either into the bytes to send. A response whose version has no throttle_time_ms field is
encoded as it is.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeAlias

from kaflet.protocol import codec

if TYPE_CHECKING:
    from kaflet.protocol.fetch import Region

#: What an encoder produces: the body's bytes, or chunks of it (bytes and file regions).
Body: TypeAlias = "bytes | bytearray | list[bytes | Region]"


class OwnEncoding:
    """Base of the responses of kaflet's own encoders (Produce, Fetch, ApiVersions, Metadata)."""

    __slots__ = ()

    def encode(self, throttle_time_ms: int) -> Body:
        """The response body, carrying `throttle_time_ms` when its version has that field."""
        raise NotImplementedError


#: A generic-codec message or an `OwnEncoding`, as a handler returns it.
Response: TypeAlias = Any


def encode_body(api_key: int, version: int, response: Response, throttle_time_ms: int) -> Body:
    """Encode a handler's response once, with the throttle time the quotas gave it."""
    # Our own encoders first: they are the hot paths (a plain base class is a cheap isinstance).
    if isinstance(response, OwnEncoding):
        return response.encode(throttle_time_ms)
    return codec.encode_response(api_key, version, response, throttle_time_ms)
