"""Errors of topic administration, each carrying the Kafka error code a handler returns.

They live in the metadata package because the assignment and topic-name rules raise them too;
:mod:`kaflet.controller.topics` re-exports them.
"""

from __future__ import annotations


class AdminError(Exception):
    """Base class: ``error_code`` is the Kafka protocol error code, ``message`` the error message."""

    error_code: int = -1  # UNKNOWN_SERVER_ERROR

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class AdminOperationError(AdminError):
    """Kafka's AdminOperationException (e.g. some brokers have a rack and others not).

    Kafka reports it as UNKNOWN_SERVER_ERROR; we keep that code for compatibility.
    """

    error_code = -1


class UnknownTopicOrPartitionError(AdminError):
    """UNKNOWN_TOPIC_OR_PARTITION (3)."""

    error_code = 3


class BrokerNotAvailableError(AdminError):
    """BROKER_NOT_AVAILABLE (8)."""

    error_code = 8


class InvalidTopicError(AdminError):
    """INVALID_TOPIC_EXCEPTION (17): an illegal name, or a '.'/'_' collision with an existing topic."""

    error_code = 17


class TopicExistsError(AdminError):
    """TOPIC_ALREADY_EXISTS (36)."""

    error_code = 36


class InvalidPartitionsError(AdminError):
    """INVALID_PARTITIONS (37)."""

    error_code = 37


class InvalidReplicationFactorError(AdminError):
    """INVALID_REPLICATION_FACTOR (38)."""

    error_code = 38


class InvalidReplicaAssignmentError(AdminError):
    """INVALID_REPLICA_ASSIGNMENT (39)."""

    error_code = 39


class InvalidConfigError(AdminError):
    """INVALID_CONFIG (40)."""

    error_code = 40


class InvalidRequestError(AdminError):
    """INVALID_REQUEST (42)."""

    error_code = 42


class ReassignmentInProgressError(AdminError):
    """REASSIGNMENT_IN_PROGRESS (60)."""

    error_code = 60
