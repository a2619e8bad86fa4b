"""Delayed produce: acks=all is answered once the high watermark covers what was appended.

Kafka's DelayedProduce and its purgatory, shaped for one event loop. Each Partition keeps the
futures of the requests waiting on it (``HighWatermarkWaiters``), ordered by the offset the
high watermark must reach, and completes them from ``Partition.maybe_increment_high_watermark``
the moment it moves: nothing polls. A request that appended to several partitions waits on all
of their futures at once with one loop timer for its ``timeout_ms`` (``wait_for_acks``).

Kafka's rules, per partition:

* the high watermark reached the batch's last offset + 1: NONE, or
  NOT_ENOUGH_REPLICAS_AFTER_APPEND when the ISR is smaller than ``min.insync.replicas`` by then;
* this broker stopped leading the partition meanwhile: NOT_LEADER_OR_FOLLOWER;
* the partition was removed (topic deleted): the error its removal names;
* ``timeout_ms`` passed first: REQUEST_TIMED_OUT.

Memory is bounded by the requests in flight: a waiter leaves its partition when it completes,
times out, or its request is cancelled, and a leadership change or removal drops all of them.
"""

from __future__ import annotations

import asyncio
import heapq
from collections.abc import Sequence
from typing import TYPE_CHECKING

from kaflet.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from kaflet.replication.partition import Partition

# Dropped waiters are removed lazily; the heap is rebuilt once they are this many and at least
# half of it, so a partition whose high watermark is stuck does not accumulate timed-out ones.
_COMPACT_MIN = 64


class HighWatermarkWaiters:
    """The acks=all requests waiting on one partition, by the offset the high watermark must reach.

    Each future's result is the partition's ErrorCode for that request (see the module doc).
    """

    __slots__ = ("_heap", "_seq", "_dropped")

    def __init__(self) -> None:
        self._heap: list[tuple[int, int, asyncio.Future[ErrorCode]]] = []
        self._seq = 0
        self._dropped = 0  # cancelled futures still in the heap

    def __len__(self) -> int:
        return len(self._heap) - self._dropped

    def add(self, required_offset: int) -> asyncio.Future[ErrorCode]:
        """A future completed when the high watermark reaches ``required_offset`` (or earlier on
        leadership loss or removal)."""
        fut: asyncio.Future[ErrorCode] = asyncio.get_running_loop().create_future()
        self._seq += 1  # ties keep arrival order and never compare futures
        heapq.heappush(self._heap, (required_offset, self._seq, fut))
        return fut

    def drop(self, fut: asyncio.Future[ErrorCode]) -> None:
        """The request stopped waiting (timeout, cancellation): forget its future."""
        if fut.done():
            return  # already completed and popped, or dropped before
        fut.cancel()
        self._dropped += 1
        if self._dropped >= _COMPACT_MIN and 2 * self._dropped >= len(self._heap):
            self._heap = [e for e in self._heap if not e[2].done()]
            heapq.heapify(self._heap)
            self._dropped = 0

    def complete_up_to(self, high_watermark: int, error: ErrorCode) -> None:
        """The high watermark is now ``high_watermark``: answer every waiter it satisfies."""
        heap = self._heap
        while heap and heap[0][0] <= high_watermark:
            fut = heapq.heappop(heap)[2]
            if fut.done():
                self._dropped -= 1
            else:
                fut.set_result(error)

    def complete_all(self, error: ErrorCode) -> None:
        """Answer every waiter with ``error`` (leadership lost, partition removed)."""
        heap, self._heap, self._dropped = self._heap, [], 0
        for _, _, fut in heap:
            if not fut.done():
                fut.set_result(error)


async def wait_for_acks(pending: Sequence[tuple[Partition, int]], timeout_ms: int) -> list[ErrorCode]:
    """Kafka's DelayedProduce for one request: wait until every partition's high watermark
    reaches its required offset (the appended batch's last offset + 1) or ``timeout_ms`` passes.

    Returns one ErrorCode per entry of ``pending``, in order. Already satisfied partitions cost
    no future and no timer (the common case of a leader that is its own ISR).
    """
    results: list[ErrorCode] = []
    waiting: list[tuple[int, Partition, asyncio.Future[ErrorCode]]] = []
    for i, (partition, required_offset) in enumerate(pending):
        satisfied, error = partition.check_enough_replicas_reach_offset(required_offset)
        results.append(error)
        if not satisfied and error == ErrorCode.NONE:
            waiting.append((i, partition, partition.watch_high_watermark(required_offset)))
    if not waiting:
        return results
    try:
        await asyncio.wait([fut for _, _, fut in waiting], timeout=max(timeout_ms, 0) / 1000)
    finally:
        # On timeout, and when the request itself is cancelled (connection gone, shutdown).
        for i, partition, fut in waiting:
            if fut.done() and not fut.cancelled():
                results[i] = fut.result()
            else:
                partition.forget_high_watermark_waiter(fut)
                results[i] = ErrorCode.REQUEST_TIMED_OUT
    return results
