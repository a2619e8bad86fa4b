"""Storage: Kafka's on-disk log format (segments, indexes, checkpoints, producer state)."""

from kaflet.log.config import LogConfig
from kaflet.log.errors import LogError, OffsetOutOfRangeError, ProducerStateError
from kaflet.log.log import AppendResult, Log, ReadResult, TimestampOffset
from kaflet.log.log_manager import LogManager
from kaflet.log.segment import FileRegion, LogSegment

__all__ = [
    "AppendResult",
    "FileRegion",
    "Log",
    "LogConfig",
    "LogError",
    "LogManager",
    "LogSegment",
    "OffsetOutOfRangeError",
    "ProducerStateError",
    "ReadResult",
    "TimestampOffset",
]
