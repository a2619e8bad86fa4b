"""Delayed fetch: a Fetch that has not read ``min_bytes`` yet waits (up to ``max_wait_ms``)
for what it may read to grow, Kafka's DelayedFetch shaped for one event loop, beside the
delayed produce (``delayed_produce.py``).

Each Partition keeps the wake callbacks of the fetches waiting on it, in two sets: followers
are woken by every append (they read up to the log end offset), consumers only when the high
watermark moves (what they may read), and both at a leadership change or when the partition
is closed (``Partition.data_waiter``). Nothing polls: the read path (``fetch_path.py``) reads
again only the partitions that woke it.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kaflet.replication.partition import Partition


class _Waiter:
    """Wakes a waiting fetch at the first append to one of its partitions, and notes which
    partitions were appended to until it looks."""

    __slots__ = ("future", "woken", "wake")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.future: asyncio.Future[None] = loop.create_future()
        self.woken: list[Partition] = []
        self.wake = self._wake  # one bound method, so every partition holds the same callback

    def _wake(self, part: Partition) -> None:
        self.woken.append(part)
        if not self.future.done():
            self.future.set_result(None)

    def expire(self) -> None:
        if not self.future.done():
            self.future.set_result(None)


async def wait_for_data(partitions: dict[Partition, int], timeout: float, follower: bool) -> list[Partition]:
    """Wait until what the fetch may read grows in one of the partitions (or one is removed),
    at most ``timeout`` seconds; returns the partitions that changed (none: timed out)."""
    loop = asyncio.get_running_loop()
    waiter = _Waiter(loop)
    wake = waiter.wake
    for part in partitions:
        part.data_waiter(wake, follower)
    # A plain timer on the waiter's own future: every follower fetch waits here between two
    # appends, and asyncio.wait_for would add a second future and its callbacks each time.
    timer = loop.call_later(timeout, waiter.expire)
    try:
        await waiter.future
    finally:
        timer.cancel()
        for part in partitions:
            part.forget_waiter(wake, follower)
    return waiter.woken
