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


class UnexpectedAppendOffsetError(LogError):
    """A follower append whose first offset is below the log end offset (Kafka's
    UnexpectedAppendOffsetException); ``first_offset``/``last_offset`` are the appended range."""

    def __init__(self, message: str, first_offset: int, last_offset: int) -> None:
        super().__init__(ErrorCode.UNKNOWN_SERVER_ERROR, message)
        self.first_offset = first_offset
        self.last_offset = last_offset


class ProducerStateError(LogError):
    """An idempotent/transactional producer check failed (out of order, fenced epoch, ...)."""


class CorruptIndexError(Exception):
    """An index file fails its sanity check; the segment rebuilds it from the log."""


class KafkaStorageError(OSError):
    """The log's directory is offline after an I/O error (Kafka's KafkaStorageException);
    an OSError, so every path that answers a disk error with KAFKA_STORAGE_ERROR answers it."""


class PartitionLimitError(KafkaStorageError):
    """A new log would take the broker past its partition limit (``max.broker.partitions``):
    refused with KAFKA_STORAGE_ERROR for that partition, the log dir stays online."""
