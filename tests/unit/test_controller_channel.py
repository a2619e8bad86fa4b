"""The controller channel's in-process delivery to the controller's own broker."""

from __future__ import annotations

import asyncio
import logging
import random
from typing import Any

import pytest

from kaflet.controller.channel import ControllerChannel
from kaflet.metadata.zkdata import BrokerInfo, EndPoint
from kaflet.network.client import InterBrokerSettings
from kaflet.network.connector import InterBrokerConnector
from kaflet.protocol import codec
from kaflet.protocol.api_keys import ApiKey

LOCAL_ID = 3


def _update_metadata(epoch: int) -> Any:
    R = codec.request_class(ApiKey.UPDATE_METADATA)
    return R(controller_id=LOCAL_ID, controller_epoch=epoch, broker_epoch=10, topic_states=[], live_brokers=[])


class _LocalBroker:
    """Handles requests in-process like a broker would: one response object per request."""

    def __init__(self) -> None:
        self.handled: list[int] = []
        self.running = 0
        self.max_running = 0

    async def deliver(self, api_key: ApiKey, request: Any) -> Any:
        self.running += 1
        self.max_running = max(self.max_running, self.running)
        try:
            await asyncio.sleep(random.uniform(0, 0.003))
            if request.controller_epoch == 13:
                raise RuntimeError("handler bug")
            self.handled.append(request.controller_epoch)
            return codec.build_response(api_key, error_code=0)
        finally:
            self.running -= 1


async def test_local_delivery_in_order_one_at_a_time(caplog: pytest.LogCaptureFixture) -> None:
    local = _LocalBroker()
    channel = ControllerChannel(LOCAL_ID, InterBrokerConnector(InterBrokerSettings()), local.deliver)
    # The local broker needs no reachable endpoint: it is never connected to.
    channel.add_broker(BrokerInfo(id=LOCAL_ID, endpoints=(EndPoint("PLAINTEXT", "127.0.0.1", 1),)))
    answered: list[tuple[int, Any]] = []
    done = asyncio.Event()

    def callback(epoch: int) -> Any:
        def on_response(response: Any) -> None:
            answered.append((epoch, response))
            if epoch == 7:
                raise ValueError("a failing callback must not stop the queue")
            if epoch == 99:
                done.set()
        return on_response

    for epoch in range(100):
        channel.send(LOCAL_ID, ApiKey.UPDATE_METADATA, _update_metadata(epoch), callback(epoch))
        if epoch % 10 == 0:
            await asyncio.sleep(0)  # let some run while more are queued
    await asyncio.wait_for(done.wait(), 10)
    expected = [e for e in range(100) if e != 13]
    assert local.handled == expected
    assert [e for e, _ in answered] == expected
    assert all(r.error_code == 0 and r.__class__.__name__ == "UpdateMetadataResponse" for _, r in answered)
    assert local.max_running == 1
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert any("local broker failed to handle UPDATE_METADATA" in m for m in errors)
    assert any("callback of UPDATE_METADATA to broker 3 failed" in m for m in errors)
    await channel.close()
    assert not [t for t in asyncio.all_tasks() if t.get_name().startswith("controller-")]


async def test_unknown_api_version_is_refused() -> None:
    local = _LocalBroker()
    channel = ControllerChannel(LOCAL_ID, InterBrokerConnector(InterBrokerSettings()), local.deliver)
    with pytest.raises(ValueError, match="no version for API"):
        channel.send(LOCAL_ID, ApiKey.FETCH, object())
    await channel.close()
