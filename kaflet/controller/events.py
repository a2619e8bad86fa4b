"""Controller events and the one task that processes them (Kafka's ControllerEventManager).

Watches, timers, broker responses and API calls only enqueue small event objects; a single task
takes them one at a time and runs the controller's handler, so the controller's state is only
touched by that task. Events that carry a caller's future are answered by the handler, or by
:meth:`ControllerEvent.preempt` when the queue is cleared (session expiry, shutdown).
"""

from __future__ import annotations

import asyncio
import collections
import enum
import logging
import time
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from kaflet.controller.context import ReplicaAssignment, TopicPartition
from kaflet.metadata.tree import EventType, WatchCallback, WatchEvent
from kaflet.protocol.errors import ErrorCode

__all__ = [
    "AlterReassignmentsResult",
    "ApiPartitionReassignment",
    "AutoPreferredReplicaLeaderElection",
    "BrokerChange",
    "BrokerModifications",
    "ChangeWatches",
    "ControlledShutdown",
    "ControllerChange",
    "ControllerEvent",
    "ControllerEventManager",
    "DeferredElection",
    "ElectionTrigger",
    "ElectionType",
    "Expire",
    "IsrChangeNotification",
    "LeaderAndIsrResponseReceived",
    "ListPartitionReassignments",
    "ListReassignmentsResult",
    "LogDirEventNotification",
    "PartitionModifications",
    "PartitionReassignmentIsrChange",
    "Reelect",
    "ReplicaLeaderElection",
    "Startup",
    "TopicChange",
    "TopicDeletion",
    "TopicDeletionStopReplicaResponseReceived",
    "TopicUncleanLeaderElectionEnable",
    "UncleanLeaderElectionEnable",
    "UpdateMetadataResponseReceived",
    "ZkPartitionReassignment",
    "answer",
]

log = logging.getLogger(__name__)


class ElectionType(enum.IntEnum):
    """ElectLeaders' election types (the values on the wire)."""

    PREFERRED = 0
    UNCLEAN = 1


class ElectionTrigger(enum.Enum):
    """Who asked for a leader election."""

    AUTO = "AutoTriggered"
    ZK = "ZkTriggered"
    ADMIN_CLIENT = "AdminClientTriggered"


_T = TypeVar("_T")


def answer(future: asyncio.Future[_T] | None, value: _T) -> None:
    """Give a caller waiting on an event its result, unless it already has one (the event was
    preempted, or the caller gave up)."""
    if future is not None and not future.done():
        future.set_result(value)


class ControllerEvent:
    """Base class: an event for the controller's queue."""

    def preempt(self) -> None:
        """Answer a waiting caller when the event is dropped unprocessed."""


_K = TypeVar("_K", bound=Hashable)


class ChangeWatches(Generic[_K]):
    """Data watches on one znode per key (a broker, a topic, a partition's state) that put
    ``make(key)`` on the controller's queue when the node changes while the key is registered
    (Kafka's registered ZNodeChangeHandlers).

    One callback is kept per key, so that re-arming a watch never doubles it.
    """

    def __init__(self, make: Callable[[_K], ControllerEvent], enqueue: Callable[[ControllerEvent], None]) -> None:
        self._make = make
        self._enqueue = enqueue
        self._callbacks: dict[_K, WatchCallback] = {}
        #: The keys whose node changes are acted on.
        self.registered: set[_K] = set()

    def watch(self, key: _K) -> WatchCallback:
        """The callback to arm a watch on ``key``'s node with."""
        existing = self._callbacks.get(key)
        if existing is not None:
            return existing

        def on_change(event: WatchEvent) -> None:
            if event.type is EventType.CHANGED and key in self.registered:
                self._enqueue(self._make(key))

        self._callbacks[key] = on_change
        return on_change


@dataclass(slots=True)
class Startup(ControllerEvent):
    pass


@dataclass(slots=True)
class ControllerChange(ControllerEvent):
    pass


@dataclass(slots=True)
class Reelect(ControllerEvent):
    pass


@dataclass(slots=True)
class DeferredElection(ControllerEvent):
    """The preferred-candidate wait is over: compete unless a controller appeared meanwhile."""

    generation: int


@dataclass(slots=True)
class Expire(ControllerEvent):
    pass


@dataclass(slots=True)
class BrokerChange(ControllerEvent):
    pass


@dataclass(slots=True)
class BrokerModifications(ControllerEvent):
    broker_id: int


@dataclass(slots=True)
class TopicChange(ControllerEvent):
    pass


@dataclass(slots=True)
class PartitionModifications(ControllerEvent):
    topic: str


@dataclass(slots=True)
class TopicDeletion(ControllerEvent):
    pass


@dataclass(slots=True)
class IsrChangeNotification(ControllerEvent):
    pass


@dataclass(slots=True)
class LogDirEventNotification(ControllerEvent):
    pass


@dataclass(slots=True)
class AutoPreferredReplicaLeaderElection(ControllerEvent):
    generation: int


@dataclass(slots=True)
class UncleanLeaderElectionEnable(ControllerEvent):
    pass


@dataclass(slots=True)
class TopicUncleanLeaderElectionEnable(ControllerEvent):
    topic: str


ElectResults = dict[TopicPartition, tuple[int, str | None]]


@dataclass(slots=True)
class ReplicaLeaderElection(ControllerEvent):
    """An election asked for by ElectLeaders (``future`` set), the admin znode or the auto
    rebalance. ``partitions`` None: read them from /admin/preferred_replica_election."""

    partitions: set[TopicPartition] | None
    election_type: ElectionType
    trigger: ElectionTrigger
    future: asyncio.Future[ElectResults] | None = None

    def preempt(self) -> None:
        if self.future is not None and not self.future.done():
            self.future.set_result(
                {tp: (ErrorCode.NOT_CONTROLLER, None) for tp in (self.partitions or ())}
            )


@dataclass(slots=True)
class ControlledShutdown(ControllerEvent):
    broker_id: int
    broker_epoch: int
    future: asyncio.Future[tuple[int, set[TopicPartition]]] | None = None

    def preempt(self) -> None:
        if self.future is not None and not self.future.done():
            self.future.set_result((ErrorCode.NOT_CONTROLLER, set()))


@dataclass(slots=True)
class ZkPartitionReassignment(ControllerEvent):
    """/admin/reassign_partitions was created (or must be watched again)."""


@dataclass(slots=True)
class PartitionReassignmentIsrChange(ControllerEvent):
    """The state znode of a partition being reassigned changed: maybe its targets are in sync."""

    topic_partition: TopicPartition


#: (top-level error code, message, (error code, message) per partition).
AlterReassignmentsResult = tuple[int, str | None, dict[TopicPartition, tuple[int, str | None]]]
#: (top-level error code, the ongoing reassignments asked for).
ListReassignmentsResult = tuple[int, dict[TopicPartition, ReplicaAssignment]]


@dataclass(slots=True)
class ApiPartitionReassignment(ControllerEvent):
    """AlterPartitionReassignments: target replicas per partition, None to cancel."""

    reassignments: dict[TopicPartition, list[int] | None]
    future: asyncio.Future[AlterReassignmentsResult] | None = None

    def preempt(self) -> None:
        if self.future is not None and not self.future.done():
            self.future.set_result((ErrorCode.NOT_CONTROLLER, None, {}))


@dataclass(slots=True)
class ListPartitionReassignments(ControllerEvent):
    """ListPartitionReassignments: ``partitions`` None lists every ongoing reassignment."""

    partitions: set[TopicPartition] | None
    future: asyncio.Future[ListReassignmentsResult] | None = None

    def preempt(self) -> None:
        if self.future is not None and not self.future.done():
            self.future.set_result((ErrorCode.NOT_CONTROLLER, {}))


@dataclass(slots=True)
class LeaderAndIsrResponseReceived(ControllerEvent):
    response: Any
    broker_id: int


@dataclass(slots=True)
class UpdateMetadataResponseReceived(ControllerEvent):
    response: Any
    broker_id: int


@dataclass(slots=True)
class TopicDeletionStopReplicaResponseReceived(ControllerEvent):
    """A StopReplica response; ``deleted`` are the partitions the request asked to delete."""

    broker_id: int
    response: Any
    deleted: set[TopicPartition] = field(default_factory=set)


@dataclass(slots=True)
class _ShutdownEventThread(ControllerEvent):
    pass


class ControllerEventManager:
    """One FIFO of events and the task that runs ``process`` on each, one at a time."""

    def __init__(self, process: Callable[[ControllerEvent], Awaitable[None]], name: str = "controller") -> None:
        self._process = process
        self._name = name
        self._queue: collections.deque[tuple[ControllerEvent, float]] = collections.deque()
        self._ready = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._busy = False
        #: The event being processed (for logs and tests).
        self.current: ControllerEvent | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=f"kaflet-{self._name}-events")

    def put(self, event: ControllerEvent) -> None:
        self._queue.append((event, time.monotonic()))
        self._ready.set()

    def clear_and_put(self, event: ControllerEvent) -> None:
        """Drop (and preempt) every queued event, then queue ``event``."""
        dropped = list(self._queue)
        self._queue.clear()
        for ev, _t in dropped:
            try:
                ev.preempt()
            except Exception:
                log.exception("preempting %s failed", ev)
        self.put(event)

    @property
    def queue_size(self) -> int:
        return len(self._queue)

    def is_idle(self) -> bool:
        return not self._queue and not self._busy

    async def close(self) -> None:
        """Preempt what is queued and stop the task after the event in progress."""
        if self._task is None:
            return
        self.clear_and_put(_ShutdownEventThread())
        task, self._task = self._task, None
        await task

    async def wait_idle(self, timeout: float = 10.0) -> None:
        """Wait until no event is queued or running (watch callbacks included), for tests."""

        async def idle() -> None:
            quiet = 0
            while quiet < 3:
                await asyncio.sleep(0.005)
                quiet = quiet + 1 if self.is_idle() else 0

        await asyncio.wait_for(idle(), timeout)

    async def _run(self) -> None:
        while True:
            while not self._queue:
                self._ready.clear()
                await self._ready.wait()
            event, enqueued = self._queue.popleft()
            if isinstance(event, _ShutdownEventThread):
                return
            self._busy = True
            self.current = event
            try:
                waited = time.monotonic() - enqueued
                if waited > 5.0:
                    log.info("%s event %s waited %.1f s in the queue", self._name, type(event).__name__, waited)
                await self._process(event)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("uncaught error processing controller event %s", event)
            finally:
                self._busy = False
                self.current = None
