"""The read path of the partitions led here: ``ReplicaManager.fetch_messages``, Kafka's
ReplicaManager.fetchMessages for consumers and followers alike.

The Fetch handler decodes, works out the request's partitions with its fetch session, authorizes
and drops the partitions the metadata cache does not know (as KafkaApis does), then makes this
one call. It reads each partition (``_read``, Kafka's readFromLocalLog), records a follower's
position once from that first read (``follower_fetch.record_follower_fetch``, Kafka's
updateFollowerFetchState), and while fewer than ``min_bytes`` were read and nothing failed,
waits up to ``max_wait_ms`` for appends (``delayed_fetch.wait_for_data``, Kafka's DelayedFetch),
reading again only the partitions that woke it. What stays in the handler is the wire's: the
session, down-conversion for Fetch v0-3, the error codes old versions know, KIP-951's leaders.

A consumer reads up to the high watermark (a read_committed one up to the last stable offset,
with the aborted transactions of what it reads), a follower up to the log end offset. Leader-side
replication throttling (KIP-73) leaves a throttled partition's records out of a lagging
follower's answer while the leader quota is exceeded, and counts the bytes of throttled
partitions sent to any follower. While a log dir's disk is overloaded, a consumer's read of data
not in the page cache may be refused by the disk load protector (kaflet/log/disk_load.py): the
partition answers without records, the fetch answers at once, and the result carries the
protector's throttle time.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from kaflet.log.disk_load import ColdReads, DiskLoadProtector
from kaflet.protocol.errors import ErrorCode, KafkaError
from kaflet.protocol.fetch import PartitionFetchData, records_size
from kaflet.replication.delayed_fetch import wait_for_data
from kaflet.replication.follower_fetch import fetch_upper_bound, record_follower_fetch, should_leader_throttle
from kaflet.replication.partition import Partition
from kaflet.replication.quota import ReplicaQuota

#: FetchRequest's isolation_level for read_committed (0 is read_uncommitted).
READ_COMMITTED = 1
_NOT_LEADER = ErrorCode.NOT_LEADER_OR_FOLLOWER


@dataclass(frozen=True, slots=True)
class FetchParams:
    """What a fetch asks as a whole (Kafka's FetchParams); the handler has already capped
    ``max_bytes`` by fetch.max.bytes and ``min_bytes`` by ``max_bytes``."""

    #: A broker's id for a follower's fetch; consumers send -1, debugging tools -2.
    replica_id: int
    max_wait_ms: int
    min_bytes: int
    max_bytes: int
    isolation_level: int = 0
    #: Fetch v0-2 (Kafka's hardMaxBytesLimit): a partition whose first batch does not fit its
    #: limit is sent the piece that fits, which tells such a client its limit is too small;
    #: from v3 (KIP-74) that partition is answered without records instead.
    hard_max_bytes_limit: bool = False

    @property
    def is_follower(self) -> bool:
        return self.replica_id >= 0


class PartitionFetchInfo(Protocol):
    """What is asked of one partition (Kafka's FetchRequest.PartitionData), by its real number.

    A Protocol so the fetch session's own entries (server/fetch_session.py ``CachedPartition``)
    are handed over as they are: a fetch of 1,000 partitions allocates nothing more per
    partition, which the garbage collector would notice. ``topic`` is None for a topic id the
    broker cannot name (the handler answers those itself); such a partition is not hosted here.
    """

    @property
    def topic(self) -> str | None: ...

    @property
    def partition(self) -> int: ...

    @property
    def fetch_offset(self) -> int: ...

    #: The follower's log start offset (-1 from consumers).
    @property
    def fetcher_log_start_offset(self) -> int: ...

    @property
    def max_bytes(self) -> int: ...

    #: The leader epoch the fetcher believes current (-1: no check).
    @property
    def leader_epoch(self) -> int: ...


@dataclass(slots=True)
class FetchResult:
    """The answer of each partition asked for, in the order asked, and the throttle time the
    disk load protector asks of the response (0: none)."""

    partitions: list[PartitionFetchData]
    throttle_ms: int = 0


#: A partition being read: what was asked, the hosted partition (None: not hosted here), its answer.
_Target = tuple[PartitionFetchInfo, Partition | None, PartitionFetchData]


async def fetch_messages(hosted: Mapping[tuple[str, int], Partition], partition_known: Callable[[str, int], bool],
                         stopping: Callable[[], bool], params: FetchParams, infos: Sequence[PartitionFetchInfo],
                         quota: ReplicaQuota | None = None, disk_load: DiskLoadProtector | None = None,
                         ) -> FetchResult:
    """Read the partitions, then wait for data as the params ask (see the module docstring);
    ``stopping`` says the broker is stopping, which answers at once."""
    is_follower = params.is_follower
    replica_id = params.replica_id
    max_bytes = params.max_bytes
    read_committed = params.isolation_level == READ_COMMITTED and not is_follower
    cold = disk_load.cold_reads() if disk_load is not None and not is_follower else None
    if not is_follower:
        quota = None
    deadline = time.monotonic() + max(params.max_wait_ms, 0) / 1000
    # One answer object per partition for the whole fetch; a pass over the logs refills it.
    local: list[_Target] = [(info, None if (topic := info.topic) is None else hosted.get((topic, info.partition)),
                             PartitionFetchData(info.partition)) for info in infos]
    hard = params.hard_max_bytes_limit
    total, failed = _read(local, max_bytes, 0, partition_known, replica_id, read_committed, cold, quota, hard)
    if is_follower:
        # A follower's position is recorded once, from the first read (Kafka's fetchMessages).
        total, refused = _record_follower_fetch(local, replica_id, total)
        failed = failed or refused
    min_bytes = params.min_bytes
    waiting: dict[Partition, int] | None = None
    # A refused cold read answers at once: the throttle time is the client's wait.
    while not (total >= min_bytes or failed or not local or stopping() or (cold is not None and cold.refused)):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        if waiting is None:
            # Each partition of the broker appears once (requests name a partition once).
            waiting = {part: i for i, (_, part, _) in enumerate(local) if part is not None}
        woken = await wait_for_data(waiting, remaining, is_follower)
        if not woken:
            break  # timed out: nothing was appended, the answers stand
        # Only the partitions appended to (or removed) since the last pass can answer differently.
        again = []
        for part in woken:
            i = waiting.get(part)
            if i is not None:
                info, _, data = local[i]
                topic = info.topic
                local[i] = (info, None if topic is None else hosted.get((topic, info.partition)), data)
                again.append(local[i])
        total, failed = _read(again, max_bytes, total, partition_known, replica_id, read_committed, cold, quota,
                              hard)
    if quota is not None:
        _record_throttled(quota, local)
    return FetchResult([data for _, _, data in local], cold.throttle_ms if cold is not None else 0)


def _read(targets: list[_Target], max_bytes: int, total: int, partition_known: Callable[[str, int], bool],
          replica_id: int, read_committed: bool = False, cold: ColdReads | None = None,
          quota: ReplicaQuota | None = None, hard_max_bytes_limit: bool = False) -> tuple[int, bool]:
    """Read partitions into their answers (Kafka's readFromLog); ``total`` bytes are already read.

    Returns the bytes read in all and whether a partition failed. Up to ``max_bytes`` in all,
    each partition up to its own limit; the first partition with data may exceed both by its
    first batch, so a large batch is never stuck; another partition whose first batch does not
    fit gets no records (Fetch v3+, see ``FetchParams.hard_max_bytes_limit``). A consumer reads
    up to the high watermark, a
    follower up to the log end offset (``fetch_upper_bound``), a read_committed consumer up to the
    last stable offset, with the aborted transactions of what it reads (the .txnindex entries);
    a partition whose fetch offset is there has nothing to read and costs no log lookup.
    With ``cold``, a read of data not in the page cache that the disk load protector refuses
    leaves the partition without records, and so does the leader replication ``quota`` for a
    throttled partition of a lagging follower while it is exceeded.
    """
    failed = False
    for info, part, data in targets:
        if data.records:
            total -= records_size(data.records)
            data.records = data.aborted_transactions = None
        if part is None or not part.is_leader:
            # Gone from this broker since the request arrived: deleted, or no longer led here.
            topic = info.topic
            known = topic is not None and partition_known(topic, info.partition)
            data.error_code = _NOT_LEADER if known else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            failed = True
            continue
        log = part.log
        hw = log.high_watermark
        start = log.log_start_offset
        data.high_watermark = hw
        data.last_stable_offset = lso = log.last_stable_offset
        data.log_start_offset = start
        epoch = info.leader_epoch
        if epoch >= 0 and epoch != part.leader_epoch:
            data.error_code = part.check_leader_epoch(epoch)
            failed = True
            continue
        offset = info.fetch_offset
        bound = lso if read_committed else fetch_upper_bound(part, replica_id)
        if offset == bound and offset >= start:
            continue
        budget = min(info.max_bytes, max_bytes - total)
        if budget <= 0 and total:
            continue
        if quota is not None and should_leader_throttle(quota, part, replica_id):
            continue
        before = None
        try:
            if cold is not None and offset < bound:
                # The cache as it was before the read: its header scan and read-ahead fill it.
                ahead = log.peek(offset, max(budget, 0))
                if ahead is not None:
                    before = cold.before_read(log.dir, ahead.fileno(), ahead.position, ahead.size)
            regions = log.read(offset, max(budget, 0), bound, total == 0, hard_max_bytes_limit).regions
        except KafkaError as exc:
            # The handler tells Fetch v0-5 clients, who do not know KAFKA_STORAGE_ERROR, otherwise.
            data.error_code = exc.code
            failed = True
            continue
        except OSError:
            data.error_code = ErrorCode.KAFKA_STORAGE_ERROR
            failed = True
            continue
        if regions and cold is not None and not all(
                cold.admit(log.dir, r.fileno(), r.position, r.size, before) for r in regions):
            continue
        if regions:
            data.records = list(regions)
            for r in regions:
                total += r.size
            if read_committed:
                data.aborted_transactions = [(a.producer_id, a.first_offset)
                                             for a in log.aborted_txns_for_read(offset, bound)] or None
    return total, failed


def _record_throttled(quota: ReplicaQuota, targets: list[_Target]) -> None:
    """Count the bytes of throttled partitions sent to a follower (in sync or not), as Kafka's
    sizeOfThrottledPartitions does for every follower fetch."""
    nbytes = sum(records_size(data.records) for _, part, data in targets
                 if data.records and part is not None and quota.is_throttled(part.topic, part.index))
    quota.record(nbytes)


def _record_follower_fetch(targets: list[_Target], replica_id: int, total: int) -> tuple[int, bool]:
    """Record the follower's position in each partition read; returns the bytes still read and
    whether a partition refused it (a replica id that is not one of its followers)."""
    refused = False
    for info, part, data in targets:
        if data.error_code or part is None:
            continue
        error = record_follower_fetch(part, replica_id, info.fetch_offset, info.fetcher_log_start_offset)
        if error:
            if data.records:
                total -= records_size(data.records)
            data.error_code, data.records = error, None
            refused = True
    return total, refused
