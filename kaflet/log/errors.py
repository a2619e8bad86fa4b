"""Errors raised by the storage layer, each carrying the Kafka error code to answer with."""

from __future__ import annotations

from kaflet.protocol.errors import ErrorCode, KafkaError


class LogError(KafkaError):
    """A storage-layer failure that maps onto a Kafka error code."""

    def __init__(self, error_code: int, message: str) -> None:
        super().__init__(ErrorCode(error_code), message)
        self.error_code = error_code


class OffsetOutOfRangeError(LogError):
    """A fetch or list-offsets position outside [log start offset, log end offset]."""

    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.OFFSET_OUT_OF_RANGE, message)


class ProducerStateError(LogError):
    """An idempotent/transactional producer check failed (out of order, fenced epoch, ...)."""


class CorruptIndexError(Exception):
    """An index file fails its sanity check; the segment rebuilds it from the log."""
