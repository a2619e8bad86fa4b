"""Asking the controller again for replicas refused while descriptors or memory were short.

A LeaderAndIsr whose log cannot be created for want of a descriptor (EMFILE, ENFILE) or memory
is answered KAFKA_STORAGE_ERROR, as Kafka answers it, and the controller then counts the replica
offline until it next sends a LeaderAndIsr for it. Such a shortage is not a disk fault and
passes, so the broker asks again once the resource is back: it writes a
``/log_dir_event_notification`` znode, on which the controller sends LeaderAndIsr for every
replica on this broker (Kafka's ``onBrokerLogDirFailure``; a healthy replica answers NONE and
is online again). Asking is not free with many partitions, so the waits between attempts grow.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Awaitable, Callable

from kaflet.log.dir_failure import is_resource_exhaustion

log = logging.getLogger(__name__)

FIRST_DELAY_S = 5.0
MAX_DELAY_S = 60.0
#: After this long without a refusal, the next one starts from the first delay again.
CALM_S = 300.0
#: Descriptors a probe opens (and closes) to see that creating a log may succeed again: a
#: log takes a segment and two index files, and the request needs a few more.
PROBE_DESCRIPTORS = 8


def descriptors_available(count: int = PROBE_DESCRIPTORS) -> bool:
    """True if ``count`` descriptors can be opened at once now."""
    opened: list[int] = []
    try:
        for _ in range(count):
            opened.append(os.open(os.devnull, os.O_RDONLY))
        return True
    except OSError as exc:
        if is_resource_exhaustion(exc):
            return False
        raise
    finally:
        for fd in opened:
            os.close(fd)


class ResourceRetry:
    """Calls ``ask_again`` once the resource is back after replicas were refused; one attempt
    at a time, waiting ``FIRST_DELAY_S`` doubling to ``MAX_DELAY_S`` between attempts."""

    def __init__(self, ask_again: Callable[[], Awaitable[None]], *,
                 available: Callable[[], bool] = descriptors_available,
                 first_delay_s: float = FIRST_DELAY_S, max_delay_s: float = MAX_DELAY_S) -> None:
        self._ask_again = ask_again
        self._available = available
        self._first = first_delay_s
        self._max = max_delay_s
        self._delay = first_delay_s
        self._last_refusal = float("-inf")
        self._task: asyncio.Task[None] | None = None

    def refused(self, count: int) -> None:
        """``count`` replicas were refused for want of a resource (on the event loop)."""
        now = time.monotonic()
        if now - self._last_refusal > CALM_S:
            self._delay = self._first
        self._last_refusal = now
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._retry(count), name="resource-retry")

    async def _retry(self, count: int) -> None:
        while True:
            await asyncio.sleep(self._delay)
            self._delay = min(self._delay * 2, self._max)
            if self._available():
                break
        log.info("resources are back: asking the controller again for %d refused replicas", count)
        await self._ask_again()

    async def stop(self) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
