"""The leader's ISR changes in the metadata tree: Kafka 2.8's ZkIsrManager.

A leader writes a new ISR straight to ``/brokers/topics/<t>/partitions/<p>/state``, conditional
on the znode version the controller last sent (the partition epoch), keeping the leader and its
epoch and the epoch of the controller that elected it. On a version conflict the node is read
back: if it already holds exactly what was written (a retried write that had gone through) that
counts as success, else the change is given up (Kafka's ``checkLeaderAndIsrZkData``); a missing
node is given up too. The partition learns the outcome through its callback.

Successful changes are collected and announced to the controller with a sequential
``/isr_change_notification/isr_change_<n>`` node listing the partitions (Kafka's
``maybePropagateIsrChanges``): checked every 2.5 s, written once changes exist and none came in
the last 5 s, or 60 s after the last notification at the latest, so that a burst of ISR changes
costs the controller one notification.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from kaflet.metadata import zkdata
from kaflet.metadata.tree import BadVersionError, MetadataError, MetadataTree, NoNodeError

log = logging.getLogger("kaflet.isr")


def _now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True, slots=True)
class IsrChangePropagationConfig:
    """Kafka's ZkIsrManager.DefaultIsrPropagationConfig (fixed in Kafka; parameters here so
    tests need not wait seconds)."""

    check_interval_ms: int = 2500
    linger_ms: int = 5000
    max_delay_ms: int = 60000


class ZkIsrManager:
    """Conditional ISR writes and ISR-change notifications (an ``IsrWriter``)."""

    def __init__(self, tree: MetadataTree, config: IsrChangePropagationConfig | None = None, *,
                 now_ms: Callable[[], int] = _now_ms) -> None:
        self.tree = tree
        self.config = config or IsrChangePropagationConfig()
        self._time = now_ms
        #: Partitions whose ISR changed since the last notification.
        self.isr_change_set: set[tuple[str, int]] = set()
        self._last_change_ms = now_ms()
        self._last_propagation_ms = now_ms()
        self._writes: set[asyncio.Task[None]] = set()
        self._task: asyncio.Task[None] | None = None

    # -- writes -------------------------------------------------------------------------------

    def submit(self, topic: str, partition: int, state: zkdata.LeaderAndIsr,
               on_done: Callable[[int | None], None]) -> None:
        """Write ``state`` conditionally on ``state.zk_version``; ``on_done`` runs on the loop
        with the new version, or None when the change was given up."""
        task = asyncio.get_running_loop().create_task(self._write(topic, partition, state, on_done),
                                                      name=f"isr-write-{topic}-{partition}")
        self._writes.add(task)
        task.add_done_callback(self._writes.discard)

    async def _write(self, topic: str, partition: int, state: zkdata.LeaderAndIsr,
                     on_done: Callable[[int | None], None]) -> None:
        version = await self.update_leader_and_isr(topic, partition, state)
        if version is not None:
            self.isr_change_set.add((topic, partition))
            self._last_change_ms = self._time()
        on_done(version)

    async def update_leader_and_isr(self, topic: str, partition: int, state: zkdata.LeaderAndIsr) -> int | None:
        """Kafka's ReplicationUtils.updateLeaderAndIsr: the new znode version, or None."""
        path = zkdata.partition_state_path(topic, partition)
        data = zkdata.partition_state_json(state)
        try:
            return (await self.tree.set(path, data, state.zk_version)).version
        except BadVersionError:
            pass
        except NoNodeError:
            log.info("ISR of %s-%d not written: %s does not exist", topic, partition, path)
            return None
        except MetadataError as exc:
            log.warning("ISR of %s-%d not written: %s", topic, partition, exc)
            return None
        try:
            written, stat = await self.tree.get(path)
        except MetadataError:
            return None
        try:
            same = zkdata.parse_partition_state(written, stat.version) == zkdata.parse_partition_state(data, stat.version)
        except (ValueError, KeyError, TypeError):  # json.JSONDecodeError is a ValueError
            same = False
        if same:
            return stat.version
        log.info("ISR of %s-%d not written: the state znode is no longer at version %d", topic, partition,
                 state.zk_version)
        return None

    # -- notifications ------------------------------------------------------------------------

    async def maybe_propagate_isr_changes(self) -> bool:
        """Write one ISR change notification if it is due (see the module doc); returns
        whether one was written."""
        now = self._time()
        cfg = self.config
        if not self.isr_change_set or not (self._last_change_ms + cfg.linger_ms < now
                                           or self._last_propagation_ms + cfg.max_delay_ms < now):
            return False
        changed = sorted(self.isr_change_set)
        try:
            await self.tree.create(zkdata.isr_change_prefix(), zkdata.partition_list_json(changed),
                                   sequential=True, make_parents=True)
        except MetadataError as exc:
            log.warning("cannot write the ISR change notification for %d partitions: %s", len(changed), exc)
            return False
        self.isr_change_set.difference_update(changed)
        self._last_propagation_ms = now
        return True

    def start(self) -> None:
        """Run ``maybe_propagate_isr_changes`` every check interval until ``stop``."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="isr-change-propagation")

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.config.check_interval_ms / 1000)
            try:
                await self.maybe_propagate_isr_changes()
            except Exception:
                log.exception("ISR change propagation failed")

    async def stop(self) -> None:
        """Stop propagating and wait for the ISR writes in flight."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._writes:
            await asyncio.gather(*list(self._writes), return_exceptions=True)
