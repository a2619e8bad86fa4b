"""Kafka's controlled shutdown, the broker's side: ask the controller to move this broker's
leaderships away (and take it out of the ISRs) before it stops, retrying as configured."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from kaflet.protocol import codec
from kaflet.protocol.api_keys import ApiKey
from kaflet.protocol.broker_connection import BrokerConnectionError
from kaflet.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from kaflet.controller.controller import KafkaController
    from kaflet.network.connector import InterBrokerConnector
    from kaflet.server.config import BrokerConfig

log = logging.getLogger("kaflet.broker")


async def controlled_shutdown(config: BrokerConfig, broker_id: int, broker_epoch: Callable[[], int],
                              controller: KafkaController, controller_id: Callable[[], int],
                              connector: InterBrokerConnector) -> None:
    """Ask the active controller (this broker's own, in-process, or another one over the
    inter-broker listener) until it moved every leadership away or the retries run out."""
    retries = config["controlled.shutdown.max.retries"]
    backoff_s = config["controlled.shutdown.retry.backoff.ms"] / 1000
    timeout_s = config["controller.socket.timeout.ms"] / 1000
    for attempt in range(retries + 1):
        if attempt:
            await asyncio.sleep(backoff_s)
        try:
            # The controller may have moved meanwhile: looked up at each attempt.
            if controller.is_active:
                error, remaining = await controller.controlled_shutdown(broker_id, broker_epoch())
            else:
                error, remaining = await _ask_controller(broker_id, broker_epoch(), controller_id(), connector,
                                                         timeout_s)
        except (BrokerConnectionError, OSError, TimeoutError) as exc:
            log.warning("controlled shutdown attempt %d failed: %s", attempt + 1, exc)
            continue
        if error == ErrorCode.NONE and not remaining:
            log.info("controlled shutdown succeeded")
            return
        log.warning("controlled shutdown attempt %d: %s, partitions still led: %s", attempt + 1,
                    ErrorCode(error).name, ", ".join(f"{t}-{p}" for t, p in remaining) or "none")
    log.warning("controlled shutdown did not complete; proceeding with an unclean shutdown")


async def _ask_controller(broker_id: int, broker_epoch: int, controller_id: int, connector: InterBrokerConnector,
                          timeout_s: float) -> tuple[int, list[tuple[str, int]]]:
    """ControlledShutdown v3 to another broker's controller: (error code, partitions still led)."""
    if controller_id < 0 or connector.endpoint(controller_id) is None:
        return int(ErrorCode.NOT_CONTROLLER), []
    client = await connector.connect_to(controller_id, client_id=f"broker-{broker_id}-shutdown",
                                        request_timeout_s=timeout_s)
    try:
        request = codec.request_class(ApiKey.CONTROLLED_SHUTDOWN)(broker_id=broker_id, broker_epoch=broker_epoch)
        response = await client.send(ApiKey.CONTROLLED_SHUTDOWN, 3, request)
    finally:
        await client.aclose()
    return response.error_code, [(r.topic_name, r.partition_index) for r in response.remaining_partitions]
