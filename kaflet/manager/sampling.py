"""Background sampling of a cluster, so console pages read memory instead of the cluster.

A page that asked the cluster for 1,000 topics and 10,000 partitions on every view would take
seconds; instead a :class:`ClusterObserver` thread takes a :class:`ClusterSnapshot` (brokers,
topics with leaders/replicas/ISR, sizes, groups) every ``interval_s`` and pages read the latest
one. Each round also reads every partition's high watermark (ListOffsets) into
:class:`MessageRates`, a bounded ring of samples per topic whose differences are the message
rate over time (messages appended per second, as Kafka's MessagesInPerSec counts them).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from kaflet.manager.clusters import (
    ClusterAccess,
    ClusterClient,
    ClusterError,
    ClusterOverview,
    GroupSummary,
    LogDirInfo,
    LogDirs,
    TopicInfo,
)
from kaflet.util.outage_log import OutageLog

log = logging.getLogger("kaflet.manager.sampling")


class MessageRates:
    """Per topic, the last ``capacity`` samples of (time s, sum of its partitions' high watermarks).

    A partition missing from a sample (its leader did not answer) counts with its last known
    offset, so one slow broker does not show as a drop and then a burst. A topic that leaves
    the samples is forgotten; one whose offsets go backwards (deleted and created again) starts
    a fresh ring.
    """

    def __init__(self, capacity: int = 360) -> None:
        if capacity < 2:
            raise ValueError("a rate needs at least two samples")
        self.capacity = capacity
        self._rings: dict[str, deque[tuple[float, int]]] = {}
        self._last: dict[tuple[str, int], int] = {}
        self._lock = threading.Lock()

    def record(self, at: float, offsets: Mapping[tuple[str, int], int],
               partitions: Mapping[str, int] | None = None) -> None:
        """Add one sample taken at ``at`` (s): ``offsets`` per (topic, partition).

        ``partitions`` (topic -> partition count, from the same round's metadata) says which
        topics and partitions exist; without it, the topics in ``offsets`` are the ones that exist.
        """
        with self._lock:
            if partitions is None:
                counts: dict[str, int] = {}
                for (t, p) in offsets:
                    counts[t] = max(counts.get(t, 0), p + 1)
                for (t, p) in self._last:
                    if t in counts:
                        counts[t] = max(counts[t], p + 1)
            else:
                counts = dict(partitions)
            last = {k: v for k, v in self._last.items() if k[0] in counts and k[1] < counts[k[0]]}
            last.update(offsets)
            self._last = last
            totals: dict[str, int] = dict.fromkeys(counts, 0)
            for (t, _), off in last.items():
                totals[t] += off
            for gone in set(self._rings) - set(totals):
                del self._rings[gone]
            for topic, total in totals.items():
                ring = self._rings.get(topic)
                if ring is None or (ring and total < ring[-1][1]):
                    ring = self._rings[topic] = deque(maxlen=self.capacity)
                if ring and at <= ring[-1][0]:
                    continue  # a clock step back: keep time increasing within a ring
                ring.append((at, total))

    def series(self, topic: str) -> list[tuple[float, float]]:
        """(time s, messages/s over the interval ending then) for each pair of successive samples."""
        with self._lock:
            ring = list(self._rings.get(topic, ()))
        return [(t1, (o1 - o0) / (t1 - t0)) for (t0, o0), (t1, o1) in zip(ring, ring[1:], strict=False)]

    def samples(self, topic: str) -> list[tuple[float, int]]:
        """The raw samples (time s, summed high watermarks) kept for ``topic``, oldest first."""
        with self._lock:
            return list(self._rings.get(topic, ()))

    def latest(self, topic: str) -> float | None:
        """The rate over the last interval, or None before two samples."""
        with self._lock:
            ring = self._rings.get(topic)
            if ring is None or len(ring) < 2:
                return None
            (t0, o0), (t1, o1) = ring[-2], ring[-1]
        return (o1 - o0) / (t1 - t0)

    def topics(self) -> list[str]:
        with self._lock:
            return sorted(self._rings)


@dataclass(frozen=True)
class ClusterSnapshot:
    """What one sampling round saw; ``took_s`` is how long the round took."""

    taken_at: float
    took_s: float
    overview: ClusterOverview
    topics: Mapping[str, TopicInfo]
    groups: tuple[GroupSummary, ...]
    #: Why sizes are missing (None when every partition's size is known).
    sizes_unavailable: str | None
    #: Log end offset of each partition, read in this round.
    end_offsets: Mapping[tuple[str, int], int] = field(default_factory=dict)
    #: Committed offsets of each group, read in this round.
    committed: Mapping[str, Mapping[tuple[str, int], int]] = field(default_factory=dict)
    #: How many members each group has, read in this round.
    members: Mapping[str, int] = field(default_factory=dict)
    #: Each broker's log dirs, read with the sizes.
    log_dirs: Mapping[int, tuple[LogDirInfo, ...]] = field(default_factory=dict)

    def group_lag(self, group_id: str) -> int | None:
        """The group's total lag over the partitions it committed (None: not read this round)."""
        committed = self.committed.get(group_id)
        if committed is None:
            return None
        return sum(max(0, self.end_offsets[k] - off) for k, off in committed.items() if k in self.end_offsets)

    def groups_of_topic(self, topic: str) -> dict[str, int]:
        """The groups that committed offsets on ``topic`` and their lag on it."""
        out: dict[str, int] = {}
        for group, committed in self.committed.items():
            lag = [max(0, self.end_offsets.get(k, off) - off) for k, off in committed.items() if k[0] == topic]
            if lag:
                out[group] = sum(lag)
        return dict(sorted(out.items()))

    @property
    def partition_count(self) -> int:
        return sum(t.partition_count for t in self.topics.values())

    @property
    def under_replicated(self) -> int:
        return sum(t.under_replicated for t in self.topics.values())

    def broker_load(self) -> dict[int, tuple[int, int]]:
        """(replicas, leaders) each broker holds, for every broker of the overview."""
        replicas = dict.fromkeys((b.id for b in self.overview.brokers), 0)
        leaders = dict(replicas)
        for t in self.topics.values():
            for p in t.partitions:
                for r in p.replicas:
                    replicas[r] = replicas.get(r, 0) + 1
                if p.leader is not None:
                    leaders[p.leader] = leaders.get(p.leader, 0) + 1
        return {b: (replicas[b], leaders.get(b, 0)) for b in sorted(replicas)}

    def broker_sizes(self) -> dict[int, int] | None:
        """Bytes on disk each broker holds over its replicas (None when sizes are unknown); a
        broker of the overview without replicas holds 0."""
        if self.sizes_unavailable is not None:
            return None
        totals = dict.fromkeys((b.id for b in self.overview.brokers), 0)
        for t in self.topics.values():
            for p in t.partitions:
                for broker, size in p.replica_sizes:
                    totals[broker] = totals.get(broker, 0) + size
        return dict(sorted(totals.items()))


class ClusterObserver:
    """Samples one cluster every ``interval_s`` on a thread of its own; pages read :meth:`snapshot`.

    Sizes and log dirs (DescribeLogDirs, one request per broker) are read every ``sizes_every``
    rounds and reused in between. A failed round keeps the previous snapshot and sets :attr:`last_error`.
    """

    def __init__(self, client: ClusterClient, *, interval_s: float = 30.0, sizes_every: int = 10,
                 capacity: int = 360, clock: Callable[[], float] = time.time) -> None:
        if interval_s <= 0:
            raise ValueError("interval_s must be positive")
        self.client = client
        self.interval_s = interval_s
        self.sizes_every = max(1, sizes_every)
        self.clock = clock
        self.rates = MessageRates(capacity)
        self.last_error: str | None = None
        # The background rounds' failures: one warning per outage of the cluster, not one per round.
        self.outage = OutageLog(log, f"sampling {client.access.bootstrap_servers}")
        self.rounds = 0
        self._snapshot: ClusterSnapshot | None = None
        self._log_dirs: LogDirs | None = None
        self._sampled = threading.Condition()
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    def sample(self) -> ClusterSnapshot:
        """One round, now, on the calling thread (the background thread calls it too)."""
        started = time.monotonic()
        md = self.client.metadata()
        overview = self.client.overview(md)
        if self.rounds % self.sizes_every == 0:
            self._log_dirs = self.client.log_dirs()
        found = self._log_dirs
        topics = self.client.topics(md, None if found is None else found.replica_sizes)
        keys = [(t.name, p.partition) for t in topics for p in t.partitions]
        at = self.clock()
        offsets = self.client.end_offsets(keys)
        self.rates.record(at, offsets, {t.name: t.partition_count for t in topics})
        groups = tuple(self.client.groups())
        committed = self.client.committed_offsets(g.group_id for g in groups) if groups else {}
        members = self.client.group_members(g.group_id for g in groups)
        snap = ClusterSnapshot(at, time.monotonic() - started, overview, {t.name: t for t in topics}, groups,
                               self.client.sizes_unavailable if found is None else None, offsets, committed,
                               members, {} if found is None else found.dirs)
        with self._sampled:
            self._snapshot = snap
            self.rounds += 1
            self.last_error = None
            self._sampled.notify_all()
        return snap

    def snapshot(self) -> ClusterSnapshot | None:
        """The latest snapshot (None before the first round finished)."""
        return self._snapshot

    def wait_for_rounds(self, rounds: int, timeout: float) -> bool:
        """Wait until at least ``rounds`` rounds have finished; False on timeout."""
        with self._sampled:
            return self._sampled.wait_for(lambda: self.rounds >= rounds, timeout)

    def start(self) -> ClusterObserver:
        """Sample in the background until :meth:`stop`."""
        if self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name="kaflet-manager-sampler", daemon=True)
            self._thread.start()
        return self

    def refresh(self) -> None:
        """Start the next round now instead of at the end of the interval (after a change)."""
        self._wake.set()

    def stop(self, timeout: float = 30.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def _run(self) -> None:
        while not self._stop.is_set():
            began = time.monotonic()
            try:
                self.sample()
                self.outage.succeeded()
            except ClusterError as exc:
                self.last_error = str(exc)
                self.outage.failed(exc)
            except Exception as exc:  # a bug must not end the sampling for good
                self.last_error = f"{type(exc).__name__}: {exc}"
                log.exception("sampling %s failed", self.client.access.bootstrap_servers)
            self._wake.wait(max(0.0, self.interval_s - (time.monotonic() - began)))
            self._wake.clear()


class ObserverPool:
    """One started :class:`ClusterObserver` per registered cluster, keyed by the caller's id.

    :meth:`observe` returns the cluster's observer, starting one on first use and replacing it
    when the cluster's access (bootstrap servers, ZooKeeper, credentials) changed; pages then
    read its :meth:`ClusterObserver.snapshot`. :meth:`close` stops every observer.
    """

    def __init__(self, *, interval_s: float = 30.0, sizes_every: int = 10, capacity: int = 360) -> None:
        self.interval_s = interval_s
        self.sizes_every = sizes_every
        self.capacity = capacity
        self._observers: dict[object, ClusterObserver] = {}
        self._lock = threading.Lock()

    def observe(self, key: object, access: ClusterAccess) -> ClusterObserver:
        with self._lock:
            old = self._observers.get(key)
            if old is not None and old.client.access == access:
                return old
            observer = ClusterObserver(ClusterClient(access), interval_s=self.interval_s,
                                       sizes_every=self.sizes_every, capacity=self.capacity).start()
            self._observers[key] = observer
        if old is not None:
            # Not on the caller's (a page's) time: the old one may be mid-round.
            threading.Thread(target=_retire, args=(old,), name="kaflet-manager-retire", daemon=True).start()
        return observer

    def get(self, key: object) -> ClusterObserver | None:
        with self._lock:
            return self._observers.get(key)

    def keys(self) -> set[object]:
        """The keys of the clusters observed now."""
        with self._lock:
            return set(self._observers)

    def forget(self, key: object) -> None:
        """Stop observing a cluster (it was deleted); a round in flight ends on its own thread,
        not on the caller's (a request's) time."""
        with self._lock:
            old = self._observers.pop(key, None)
        if old is not None:
            threading.Thread(target=_retire, args=(old,), name="kaflet-manager-retire", daemon=True).start()

    def close(self, timeout: float = 5.0) -> None:
        """Stop every observer, waiting at most ``timeout`` in all: a round blocked on an
        unreachable cluster finishes on its own (daemon) thread instead of holding up shutdown."""
        with self._lock:
            observers, self._observers = list(self._observers.values()), {}
        for observer in observers:
            observer._stop.set()
            observer._wake.set()
        deadline = time.monotonic() + timeout
        for observer in observers:
            observer.stop(max(0.0, deadline - time.monotonic()))
            observer.client.close()


def _retire(observer: ClusterObserver) -> None:
    observer.stop()
    observer.client.close()
