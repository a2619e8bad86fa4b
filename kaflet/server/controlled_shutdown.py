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
    from kaflet.metadata.metadata_cache import MetadataCache
    from kaflet.network.connector import InterBrokerConnector
    from kaflet.server.config import BrokerConfig

log = logging.getLogger("kaflet.broker")


async def controlled_shutdown(config: BrokerConfig, broker_id: int, broker_epoch: Callable[[], int],
                              controller: KafkaController, metadata: MetadataCache,
                              connector: InterBrokerConnector) -> None:
    """Ask the active controller (this broker's own, in-process, or another one over the
    inter-broker listener) until it moved every leadership away or the retries run out.

    Two waits are cut short where Kafka's are not, because nothing can change during them: the
    back-off ends once another controller is elected or a broker leaves, and when the metadata
    names no other live broker, the partitions still led have nowhere to go, so no retry."""
    retries = config["controlled.shutdown.max.retries"]
    backoff_s = config["controlled.shutdown.retry.backoff.ms"] / 1000
    timeout_s = config["controller.socket.timeout.ms"] / 1000
    for attempt in range(retries + 1):
        if attempt:
            await _back_off(backoff_s, controller, metadata)
        try:
            # The controller may have moved meanwhile: looked up at each attempt.
            if controller.is_active:
                error, remaining = await controller.controlled_shutdown(broker_id, broker_epoch())
            else:
                error, remaining = await _ask_controller(broker_id, broker_epoch(), metadata.controller_id, connector,
                                                         timeout_s)
        except (BrokerConnectionError, OSError, TimeoutError) as exc:
            log.warning("controlled shutdown attempt %d failed: %s", attempt + 1, exc)
            continue
        if error == ErrorCode.NONE and not remaining:
            log.info("controlled shutdown succeeded")
            return
        led = ", ".join(f"{t}-{p}" for t, p in remaining) or "none"
        if error == ErrorCode.NONE and not _other_live_brokers(metadata, broker_id):
            log.info("controlled shutdown: no other live broker can lead %s; stopping without moving them", led)
            return
        log.warning("controlled shutdown attempt %d: %s, partitions still led: %s", attempt + 1,
                    ErrorCode(error).name, led)
    log.warning("controlled shutdown did not complete; proceeding with an unclean shutdown")


def _other_live_brokers(metadata: MetadataCache, broker_id: int) -> set[int]:
    return {b.id for b in metadata.live_brokers()} - {broker_id}


async def _back_off(seconds: float, controller: KafkaController, metadata: MetadataCache) -> None:
    """Wait ``seconds`` before the next attempt, or less once the controller or the live brokers
    change.

    When every broker of a cluster is stopped at once, each attempt meets a controller that is
    itself going away, or partitions whose other replicas are leaving too; Kafka then waits the
    whole back-off each time (5 s by default, 10-15 s per broker of a 3-broker cluster). What the
    next attempt needs is a new controller (this broker, or one named by an UpdateMetadata) or a
    new view of who is alive, so the wait ends as soon as either changes."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    was_active, controller_id = controller.is_active, metadata.controller_id
    live = {b.id for b in metadata.live_brokers()}
    while (left := deadline - loop.time()) > 0:
        await asyncio.sleep(min(left, 0.05))
        if controller.is_active != was_active or {b.id for b in metadata.live_brokers()} != live:
            return
        current = metadata.controller_id
        if current >= 0 and current != controller_id:
            return


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
