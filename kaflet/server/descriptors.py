"""The broker's descriptor budget: how many segment files it keeps open and how many partitions
it hosts, from its open file limit (RLIMIT_NOFILE, raised to the hard limit by ``server/main.py``).

A partition holds no descriptor of its own: indexes are in memory (``log/index_file.py``) and
segment files are opened through a bounded cache (``log/segment_files.py``). The budget is what
the limit leaves after the descriptors open at start-up and a reserve for connections, the
listener and short-lived files (fsyncs, checkpoints, new logs); the cache may use all of it.
The partition limit is twice the budget: at least half of the partitions' files then stay open,
so a consumer of every partition reopens at most half of them per fetch round, and the broker
refuses partitions beyond that (CreateTopics and CreatePartitions with POLICY_VIOLATION, a new
replica in LeaderAndIsr with KAFKA_STORAGE_ERROR) rather than run out of descriptors.
``log.segment.open.files.max`` and ``max.broker.partitions`` (KIP-578's name) set either.
"""

from __future__ import annotations

import os
import resource
from dataclasses import dataclass

#: Descriptors kept for connections and short-lived files: a tenth of the limit, within these
#: bounds. The floor covers the short-lived ones of a busy moment (a file or two on each of the
#: threads that fsync, write a log's small files and checkpoints, and create logs) with room
#: for about a hundred connections.
MIN_RESERVE = 128
MAX_RESERVE = 1024
#: Partitions per descriptor of the budget (see the module's docstring).
PARTITIONS_PER_DESCRIPTOR = 2


@dataclass(frozen=True, slots=True)
class DescriptorBudget:
    """What the open file limit allows; None: no limit."""

    limit: int | None
    in_use: int
    reserve: int
    segment_files: int | None
    max_partitions: int | None
    partitions_configured: bool

    @property
    def reason(self) -> str:
        """How the partition limit was set, for refusals and the start-up line."""
        if self.partitions_configured or self.limit is None:
            return "max.broker.partitions"
        return (f"max.broker.partitions, from the open file limit {self.limit}: {PARTITIONS_PER_DESCRIPTOR} x "
                f"({self.limit} - {self.in_use} open at start-up - {self.reserve} kept for connections)")

    def describe(self) -> str:
        """The start-up line."""
        files = "unbounded" if self.segment_files is None else str(self.segment_files)
        parts = "unlimited" if self.max_partitions is None else str(self.max_partitions)
        limit = "unlimited" if self.limit is None else str(self.limit)
        return (f"open file limit {limit} ({self.in_use} open, {self.reserve} kept for connections): "
                f"at most {files} segment files open, at most {parts} partitions ({self.reason})")


def open_descriptors() -> int:
    """Descriptors this process holds now."""
    try:
        return len(os.listdir("/proc/self/fd")) - 1  # less the one listing the directory
    except OSError:
        return 0


def plan(limit: int | None, in_use: int, segment_files: int, max_partitions: int) -> DescriptorBudget:
    """The budget for a soft ``limit`` (None: unlimited) with ``in_use`` descriptors open; the
    two settings override the derived values when not -1."""
    if limit is None:
        return DescriptorBudget(None, in_use, 0, segment_files if segment_files > 0 else None,
                                max_partitions if max_partitions >= 0 else None, max_partitions >= 0)
    reserve = min(MAX_RESERVE, max(MIN_RESERVE, limit // 10))
    budget = max(1, limit - in_use - reserve)
    return DescriptorBudget(
        limit, in_use, reserve,
        segment_files if segment_files > 0 else budget,
        max_partitions if max_partitions >= 0 else PARTITIONS_PER_DESCRIPTOR * budget,
        max_partitions >= 0)


def soft_limit() -> int | None:
    """This process's soft RLIMIT_NOFILE (None: unlimited)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return None if soft == resource.RLIM_INFINITY else soft
