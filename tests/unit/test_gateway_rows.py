"""Parsing the management service's rows: numbers as JSON numbers or decimal strings, as
Logi-Kafka reads them; anything else refused with one ManagementServiceError."""

from __future__ import annotations

from typing import Any

import pytest

from kaflet.gateway.caches import merge_access, parse_acl_row, parse_partition_row, parse_user_row
from kaflet.gateway.data_cache import Record
from kaflet.gateway.model import AclRow, GatewayUser, ManagementServiceError, Operation, PartitionRow, UserRow


def test_rows_as_the_published_manager_and_as_logi_kafkas_test_service_send_them() -> None:
    assert parse_user_row({"username": "app", "password": "pw", "userType": 1, "operation": 0,
                           "timestamp": 5}) == UserRow(GatewayUser("app", "pw", True), Operation.CREATE, 5)
    assert parse_user_row({"username": "app", "password": "pw", "userType": "0", "operation": "2",
                           "timestamp": "7"}) == UserRow(GatewayUser("app", "pw", False), Operation.DELETE, 7)
    assert parse_acl_row({"topicName": "t", "username": "*", "access": "3", "operation": "0",
                          "timestamp": 9}) == AclRow("t", "*", 3, Operation.CREATE, 9)
    assert parse_partition_row({"topicName": "t", "disablePartitions": "2, 0", "operation": 1,
                                "timestamp": 1}) == PartitionRow("t", frozenset({0, 2}), Operation.UPDATE, 1)
    assert parse_partition_row({"topicName": "t", "disablePartitions": "", "operation": 2,
                                "timestamp": 1}).disabled == frozenset()


@pytest.mark.parametrize("row", [
    {"password": "pw", "userType": 0, "operation": 0, "timestamp": 1},
    {"username": "", "password": "pw", "userType": 0, "operation": 0, "timestamp": 1},
    {"username": "a", "password": 3, "userType": 0, "operation": 0, "timestamp": 1},
    {"username": "a", "password": "pw", "userType": True, "operation": 0, "timestamp": 1},
    {"username": "a", "password": "pw", "userType": 0, "operation": 3, "timestamp": 1},
    {"username": "a", "password": "pw", "userType": 0, "operation": 0, "timestamp": 1.5},
    {"username": "a", "password": "pw", "userType": 0, "operation": 0, "timestamp": "yesterday"},
    {"username": "a", "password": "pw", "userType": 0, "operation": 0, "timestamp": -1},
])
def test_bad_user_rows(row: dict[str, Any]) -> None:
    with pytest.raises(ManagementServiceError):
        parse_user_row(row)


@pytest.mark.parametrize("row", [
    {"topicName": "t", "username": "u", "access": 4, "operation": 0, "timestamp": 1},
    {"topicName": "t", "username": "u", "access": [1], "operation": 0, "timestamp": 1},
    {"topicName": None, "username": "u", "access": 1, "operation": 0, "timestamp": 1},
])
def test_bad_acl_rows(row: dict[str, Any]) -> None:
    with pytest.raises(ManagementServiceError):
        parse_acl_row(row)


@pytest.mark.parametrize("value", ["1,x", "-1", {"a": 1}, [True]])
def test_bad_partition_rows(value: Any) -> None:
    with pytest.raises(ManagementServiceError):
        parse_partition_row({"topicName": "t", "disablePartitions": value, "operation": 0, "timestamp": 1})


def test_grants_add_bits_and_revokes_clear_only_theirs() -> None:
    def rec(access: int, op: Operation) -> Record[tuple[str, str], int]:
        return Record(("t", "u"), access, op, 1)

    assert merge_access(rec(1, Operation.CREATE), None) == 1
    assert merge_access(rec(3, Operation.CREATE), 1) == 3
    assert merge_access(rec(1, Operation.DELETE), 3) == 2
    assert merge_access(rec(2, Operation.DELETE), 2) is None
    assert merge_access(rec(2, Operation.DELETE), None) is None
