"""The controller's reads and fenced writes of the metadata tree (its part of KafkaZkClient).

Every write is a ``multi`` that starts with ``CheckOp(/controller_epoch, epoch_zk_version)``, the
version this controller wrote when it was elected; if that check fails, another controller has
been elected since, and :class:`ControllerMovedError` is raised so that this one resigns. Writes
that Kafka pipelines as independent requests (one per partition) are sent as one multi when
possible and, if one of them fails, one multi each, so that each gets its own result.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from kaflet.controller.context import ReplicaAssignment, TopicPartition
from kaflet.metadata import zkdata as zk
from kaflet.metadata.tree import (
    BadVersionError,
    CheckOp,
    CreateOp,
    DeleteOp,
    MetadataError,
    MetadataTree,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    Op,
    SetOp,
    Stat,
    WatchCallback,
    join_path,
)
from kaflet.metadata.zkdata import BrokerInfo, LeaderAndIsr, TopicAssignment

__all__ = [
    "ZK_MULTI_BUDGET",
    "ControllerMovedError",
    "ControllerZkClient",
    "multi_op_size",
]

log = logging.getLogger(__name__)

#: ZooKeeper refuses requests above jute.maxbuffer (1 MiB by default): keep each multi well below.
ZK_MULTI_BUDGET = 512 * 1024


class ControllerMovedError(Exception):
    """The controller epoch check failed: another controller has been elected."""


def multi_op_size(op: Op) -> int:
    """A generous estimate of an op's size in a ZooKeeper multi request."""
    data = getattr(op, "data", None)
    return len(op.path) + (len(data) if data else 0) + 64


class ControllerZkClient:
    """Kafka's KafkaZkClient operations the controller uses, over a :class:`MetadataTree`."""

    def __init__(self, tree: MetadataTree) -> None:
        self.tree = tree

    # ------------------------------------------------------------------ fenced writes

    def _chunks(self, ops: Sequence[Op]) -> list[list[Op]]:
        if self.tree.backend != "zookeeper":
            return [list(ops)]
        chunks: list[list[Op]] = [[]]
        size = 0
        for op in ops:
            s = multi_op_size(op)
            if chunks[-1] and size + s > ZK_MULTI_BUDGET:
                chunks.append([])
                size = 0
            chunks[-1].append(op)
            size += s
        return chunks

    @staticmethod
    def _moved(e: MetadataError, zkv: int) -> ControllerMovedError:
        err = ControllerMovedError(f"Controller epoch zkVersion check fails. Expected zkVersion = {zkv}")
        err.__cause__ = e
        return err

    async def fenced(self, ops: Sequence[Op], epoch_zk_version: int) -> list[Any]:
        """Apply ``ops`` behind the epoch check, all or nothing (per ZooKeeper-sized chunk)."""
        results: list[Any] = []
        for chunk in self._chunks(ops):
            try:
                res = await self.tree.multi([CheckOp(zk.CONTROLLER_EPOCH_PATH, epoch_zk_version), *chunk])
            except MetadataError as e:
                if e.op_index == 0:
                    raise self._moved(e, epoch_zk_version) from e
                if e.op_index is not None:
                    e.op_index -= 1
                raise
            results.extend(res[1:])
        return results

    async def _fenced_one(self, op: Op, zkv: int) -> Any:
        try:
            res = await self.tree.multi([CheckOp(zk.CONTROLLER_EPOCH_PATH, zkv), op])
        except MetadataError as e:
            if e.op_index == 0:
                raise self._moved(e, zkv) from e
            if e.op_index == 1:
                return e
            raise
        return res[1]

    async def fenced_each(self, ops: Sequence[Op], epoch_zk_version: int) -> list[Any]:
        """Apply independent ops behind the epoch check; one result per op: the op's result or
        the MetadataError it failed with. Raises ControllerMovedError if the check fails."""
        if not ops:
            return []
        results: list[Any] = []
        for chunk in self._chunks(ops):
            try:
                res = await self.fenced(chunk, epoch_zk_version)
                results.extend(res)
                continue
            except MetadataError as e:
                if e.op_index is None:
                    raise
            if len(chunk) == 1:
                results.append(await self._fenced_one(chunk[0], epoch_zk_version))
                continue
            each = await asyncio.gather(
                *(self._fenced_one(op, epoch_zk_version) for op in chunk), return_exceptions=True
            )
            for r in each:
                if isinstance(r, ControllerMovedError):
                    raise r
                if isinstance(r, BaseException) and not isinstance(r, MetadataError):
                    raise r
            results.extend(each)
        return results

    async def delete_recursive(self, path: str, epoch_zk_version: int) -> bool:
        """Delete ``path`` and its subtree behind the epoch check; False if it did not exist."""
        for _attempt in range(5):
            paths = await self._post_order(path)
            if not paths:
                return False
            try:
                await self.fenced([DeleteOp(p) for p in paths], epoch_zk_version)
                return True
            except (NoNodeError, NotEmptyError):
                continue  # the subtree changed while we listed it
        raise NotEmptyError(path, f"{path} kept changing while being deleted")

    async def _post_order(self, path: str) -> list[str]:
        try:
            kids = await self.tree.children(path)
        except NoNodeError:
            return []
        out: list[str] = []
        for k in sorted(kids):
            out.extend(await self._post_order(join_path(path, k)))
        out.append(path)
        return out

    # ------------------------------------------------------------------ controller election

    async def get_controller_id(self, watch: WatchCallback | None = None) -> int | None:
        """The elected controller's broker id (None if none); ``watch`` is left on /controller
        whether or not it exists (create, change and delete all fire it)."""
        stat = await self.tree.exists(zk.CONTROLLER_PATH, watch)
        if stat is None:
            return None
        got = await self.tree.get_or_none(zk.CONTROLLER_PATH)
        if got is None:
            return None
        try:
            return zk.parse_controller(got[0])
        except (ValueError, KeyError):
            log.warning("cannot parse %s: %r", zk.CONTROLLER_PATH, got[0])
            return None

    async def get_controller_epoch(self) -> tuple[int, int] | None:
        """(epoch, zk version) of /controller_epoch, or None if missing."""
        got = await self.tree.get_or_none(zk.CONTROLLER_EPOCH_PATH)
        if got is None:
            return None
        return zk.parse_controller_epoch(got[0]), got[1].version

    async def _maybe_create_controller_epoch(self) -> tuple[int, int]:
        try:
            await self.tree.create(zk.CONTROLLER_EPOCH_PATH, zk.controller_epoch_bytes(0))
            return 0, 0
        except NodeExistsError:
            got = await self.get_controller_epoch()
            if got is None:
                raise MetadataError(zk.CONTROLLER_EPOCH_PATH, "existed before but went away") from None
            return got

    async def register_controller_and_increment_controller_epoch(self, controller_id: int) -> tuple[int, int]:
        """Create the ephemeral /controller and bump /controller_epoch in one multi.

        Returns (new epoch, its zk version). Raises ControllerMovedError when another broker
        won (or the epoch moved meanwhile)."""
        current = await self.get_controller_epoch()
        cur_epoch, cur_version = current if current is not None else await self._maybe_create_controller_epoch()
        new_epoch = cur_epoch + 1
        try:
            res = await self.tree.multi([
                CreateOp(zk.CONTROLLER_PATH, zk.controller_json(controller_id, int(time.time() * 1000)),
                         ephemeral=True),
                SetOp(zk.CONTROLLER_EPOCH_PATH, zk.controller_epoch_bytes(new_epoch), cur_version),
            ])
            return new_epoch, res[1].version
        except (NodeExistsError, BadVersionError):
            pass
        # Kafka's checkControllerAndEpoch: maybe our own earlier attempt succeeded.
        if await self.get_controller_id() == controller_id:
            got = await self.get_controller_epoch()
            if got is not None and got[0] == new_epoch:
                return got
        raise ControllerMovedError("Controller moved to another broker. Aborting controller startup procedure")

    async def delete_controller(self, epoch_zk_version: int) -> None:
        """Give up /controller (fenced), so that a new election starts."""
        res = await self.fenced_each([DeleteOp(zk.CONTROLLER_PATH)], epoch_zk_version)
        if isinstance(res[0], MetadataError) and not isinstance(res[0], NoNodeError):
            raise res[0]

    async def get_controller_candidates(self) -> set[int]:
        """Logi-Kafka's preferred controller ids (children of /config/extension/candidates)."""
        try:
            names = await self.tree.children(zk.CONTROLLER_CANDIDATES_PATH)
        except NoNodeError:
            return set()
        out = set()
        for n in names:
            try:
                out.add(int(n))
            except ValueError:
                log.warning("ignoring controller candidate %r: not a broker id", n)
        return out

    # ------------------------------------------------------------------ brokers

    async def get_broker_ids(self, watch: WatchCallback | None = None) -> list[int]:
        """The registered broker ids (child watch optional)."""
        try:
            names = await self.tree.children(zk.BROKER_IDS_PATH, watch)
        except NoNodeError:
            if watch is not None:
                await self.tree.exists(zk.BROKER_IDS_PATH, watch)
            return []
        ids = []
        for n in names:
            try:
                ids.append(int(n))
            except ValueError:
                log.warning("ignoring %s/%s: not a broker id", zk.BROKER_IDS_PATH, n)
        return sorted(ids)

    async def get_broker(
        self, broker_id: int, watch: WatchCallback | None = None
    ) -> tuple[BrokerInfo, int] | None:
        """A broker's registration and epoch (czxid of its znode), or None."""
        try:
            data, stat = await self.tree.get(zk.broker_path(broker_id), watch)
        except NoNodeError:
            return None
        try:
            return zk.parse_broker(broker_id, data), stat.czxid
        except (ValueError, KeyError, TypeError) as e:
            log.error("cannot parse the registration of broker %d: %s", broker_id, e)
            return None

    async def get_all_broker_and_epochs(
        self, watch: WatchCallback | None = None, broker_watch: Callable[[int], WatchCallback] | None = None
    ) -> dict[int, tuple[BrokerInfo, int]]:
        """Every registered broker with its epoch. ``broker_watch(id)`` gives the data watch to
        leave on each registration (Kafka's BrokerModificationsHandler)."""
        ids = await self.get_broker_ids(watch)
        got = await asyncio.gather(
            *(self.get_broker(b, broker_watch(b) if broker_watch is not None else None) for b in ids)
        )
        return {b: g for b, g in zip(ids, got, strict=True) if g is not None}

    # ------------------------------------------------------------------ topics

    async def get_all_topics(self, watch: WatchCallback | None = None) -> set[str]:
        try:
            return set(await self.tree.children(zk.TOPICS_PATH, watch))
        except NoNodeError:
            if watch is not None:
                await self.tree.exists(zk.TOPICS_PATH, watch)
            return set()

    async def get_topic_assignment(self, topic: str, watch: WatchCallback | None = None) -> TopicAssignment | None:
        try:
            data, _stat = await self.tree.get(zk.topic_path(topic), watch)
        except NoNodeError:
            return None
        try:
            return zk.parse_topic(topic, data)
        except (ValueError, KeyError, TypeError) as e:
            log.error("cannot parse the assignment of topic %s: %s", topic, e)
            return None

    async def get_replica_assignment_and_topic_ids(
        self, topics: Iterable[str], topic_watch: Callable[[str], WatchCallback] | None = None
    ) -> dict[str, TopicAssignment]:
        names = sorted(topics)
        got = await asyncio.gather(
            *(self.get_topic_assignment(t, topic_watch(t) if topic_watch is not None else None) for t in names)
        )
        return {t: a for t, a in zip(names, got, strict=True) if a is not None}

    async def set_topic_assignment(
        self,
        topic: str,
        topic_id: str | None,
        assignment: Mapping[int, ReplicaAssignment],
        epoch_zk_version: int,
    ) -> None:
        """Rewrite /brokers/topics/<t> (fenced, any version), as KafkaZkClient.setTopicAssignment."""
        data = zk.topic_json(
            {p: list(a.replicas) for p, a in assignment.items()},
            topic_id,
            {p: list(a.adding_replicas) for p, a in assignment.items() if a.adding_replicas},
            {p: list(a.removing_replicas) for p, a in assignment.items() if a.removing_replicas},
        )
        await self.fenced([SetOp(zk.topic_path(topic), data, -1)], epoch_zk_version)

    async def get_topic_configs(self, topics: Iterable[str]) -> dict[str, dict[str, str] | Exception]:
        """Each topic's config overrides (/config/topics/<t>), or the error reading them."""

        async def one(t: str) -> dict[str, str] | Exception:
            try:
                got = await self.tree.get_or_none(zk.topic_config_path(t))
                return {} if got is None else zk.parse_entity_config(got[0])
            except (ValueError, KeyError, TypeError, MetadataError) as e:
                return e

        names = sorted(set(topics))
        got = await asyncio.gather(*(one(t) for t in names))
        return dict(zip(names, got, strict=True))

    # ------------------------------------------------------------------ partition states

    async def get_topic_partition_states(
        self, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, LeaderAndIsr | None]:
        """Each partition's state node (None when missing or empty)."""

        def parse(tp: TopicPartition, got: tuple[bytes | None, Stat] | None) -> LeaderAndIsr | None:
            if got is None or not got[0]:
                return None
            try:
                return zk.parse_partition_state(got[0], got[1].version)
            except (ValueError, KeyError, TypeError) as e:
                log.error("cannot parse the state of partition %s: %s", tp, e)
                return None

        tps = list(partitions)
        got = await self.tree.get_many([zk.partition_state_path(tp.topic, tp.partition) for tp in tps])
        return {tp: parse(tp, g) for tp, g in zip(tps, got, strict=True)}

    async def create_topic_partition_states(
        self, states: Mapping[TopicPartition, LeaderAndIsr], epoch_zk_version: int
    ) -> dict[TopicPartition, MetadataError | None]:
        """Create the partitions' state nodes (and their parents); None means created."""
        if not states:
            return {}
        topics = sorted({tp.topic for tp in states})
        parents = [CreateOp(zk.partitions_path(t), None) for t in topics]
        parents += [CreateOp(zk.partition_path(tp.topic, tp.partition), None) for tp in sorted(states)]
        # Parents may exist already (Kafka ignores NODEEXISTS for them).
        await self.fenced_each(parents, epoch_zk_version)
        tps = sorted(states)
        res = await self.fenced_each(
            [CreateOp(zk.partition_state_path(tp.topic, tp.partition), zk.partition_state_json(states[tp]))
             for tp in tps],
            epoch_zk_version,
        )
        return {tp: (r if isinstance(r, MetadataError) else None) for tp, r in zip(tps, res, strict=True)}

    async def update_leader_and_isr(
        self, leader_and_isrs: Mapping[TopicPartition, LeaderAndIsr], controller_epoch: int, epoch_zk_version: int
    ) -> tuple[dict[TopicPartition, LeaderAndIsr | Exception], list[TopicPartition]]:
        """Conditionally write new partition states (each on its node's version).

        Returns (finished, to retry): finished maps a partition to its written state (with the new
        zk version and ``controller_epoch``) or the error; a version conflict goes to retry."""
        tps = sorted(leader_and_isrs)
        ops: list[Op] = []
        for tp in tps:
            st = leader_and_isrs[tp]
            data = zk.partition_state_json(
                LeaderAndIsr(st.leader, st.leader_epoch, list(st.isr), controller_epoch, st.leader_recovery_state)
            )
            ops.append(SetOp(zk.partition_state_path(tp.topic, tp.partition), data, st.zk_version))
        try:
            res = await self.fenced_each(ops, epoch_zk_version)
        except ControllerMovedError:
            raise
        except MetadataError as e:
            return {tp: e for tp in tps}, []
        finished: dict[TopicPartition, LeaderAndIsr | Exception] = {}
        retry: list[TopicPartition] = []
        for tp, r in zip(tps, res, strict=True):
            if isinstance(r, BadVersionError):
                retry.append(tp)
            elif isinstance(r, MetadataError):
                finished[tp] = r
            else:
                st = leader_and_isrs[tp]
                finished[tp] = LeaderAndIsr(
                    st.leader, st.leader_epoch, list(st.isr), controller_epoch, st.leader_recovery_state, r.version
                )
        return finished, retry

    # ------------------------------------------------------------------ topic deletion

    async def get_topic_deletions(self, watch: WatchCallback | None = None) -> set[str]:
        try:
            return set(await self.tree.children(zk.DELETE_TOPICS_PATH, watch))
        except NoNodeError:
            if watch is not None:
                await self.tree.exists(zk.DELETE_TOPICS_PATH, watch)
            return set()

    async def delete_topic_deletions(self, topics: Iterable[str], epoch_zk_version: int) -> None:
        await self.fenced_each([DeleteOp(zk.delete_topic_path(t)) for t in sorted(topics)], epoch_zk_version)

    async def delete_topic_znode(self, topic: str, epoch_zk_version: int) -> None:
        await self.delete_recursive(zk.topic_path(topic), epoch_zk_version)

    async def delete_topic_configs(self, topics: Iterable[str], epoch_zk_version: int) -> None:
        await self.fenced_each([DeleteOp(zk.topic_config_path(t)) for t in sorted(topics)], epoch_zk_version)

    # ------------------------------------------------------------------ sequential notifications

    async def _notification_children(self, path: str, watch: WatchCallback | None) -> list[str]:
        try:
            return sorted(await self.tree.children(path, watch))
        except NoNodeError:
            if watch is not None:
                await self.tree.exists(path, watch)
            return []

    async def get_all_isr_change_notifications(self, watch: WatchCallback | None = None) -> list[str]:
        """Names of the ISR change notification nodes, oldest first."""
        return await self._notification_children(zk.ISR_CHANGE_NOTIFICATION_PATH, watch)

    async def get_partitions_from_isr_change_notifications(self, names: Iterable[str]) -> set[TopicPartition]:
        out: set[TopicPartition] = set()
        for name in names:
            got = await self.tree.get_or_none(join_path(zk.ISR_CHANGE_NOTIFICATION_PATH, name))
            if got is None:
                continue
            try:
                out.update(TopicPartition(t, p) for t, p in zk.parse_partition_list(got[0]))
            except (ValueError, KeyError, TypeError) as e:
                log.error("cannot parse ISR change notification %s: %s", name, e)
        return out

    async def delete_isr_change_notifications(self, names: Iterable[str], epoch_zk_version: int) -> None:
        await self.fenced_each(
            [DeleteOp(join_path(zk.ISR_CHANGE_NOTIFICATION_PATH, n)) for n in names], epoch_zk_version
        )

    async def get_all_log_dir_event_notifications(self, watch: WatchCallback | None = None) -> list[str]:
        return await self._notification_children(zk.LOG_DIR_EVENT_NOTIFICATION_PATH, watch)

    async def get_broker_ids_from_log_dir_events(self, names: Iterable[str]) -> list[int]:
        out: list[int] = []
        for name in names:
            got = await self.tree.get_or_none(join_path(zk.LOG_DIR_EVENT_NOTIFICATION_PATH, name))
            if got is None:
                continue
            try:
                out.append(zk.parse_log_dir_event(got[0]))
            except (ValueError, KeyError, TypeError) as e:
                log.error("cannot parse log dir event notification %s: %s", name, e)
        return out

    async def delete_log_dir_event_notifications(self, names: Iterable[str], epoch_zk_version: int) -> None:
        await self.fenced_each(
            [DeleteOp(join_path(zk.LOG_DIR_EVENT_NOTIFICATION_PATH, n)) for n in names], epoch_zk_version
        )

    # ------------------------------------------------------------------ preferred replica election

    async def preferred_replica_election_exists(self, watch: WatchCallback | None = None) -> bool:
        return await self.tree.exists(zk.PREFERRED_REPLICA_ELECTION_PATH, watch) is not None

    async def get_preferred_replica_election(self) -> set[TopicPartition]:
        got = await self.tree.get_or_none(zk.PREFERRED_REPLICA_ELECTION_PATH)
        if got is None:
            return set()
        try:
            return {TopicPartition(t, p) for t, p in zk.parse_partition_list(got[0])}
        except (ValueError, KeyError, TypeError) as e:
            log.error("cannot parse %s: %s", zk.PREFERRED_REPLICA_ELECTION_PATH, e)
            return set()

    async def delete_preferred_replica_election(self, epoch_zk_version: int) -> None:
        await self.fenced_each([DeleteOp(zk.PREFERRED_REPLICA_ELECTION_PATH)], epoch_zk_version)

    # ------------------------------------------------------------------ partition reassignment

    async def reassign_partitions_exists(self, watch: WatchCallback | None = None) -> bool:
        """Whether /admin/reassign_partitions exists (leaving ``watch`` on it either way)."""
        return await self.tree.exists(zk.REASSIGN_PARTITIONS_PATH, watch) is not None

    async def get_partition_reassignment(self) -> dict[TopicPartition, list[int]]:
        """The target replicas in /admin/reassign_partitions (empty when missing).

        Raises ValueError (or KeyError/TypeError) when the node cannot be parsed."""
        got = await self.tree.get_or_none(zk.REASSIGN_PARTITIONS_PATH)
        if got is None:
            return {}
        return {TopicPartition(t, p): r for (t, p), r in zk.parse_reassign_partitions(got[0]).items()}

    async def set_or_create_partition_reassignment(
        self, reassignments: Mapping[TopicPartition, Sequence[int]], epoch_zk_version: int
    ) -> None:
        data = zk.reassign_partitions_json({(tp.topic, tp.partition): list(r) for tp, r in reassignments.items()})
        res = await self.fenced_each([SetOp(zk.REASSIGN_PARTITIONS_PATH, data, -1)], epoch_zk_version)
        if isinstance(res[0], NoNodeError):
            res = await self.fenced_each([CreateOp(zk.REASSIGN_PARTITIONS_PATH, data)], epoch_zk_version)
        if isinstance(res[0], MetadataError):
            raise res[0]

    async def delete_partition_reassignment(self, epoch_zk_version: int) -> None:
        await self.fenced_each([DeleteOp(zk.REASSIGN_PARTITIONS_PATH)], epoch_zk_version)

    async def watch_partition_state(self, tp: TopicPartition, watch: WatchCallback) -> bool:
        """Leave a data watch on a partition's state znode; whether it exists."""
        return await self.tree.exists(zk.partition_state_path(tp.topic, tp.partition), watch) is not None
