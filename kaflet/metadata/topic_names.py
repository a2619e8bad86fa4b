"""Kafka's topic name rules (org.apache.kafka.common.internals.Topic), in Python.

Legal names are 1–249 characters from ``[a-zA-Z0-9._-]``, and neither ``.`` nor ``..``. Because
metric names replace '.' with '_', two topics whose names differ only there would collide; Kafka
refuses to create the second one.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from kaflet.metadata.errors import InvalidTopicError, TopicExistsError

GROUP_METADATA_TOPIC_NAME = "__consumer_offsets"
TRANSACTION_STATE_TOPIC_NAME = "__transaction_state"
#: KRaft's metadata log; not a topic in ZooKeeper mode, but clients must not create it either.
CLUSTER_METADATA_TOPIC_NAME = "__cluster_metadata"
INTERNAL_TOPICS = frozenset({GROUP_METADATA_TOPIC_NAME, TRANSACTION_STATE_TOPIC_NAME})
LEGAL_CHARS = "[a-zA-Z0-9._-]"
MAX_NAME_LENGTH = 249

_LEGAL = re.compile(r"[a-zA-Z0-9._-]+")


class TopicCollisionError(InvalidTopicError, TopicExistsError):
    """The name collides with an existing topic ('.' vs '_'). Kafka answers INVALID_TOPIC_EXCEPTION
    (17); it is also a TopicExistsError so callers treating "exists" broadly catch it."""

    error_code = 17


def invalid_reason(name: str) -> str | None:
    """Why ``name`` is not a legal topic name, or None if it is legal."""
    if name == "":
        return "the empty string is not allowed"
    if name == ".":
        return "'.' is not allowed"
    if name == "..":
        return "'..' is not allowed"
    if len(name) > MAX_NAME_LENGTH:
        return f"the length of '{name}' is longer than the max allowed length {MAX_NAME_LENGTH}"
    if not _LEGAL.fullmatch(name):
        return f"'{name}' contains one or more characters other than ASCII alphanumerics, '.', '_' and '-'"
    return None


def is_valid(name: str) -> bool:
    """True if ``name`` is a legal topic name."""
    return invalid_reason(name) is None


def validate(name: str) -> None:
    """Raise :class:`InvalidTopicError` ("Topic name is invalid: ...") for an illegal name."""
    reason = invalid_reason(name)
    if reason is not None:
        raise InvalidTopicError(f"Topic name is invalid: {reason}")


def is_internal(name: str) -> bool:
    """True for Kafka's internal topics (__consumer_offsets, __transaction_state)."""
    return name in INTERNAL_TOPICS


def has_collision_chars(name: str) -> bool:
    """True if the name contains '.' or '_', the characters that can collide."""
    return "." in name or "_" in name


def unify_collision_chars(name: str) -> str:
    """The name with every '.' replaced by '_' (only for collision checks)."""
    return name.replace(".", "_")


def has_collision(a: str, b: str) -> bool:
    """True if the two names are equal once '.' and '_' are unified (identical names collide)."""
    return unify_collision_chars(a) == unify_collision_chars(b)


def colliding_topics(name: str, existing: Iterable[str]) -> list[str]:
    """Existing topics other than ``name`` itself that collide with ``name``, sorted."""
    if not has_collision_chars(name):
        # Without '.' or '_' only an identical name can collide.
        return []
    unified = unify_collision_chars(name)
    return sorted(t for t in existing if t != name and unify_collision_chars(t) == unified)


def check_collision(name: str, existing: Iterable[str]) -> None:
    """Raise TopicExistsError if ``name`` exists, TopicCollisionError if it collides (Kafka's wording)."""
    existing = list(existing)
    if name in existing:
        raise TopicExistsError(f"Topic '{name}' already exists.")
    colliding = colliding_topics(name, existing)
    if colliding:
        raise TopicCollisionError(f"Topic '{name}' collides with existing topics: {', '.join(colliding)}")
