"""The management-service client against a scripted service over real HTTP on 127.0.0.1."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from kaflet.gateway.client import HttpManagementService, parse_envelope, rows_of
from kaflet.gateway.model import ManagementServiceError
from tests.support.management_service import (
    ACLS,
    HEARTBEAT,
    JMX_TOPICS,
    USERS,
    ScriptedManagementService,
    scripted_management_service,
)


@pytest.fixture
def service() -> Iterator[ScriptedManagementService]:
    with scripted_management_service() as svc:
        yield svc


@pytest.mark.parametrize("as_string", [True, False])
async def test_rows_arrive_with_data_as_string_or_object(service: ScriptedManagementService, as_string: bool) -> None:
    service.data_as_string = as_string
    row = service.add_user("app_1", "secret", timestamp=1000)
    service.add_user("app_2", "later", timestamp=5000)
    client = HttpManagementService(service.url, timeout_s=5)
    try:
        data = await client.post(USERS, {"clusterId": 7, "start": 0, "end": 2000})
    finally:
        await client.close()
    assert rows_of(data) == [row]
    (req,) = service.recorded(USERS)
    assert req.method == "POST" and req.body == {"clusterId": 7, "start": 0, "end": 2000}


async def test_get_returns_a_plain_string_data_and_passes_the_query(service: ScriptedManagementService) -> None:
    service.jmx_topics = "t1,t2"
    client = HttpManagementService(service.url)
    try:
        assert await client.get(JMX_TOPICS, {"clusterId": 3}) == "t1,t2"
        assert await client.post(HEARTBEAT, {"produce": {}, "fetch": {}}, {"clusterId": 3, "brokerId": 1}) is None
    finally:
        await client.close()
    assert service.recorded(JMX_TOPICS)[0].query == {"clusterId": "3"}
    assert service.recorded(HEARTBEAT)[0].query == {"clusterId": "3", "brokerId": "1"}


@pytest.mark.parametrize(("mode", "words"), [
    ("code", "code -1: invalid request"),
    ("not-json", "not JSON"),
    ("http-500", "HTTP 500"),
])
async def test_garbage_answers_become_one_line_errors(service: ScriptedManagementService, mode: str,
                                                       words: str) -> None:
    service.set_mode(mode)
    client = HttpManagementService(service.url)
    try:
        with pytest.raises(ManagementServiceError) as info:
            await client.post(ACLS, {"clusterId": 1, "start": 0, "end": 0})
    finally:
        await client.close()
    assert words in str(info.value) and "\n" not in str(info.value)


async def test_missing_rows_is_an_error(service: ScriptedManagementService) -> None:
    service.set_mode("no-rows")
    client = HttpManagementService(service.url)
    try:
        data = await client.post(ACLS, {"clusterId": 1, "start": 0, "end": 0})
    finally:
        await client.close()
    with pytest.raises(ManagementServiceError, match="no 'rows'"):
        rows_of(data)


async def test_down_and_slow_services_fail_fast_and_recover(service: ScriptedManagementService) -> None:
    client = HttpManagementService(service.url, timeout_s=0.5)
    try:
        service.down()
        with pytest.raises(ManagementServiceError, match="ClientConnectorError"):
            await client.post(USERS, {"start": 0, "end": 0})
        service.up()
        service.set_mode("slow")
        service.slow_s = 3
        # The client's timeout, not the service's answer (3 s later), ends the call.
        with pytest.raises(ManagementServiceError, match="no answer within 0.5 s"):
            await client.post(USERS, {"start": 0, "end": 0})
        service.set_mode("ok")
        assert rows_of(await client.post(USERS, {"start": 0, "end": 0})) == []
    finally:
        await client.close()


def test_envelope_shapes() -> None:
    assert parse_envelope(b'{"code":0,"message":"success","data":"{\\"rows\\":[]}","tips":null}') == {"rows": []}
    assert parse_envelope(b'{"code":0,"data":""}') == ""
    for bad in (b"[1]", b'{"code":"0"}', b'{"code":true}', b'{"message":"x"}', b'{"code":0,"data":"{oops"}',
                b"\xff\xfe", b"[" * 100_000, b'{"code":0,"data":"' + b"[" * 100_000 + b'"}'):
        with pytest.raises(ManagementServiceError):
            parse_envelope(bad)
    for data in ({"rows": 3}, {"rows": [1]}, [], "x"):
        with pytest.raises(ManagementServiceError):
            rows_of(data)
    assert rows_of({"rows": None}) == []
