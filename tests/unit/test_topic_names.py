"""Kafka's topic name rules."""

from __future__ import annotations

import pytest

from kaflet.metadata import topic_names as tn
from kaflet.metadata.errors import InvalidTopicError, TopicExistsError


@pytest.mark.parametrize("name", ["a", "A-b_c.d", "x" * 249, "__consumer_offsets", "0"])
def test_valid(name: str) -> None:
    assert tn.is_valid(name)
    tn.validate(name)


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("", "the empty string is not allowed"),
        (".", "'.' is not allowed"),
        ("..", "'..' is not allowed"),
        ("x" * 250, "is longer than the max allowed length 249"),
        ("a b", "contains one or more characters other than ASCII alphanumerics, '.', '_' and '-'"),
        ("ä", "characters other than ASCII"),
        ("a/b", "characters other than ASCII"),
    ],
)
def test_invalid(name: str, reason: str) -> None:
    assert not tn.is_valid(name)
    with pytest.raises(InvalidTopicError) as ei:
        tn.validate(name)
    assert ei.value.message.startswith("Topic name is invalid: ")
    assert reason in ei.value.message
    assert ei.value.error_code == 17


def test_internal() -> None:
    assert tn.is_internal("__consumer_offsets") and tn.is_internal("__transaction_state")
    assert not tn.is_internal("__other")


def test_collisions() -> None:
    assert tn.has_collision("a.b", "a_b")
    assert tn.has_collision("a.b", "a.b")
    assert not tn.has_collision("a.b", "ab")
    assert tn.colliding_topics("a.b_c", ["a_b.c", "a_b_c", "a.b_c", "x"]) == ["a_b.c", "a_b_c"]
    assert tn.colliding_topics("abc", ["abc"]) == []
    with pytest.raises(tn.TopicCollisionError) as ei:
        tn.check_collision("foo.bar", ["foo_bar"])
    assert ei.value.error_code == 17
    assert ei.value.message == "Topic 'foo.bar' collides with existing topics: foo_bar"
    assert isinstance(ei.value, TopicExistsError)
    with pytest.raises(TopicExistsError) as e2:
        tn.check_collision("foo", ["foo"])
    assert e2.value.error_code == 36 and e2.value.message == "Topic 'foo' already exists."
