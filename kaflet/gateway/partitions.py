"""Disabled partitions: hidden from clients, the others renumbered 0..n-1 for them.

Logi-Kafka's legacy feature (its PartitionRouter): the management service lists partitions of a
topic that clients must not see. Metadata leaves them out and numbers the remaining ones from 0
in order (a topic of 4 with 1 and 2 disabled shows 0 -> 0 and 1 -> 3); requests naming a client
partition are mapped back to the real one before they touch a log or the group coordinator, and
their answers carry the client's number again. The seed maps Metadata and Produce; kaflet maps
Fetch, ListOffsets, OffsetForLeaderEpoch, OffsetCommit, OffsetFetch and the transactional APIs as
well, so consumers see the same numbering as producers and committed offsets stay with the real
partition if the disabled set changes. This module holds the numbering; the dispatcher applies
it to requests and responses in one step (kaflet/server/renumbering.py).

A client number with no partition behind it maps to a negative index that no partition has, so
the request gets UNKNOWN_TOPIC_OR_PARTITION and its answer still carries the client's number.
Numbers past the end go to -1, -2, ...; negative ones below -2**31, out of the int32 range of
the wire, so that neither can land on a real partition (a negative number once mapped to
``-1 - client`` and reached a hidden partition) and both come back unchanged.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from kaflet.gateway.model import PartitionView

log = logging.getLogger("kaflet.gateway.partitions")

#: Where negative client numbers go: below every int32, so apart from the numbers past the end.
_NEGATIVE_SHIFT = 1 << 31


class PartitionTable:
    """One topic's numbering for clients, given its partition count and disabled partitions."""

    __slots__ = ("count", "disabled", "real_of", "client_of")

    def __init__(self, count: int, disabled: frozenset[int]) -> None:
        self.count = count
        self.disabled = disabled
        #: client number -> real partition
        self.real_of = [p for p in range(count) if p not in disabled]
        #: real partition -> client number (disabled ones absent)
        self.client_of = {real: i for i, real in enumerate(self.real_of)}

    def to_real(self, client: int) -> int:
        """The real partition of a client number; negative (no such partition) when there is none."""
        if 0 <= client < len(self.real_of):
            return self.real_of[client]
        if client < 0:
            return client - _NEGATIVE_SHIFT
        return -1 - client

    def to_client(self, real: int) -> int | None:
        """The client number of a real partition (or back from `to_real`'s negative); None if disabled."""
        if real < -_NEGATIVE_SHIFT:
            return real + _NEGATIVE_SHIFT
        if real < 0:
            return -1 - real
        return self.client_of.get(real)


class PartitionRouter:
    """Client numbering of every topic, from a PartitionView and the topics' partition counts."""

    def __init__(self, view: PartitionView, partition_count: Callable[[str], int]) -> None:
        self.view = view
        self.partition_count = partition_count
        self._tables: dict[str, PartitionTable] = {}

    def table(self, topic: str) -> PartitionTable | None:
        """The topic's table, or None when none of its partitions is disabled (most topics)."""
        disabled = self.view.disabled(topic)
        if not disabled:
            return None
        count = self.partition_count(topic)
        table = self._tables.get(topic)
        if table is None or table.count != count or table.disabled != disabled:
            table = self._tables[topic] = PartitionTable(count, disabled)
            if not table.real_of and count:
                log.error("every partition of topic %s is disabled: clients see none", topic)
            else:
                log.info("topic %s: partitions %s disabled, clients see %d of %d", topic,
                         ",".join(map(str, sorted(disabled))), len(table.real_of), count)
        return table
