"""Topic deletion (Kafka's TopicDeletionManager).

A topic marked in /admin/delete_topics is queued. Deletion of a queued topic starts when it is
eligible: its partitions go Offline then NonExistent, brokers get UpdateMetadata (leader -2),
every replica gets StopReplica(delete=false) then StopReplica(delete=true) and moves to
ReplicaDeletionStarted. Each successful StopReplica response moves its replica to
ReplicaDeletionSuccessful; when all are there the topic's znodes go and the controller forgets
it. A replica on a dead broker, or one that failed to delete, is ReplicaDeletionIneligible and
makes the topic ineligible until something (a broker coming back) resumes the deletion, which
retries those replicas.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Protocol

from kaflet.controller.context import (
    ControllerContext,
    PartitionAndReplica,
    PartitionState,
    ReplicaState,
    TopicPartition,
)
from kaflet.controller.state_machines import PartitionStateMachine, ReplicaStateMachine

__all__ = ["DeletionClient", "TopicDeletionManager"]

log = logging.getLogger(__name__)


class DeletionClient(Protocol):
    """What deletion needs of the controller."""

    async def delete_topic(self, topic: str) -> None:
        """Remove /brokers/topics/<t>, /config/topics/<t> and /admin/delete_topics/<t> (fenced)."""

    async def delete_topic_deletions(self, topics: Iterable[str]) -> None:
        """Remove /admin/delete_topics/<t> markers (fenced)."""

    def mute_partition_modifications(self, topic: str) -> None:
        """Stop reacting to the topic's assignment node."""

    def send_metadata_update(self, partitions: set[TopicPartition]) -> None:
        """UpdateMetadata for ``partitions`` to every live broker."""


class TopicDeletionManager:
    """Drives queued topic deletions through the replica and partition state machines."""

    def __init__(
        self,
        delete_topic_enable: bool,
        context: ControllerContext,
        replica_state_machine: ReplicaStateMachine,
        partition_state_machine: PartitionStateMachine,
        client: DeletionClient,
    ) -> None:
        self.is_delete_topic_enabled = delete_topic_enable
        self.ctx = context
        self.replica_sm = replica_state_machine
        self.partition_sm = partition_state_machine
        self.client = client

    async def init(self, topics_to_be_deleted: set[str], topics_ineligible: set[str]) -> None:
        if self.is_delete_topic_enabled:
            self.ctx.queue_topic_deletion(topics_to_be_deleted)
            self.ctx.topics_ineligible_for_deletion.update(topics_ineligible & self.ctx.topics_to_be_deleted)
        else:
            log.info("Removing %s since delete topic is disabled", sorted(topics_to_be_deleted))
            await self.client.delete_topic_deletions(topics_to_be_deleted)

    async def try_topic_deletion(self) -> None:
        if self.is_delete_topic_enabled:
            await self._resume_deletions()

    async def enqueue_topics_for_deletion(self, topics: set[str]) -> None:
        if self.is_delete_topic_enabled:
            self.ctx.queue_topic_deletion(topics)
            await self._resume_deletions()

    async def resume_deletion_for_topics(self, topics: set[str]) -> None:
        """Make ``topics`` eligible again (e.g. a broker holding their replicas came back)."""
        if self.is_delete_topic_enabled:
            resume = topics & self.ctx.topics_to_be_deleted
            if resume:
                self.ctx.topics_ineligible_for_deletion -= resume
                await self._resume_deletions()

    async def fail_replica_deletion(self, replicas: set[PartitionAndReplica]) -> None:
        if self.is_delete_topic_enabled:
            failed = {r for r in replicas if self.is_topic_queued_up_for_deletion(r.topic)}
            if failed:
                topics = {r.topic for r in failed}
                log.debug("Deletion failed for replicas %s. Halting deletion for topics %s",
                          ",".join(map(str, sorted(failed))), sorted(topics))
                await self.replica_sm.handle_state_changes(sorted(failed), ReplicaState.DELETION_INELIGIBLE)
                self.mark_topic_ineligible_for_deletion(topics, "replica deletion failure")
                await self._resume_deletions()

    def mark_topic_ineligible_for_deletion(self, topics: set[str], reason: str) -> None:
        if self.is_delete_topic_enabled:
            halted = self.ctx.topics_to_be_deleted & topics
            self.ctx.topics_ineligible_for_deletion |= halted
            if halted:
                log.info("Halted deletion of topics %s due to %s", ",".join(sorted(halted)), reason)

    def is_topic_queued_up_for_deletion(self, topic: str) -> bool:
        return self.is_delete_topic_enabled and self.ctx.is_topic_queued_up_for_deletion(topic)

    async def complete_replica_deletion(self, replicas: set[PartitionAndReplica]) -> None:
        done = {r for r in replicas if self.is_topic_queued_up_for_deletion(r.topic)}
        log.debug("Deletion successfully completed for replicas %s", ",".join(map(str, sorted(done))))
        await self.replica_sm.handle_state_changes(sorted(done), ReplicaState.DELETION_SUCCESSFUL)
        await self._resume_deletions()

    # ------------------------------------------------------------------ internals

    def _is_topic_ineligible_for_deletion(self, topic: str) -> bool:
        return not self.is_delete_topic_enabled or topic in self.ctx.topics_ineligible_for_deletion

    def _is_topic_deletion_in_progress(self, topic: str) -> bool:
        return self.is_delete_topic_enabled and self.ctx.is_any_replica_in_state(topic, ReplicaState.DELETION_STARTED)

    def _is_topic_eligible_for_deletion(self, topic: str) -> bool:
        return (
            self.ctx.is_topic_queued_up_for_deletion(topic)
            and not self._is_topic_deletion_in_progress(topic)
            and not self._is_topic_ineligible_for_deletion(topic)
        )

    async def _retry_deletion_for_ineligible_replicas(self, topics: set[str]) -> None:
        failed = {r for t in topics for r in self.ctx.replicas_in_state(t, ReplicaState.DELETION_INELIGIBLE)}
        log.debug("Retrying deletion of topics %s since replicas %s were not successfully deleted",
                  sorted(topics), ",".join(map(str, sorted(failed))))
        await self.replica_sm.handle_state_changes(sorted(failed), ReplicaState.OFFLINE)

    async def _complete_delete_topic(self, topic: str) -> None:
        # Stop watching the assignment first, so a re-creation is seen as a new topic.
        self.client.mute_partition_modifications(topic)
        deleted = self.ctx.replicas_in_state(topic, ReplicaState.DELETION_SUCCESSFUL)
        await self.replica_sm.handle_state_changes(sorted(deleted), ReplicaState.NON_EXISTENT)
        await self.client.delete_topic(topic)
        self.ctx.remove_topic(topic)

    async def _on_topic_deletion(self, topics: set[str]) -> None:
        unseen = topics - self.ctx.topics_with_deletion_started
        if unseen:
            partitions = sorted(tp for t in unseen for tp in self.ctx.partitions_for_topic(t))
            await self.partition_sm.handle_state_changes(partitions, PartitionState.OFFLINE)
            await self.partition_sm.handle_state_changes(partitions, PartitionState.NON_EXISTENT)
            self.ctx.begin_topic_deletion(unseen)
        # Brokers stop serving the topics (UpdateMetadata with leader -2).
        self.client.send_metadata_update({tp for t in topics for tp in self.ctx.partitions_for_topic(t)})
        await self._on_partition_deletion(topics)

    async def _on_partition_deletion(self, topics: set[str]) -> None:
        dead: list[PartitionAndReplica] = []
        retry: list[PartitionAndReplica] = []
        ineligible: set[str] = set()
        for topic in sorted(topics):
            replicas = self.ctx.replicas_for_topic(topic)
            alive = {r for r in replicas if self.ctx.is_replica_online(r.replica, r.topic_partition)}
            dead_here = replicas - alive
            succeeded = self.ctx.replicas_in_state(topic, ReplicaState.DELETION_SUCCESSFUL)
            dead.extend(sorted(dead_here))
            retry.extend(sorted(alive - succeeded))
            if dead_here:
                log.debug("Dead Replicas (%s) found for topic %s", ",".join(map(str, sorted(dead_here))), topic)
                ineligible.add(topic)
        await self.replica_sm.handle_state_changes(dead, ReplicaState.DELETION_INELIGIBLE)
        # StopReplica (no delete) first, so followers stop fetching, then with delete.
        await self.replica_sm.handle_state_changes(retry, ReplicaState.OFFLINE)
        await self.replica_sm.handle_state_changes(retry, ReplicaState.DELETION_STARTED)
        if ineligible:
            self.mark_topic_ineligible_for_deletion(ineligible, "offline replicas")

    async def _resume_deletions(self) -> None:
        queued = set(self.ctx.topics_to_be_deleted)
        eligible_for_retry: set[str] = set()
        eligible: set[str] = set()
        if queued:
            log.info("Handling deletion for topics %s", ",".join(sorted(queued)))
        for topic in sorted(queued):
            if self.ctx.are_all_replicas_in_state(topic, ReplicaState.DELETION_SUCCESSFUL):
                await self._complete_delete_topic(topic)
                log.info("Deletion of topic %s successfully completed", topic)
            elif not self.ctx.is_any_replica_in_state(topic, ReplicaState.DELETION_STARTED) and \
                    self.ctx.is_any_replica_in_state(topic, ReplicaState.DELETION_INELIGIBLE):
                eligible_for_retry.add(topic)
            if self._is_topic_eligible_for_deletion(topic):
                log.info("Deletion of topic %s (re)started", topic)
                eligible.add(topic)
        if eligible_for_retry:
            await self._retry_deletion_for_ineligible_replicas(eligible_for_retry)
        if eligible:
            await self._on_topic_deletion(eligible)
