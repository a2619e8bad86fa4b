"""The Prometheus endpoint: ``GET /metrics`` on ``metrics.listener`` (kaflet's setting).

Names follow what the Prometheus JMX exporter's Kafka rules make of Kafka's MBeans (lowercased,
``kafka_<domain>_<type>_<name>``, ``PerSec`` meters as ``_total`` counters of their Count), so
dashboards and alerts written for a JVM broker find the same series here:

========================================================  ===========================================
series                                                     Kafka MBean
========================================================  ===========================================
``kafka_server_brokertopicmetrics_<name>_total{topic}``    kafka.server:type=BrokerTopicMetrics,name=<Name>PerSec[,topic=]
``kafka_network_requestmetrics_requests_total``            kafka.network:type=RequestMetrics,name=RequestsPerSec,request=,version=
``kafka_network_requestmetrics_totaltimems``               ...,name=TotalTimeMs,request= (a histogram here, Kafka's is percentiles)
``kafka_server_replicamanager_*``                          kafka.server:type=ReplicaManager,name=PartitionCount|LeaderCount|UnderReplicatedPartitions|IsrShrinksPerSec|IsrExpandsPerSec
``kafka_controller_kafkacontroller_activecontrollercount`` kafka.controller:type=KafkaController,name=ActiveControllerCount
``kafka_coordinator_group_groupmetadatamanager_numgroups`` kafka.coordinator.group:type=GroupMetadataManager,name=NumGroups
``kafka_server_socket_server_metrics_connection_count``    kafka.server:type=socket-server-metrics,listener=,networkProcessor= connection-count (per listener)
``kafka_log_log_size|logendoffset|logstartoffset``         kafka.log:type=Log,name=Size|LogEndOffset|LogStartOffset,topic=,partition=
``kafka_server_appidtopicmetrics_<name>_total``            Logi-Kafka's kafka.server:type=AppIdTopicMetrics,name=<Name>PerSec,topic=,appId=
``kafka_server_topicrequestmetrics_totaltimems|throttletimems``  Logi-Kafka's kafka.server:type=TopicRequestMetrics,name=TotalTimeMs|ThrottleTimeMs,request=,topic=
========================================================  ===========================================

The all-topics BrokerTopicMetrics are the samples without a ``topic`` label, as the JMX
exporter shows the MBean without a topic key. On the active controller the endpoint also serves
kafka_exporter's series of the whole cluster (kaflet/metrics/cluster_view.py).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, ProcessCollector, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.samples import Sample

from kaflet.metrics.stats import TIME_BUCKETS_MS, BrokerMetrics, Histogram, request_name
from kaflet.util.loop_slice import LoopSlice

if TYPE_CHECKING:
    from kaflet.metrics.cluster_view import ClusterSeries
    from kaflet.replication.partition import Partition

log = logging.getLogger("kaflet.metrics")

# (series name part, TopicCounters attribute, help) of BrokerTopicMetrics.
_TOPIC_METERS = (
    ("messagesin", "messages_in", "Records appended by producers (MessagesInPerSec)"),
    ("bytesin", "bytes_in", "Record batch bytes appended by producers (BytesInPerSec)"),
    ("bytesout", "bytes_out", "Record bytes sent to consumers (BytesOutPerSec)"),
    ("bytesrejected", "bytes_rejected", "Batch bytes refused as larger than max.message.bytes (BytesRejectedPerSec)"),
    ("totalproducerequests", "produce_requests", "Produce partitions that reached the log (TotalProduceRequestsPerSec)"),
    ("totalfetchrequests", "fetch_requests", "Fetch partitions read, consumers' and followers' (TotalFetchRequestsPerSec)"),
    ("failedproducerequests", "failed_produce", "Produce partitions that failed (FailedProduceRequestsPerSec)"),
    ("failedfetchrequests", "failed_fetch", "Fetch partitions that failed (FailedFetchRequestsPerSec)"),
    ("producemessageconversions", "produce_conversions",
     "Records up-converted from Produce v0-2 message sets (ProduceMessageConversionsPerSec)"),
    ("fetchmessageconversions", "fetch_conversions",
     "Records down-converted for Fetch v0-3 consumers (FetchMessageConversionsPerSec)"),
)
_APP_METERS = (
    ("messagesin", "messages_in", "Records the application appended to the topic"),
    ("bytesin", "bytes_in", "Record batch bytes the application appended to the topic"),
    ("bytesout", "bytes_out", "Record bytes the application fetched from the topic"),
    ("totalproducerequests", "produce_requests", "Produce requests of the application naming the topic"),
    ("totalfetchrequests", "fetch_requests", "Fetch requests of the application naming the topic"),
    ("throttletimems", "throttle_ms", "Throttle time (ms) handed to the application's requests naming the topic"),
)
_BUCKET_BOUNDS = [*(f"{b:g}" for b in TIME_BUCKETS_MS), "+Inf"]


@dataclass(frozen=True, slots=True)
class BrokerState:
    """What the exporter reads of the broker at scrape time (the server passes these in)."""

    partitions: Callable[[], Iterable[Partition]]
    active_controller: Callable[[], bool]
    group_count: Callable[[], int]
    connections: Callable[[], Mapping[str, int]]
    topic_exists: Callable[[str], bool]
    isr_shrinks: Callable[[], int]
    isr_expands: Callable[[], int]
    #: Disk load protection per device: (utilisation 0-1, cold reads admitted, refused); empty when off.
    disks: Callable[[], Mapping[str, tuple[float, int, int]]] = dict
    #: Throttled replication byte rates by quota type (LeaderReplication, FollowerReplication,
    #: AlterLogDirsReplication).
    replication_rates: Callable[[], Mapping[str, float]] = dict


def histogram_buckets(h: Histogram) -> list[tuple[str, float]]:
    """Cumulative (bound, count) pairs of ``h``, as HistogramMetricFamily takes them."""
    out, running = [], 0
    for bound, n in zip(_BUCKET_BOUNDS, h.counts, strict=True):
        running += n
        out.append((bound, float(running)))
    return out


class KafkaCollector:
    """A prometheus_client collector that turns BrokerMetrics and the broker's state into series."""

    def __init__(self, stats: BrokerMetrics, state: BrokerState) -> None:
        self.stats = stats
        self.state = state

    def collect(self) -> Iterator[Metric]:
        stats, state = self.stats, self.state
        stats.forget_topics(state.topic_exists)
        yield from self._topic_meters()
        yield from self._request_metrics()
        yield from self._replica_manager()
        active = GaugeMetricFamily("kafka_controller_kafkacontroller_activecontrollercount",
                                   "1 on the broker that is the active controller (ActiveControllerCount)")
        active.add_metric([], 1.0 if state.active_controller() else 0.0)
        yield active
        groups = GaugeMetricFamily("kafka_coordinator_group_groupmetadatamanager_numgroups",
                                   "Consumer groups this broker coordinates (NumGroups)")
        groups.add_metric([], float(state.group_count()))
        yield groups
        conns = GaugeMetricFamily("kafka_server_socket_server_metrics_connection_count",
                                  "Open client connections per listener (connection-count)", labels=["listener"])
        for listener, n in sorted(state.connections().items()):
            conns.add_metric([listener], float(n))
        yield conns
        yield from self._disk_load()
        yield from self._zookeeper()
        for kind, rate in sorted(state.replication_rates().items()):
            g = GaugeMetricFamily(f"kafka_server_{kind.lower()}_byte_rate",
                                  f"Bytes/s of throttled replication ({kind} byte-rate, KIP-73)")
            g.add_metric([], rate)
            yield g
        if stats.app_topics is not None:
            yield from self._app_topic_metrics()

    def _zookeeper(self) -> Iterator[Metric]:
        zk = self.stats.zookeeper
        if zk is None:
            return
        expires = CounterMetricFamily("kafka_server_sessionexpirelistener_zookeeperexpires",
                                      "ZooKeeper sessions of this broker that expired (ZooKeeperExpiresPerSec)")
        expires.add_metric([], float(zk.expires))
        disconnects = CounterMetricFamily("kafka_server_sessionexpirelistener_zookeeperdisconnects",
                                          "Connections to ZooKeeper lost (ZooKeeperDisconnectsPerSec)")
        disconnects.add_metric([], float(zk.disconnects))
        # Kafka's SessionState attribute is a string, which the JMX exporter leaves out: one
        # gauge per state instead, 1 for the current one.
        state = GaugeMetricFamily("kaflet_zookeeper_session_state",
                                  "1 for the state of this broker's ZooKeeper session (SessionState)",
                                  labels=["state"])
        for name in ("CONNECTED", "SUSPENDED", "LOST"):
            state.add_metric([name], 1.0 if zk.state == name else 0.0)
        yield expires
        yield disconnects
        yield state

    def _disk_load(self) -> Iterator[Metric]:
        disks = sorted(self.state.disks().items())
        if not disks:
            return
        util = GaugeMetricFamily("kaflet_diskloadprotector_utilisation",
                                 "Last sampled utilisation (0-1) of a log dir's disk", labels=["device"])
        admitted = CounterMetricFamily("kaflet_diskloadprotector_coldreads_admitted",
                                       "Consumer reads of cold data let through while the disk was overloaded",
                                       labels=["device"])
        refused = CounterMetricFamily("kaflet_diskloadprotector_coldreads_refused",
                                      "Consumer reads of cold data refused (throttled) while the disk was overloaded",
                                      labels=["device"])
        for device, (u, a, r) in disks:
            util.add_metric([device], u)
            admitted.add_metric([device], float(a))
            refused.add_metric([device], float(r))
        yield util
        yield admitted
        yield refused

    def _topic_meters(self) -> Iterator[Metric]:
        stats = self.stats
        topics = sorted(stats.topics.items())
        for name, attr, doc in _TOPIC_METERS:
            family = CounterMetricFamily(f"kafka_server_brokertopicmetrics_{name}", doc, labels=["topic"])
            # All topics: the MBean without a topic key, i.e. the sample without a topic label.
            family.samples.append(Sample(family.name + "_total", {}, float(getattr(stats.all_topics, attr))))
            for topic, counters in topics:
                family.add_metric([topic], float(getattr(counters, attr)))
            yield family

    def _request_metrics(self) -> Iterator[Metric]:
        stats = self.stats
        requests = CounterMetricFamily("kafka_network_requestmetrics_requests",
                                       "Requests received per API and version (RequestsPerSec)",
                                       labels=["request", "version"])
        for (api_key, version, follower), n in sorted(stats.requests.items()):
            requests.add_metric([request_name(api_key, follower), str(version)], float(n))
        yield requests
        times = HistogramMetricFamily("kafka_network_requestmetrics_totaltimems",
                                      "Time from a request's receipt to its encoded response, ms (TotalTimeMs)",
                                      labels=["request"])
        for (api_key, follower), h in sorted(stats.request_times.items()):
            times.add_metric([request_name(api_key, follower)], histogram_buckets(h), h.sum)
        yield times

    def _replica_manager(self) -> Iterator[Metric]:
        state = self.state
        partition_count = leader_count = under_replicated = 0
        for part in state.partitions():
            partition_count += 1
            if part.is_leader:
                leader_count += 1
                # Kafka's Partition.isUnderReplicated: leader, and fewer in sync than assigned.
                if len(part.isr) < len(part.replicas):
                    under_replicated += 1
        for name, value, doc in (
                ("partitioncount", partition_count, "Partitions hosted on this broker (PartitionCount)"),
                ("leadercount", leader_count, "Partitions this broker leads (LeaderCount)"),
                ("underreplicatedpartitions", under_replicated,
                 "Partitions led here with fewer replicas in sync than assigned (UnderReplicatedPartitions)")):
            g = GaugeMetricFamily(f"kafka_server_replicamanager_{name}", doc)
            g.add_metric([], float(value))
            yield g
        shrinks = CounterMetricFamily("kafka_server_replicamanager_isrshrinks",
                                      "ISR shrinks written by this broker as leader (IsrShrinksPerSec)")
        shrinks.add_metric([], float(state.isr_shrinks()))
        yield shrinks
        expands = CounterMetricFamily("kafka_server_replicamanager_isrexpands",
                                      "ISR expansions written by this broker as leader (IsrExpandsPerSec)")
        expands.add_metric([], float(state.isr_expands()))
        yield expands

    def _app_topic_metrics(self) -> Iterator[Metric]:
        apps = self.stats.app_topics
        assert apps is not None
        series = sorted(apps.series.items())
        for name, attr, doc in _APP_METERS:
            family = CounterMetricFamily(f"kafka_server_appidtopicmetrics_{name}", doc, labels=["appid", "topic"])
            for (app, topic), counters in series:
                family.add_metric([app, topic], float(getattr(counters, attr)))
            yield family
        total = HistogramMetricFamily("kafka_server_topicrequestmetrics_totaltimems",
                                      "Time of Produce/Fetch requests naming the topic, ms (TotalTimeMs)",
                                      labels=["request", "topic"])
        throttle = HistogramMetricFamily("kafka_server_topicrequestmetrics_throttletimems",
                                         "Throttle time of Produce/Fetch requests naming the topic, ms (ThrottleTimeMs)",
                                         labels=["request", "topic"])
        for (request, topic), times in sorted(apps.topic_requests.items()):
            total.add_metric([request, topic], histogram_buckets(times.total_time), times.total_time.sum)
            throttle.add_metric([request, topic], histogram_buckets(times.throttle_time), times.throttle_time.sum)
        yield total
        yield throttle


class FamilySnapshot:
    """Families already collected, in the shape generate_latest() reads a registry (so the text
    can be written on a thread from values read on the loop)."""

    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> list[Metric]:
        return self.families


#: (topic, partition, size, log end offset, log start offset) of each hosted partition.
LogRow = tuple[str, int, int, int, int]
_LOG_SERIES = (
    ("kafka_log_log_size", "Bytes of a partition's log on disk (Log Size)"),
    ("kafka_log_log_logendoffset", "A partition's log end offset (LogEndOffset)"),
    ("kafka_log_log_logstartoffset", "A partition's log start offset (LogStartOffset)"),
)


def log_rows(partitions: Iterable[Partition]) -> list[LogRow]:
    """The values of the per-partition Log series, read on the loop."""
    return [(p.topic, p.index, p.log.size_in_bytes, p.log.log_end_offset, p.log.log_start_offset)
            for p in partitions]


#: Partitions read or written between two looks at the clock during a scrape (`LoopSlice`).
ROWS_PER_YIELD = 50


async def log_rows_yielding(partitions: Iterable[Partition]) -> list[LogRow]:
    """`log_rows`, handing the loop back in slices (`LoopSlice`): a broker with 5,000 partitions
    held it ~0.1 s reading them in one go (a log's size sums its segments)."""
    rows: list[LogRow] = []
    chunk: list[Partition] = []
    loop_slice = LoopSlice()
    for p in list(partitions):
        chunk.append(p)
        if len(chunk) == ROWS_PER_YIELD:
            rows += log_rows(chunk)
            chunk.clear()
            await loop_slice.pause()
    # A partition closed meanwhile still reads its last values: a closed log keeps them.
    return rows + log_rows(chunk)


def log_text_pieces(rows: list[LogRow]) -> Iterator[str]:
    """The per-partition Log series (kafka.log:type=Log) in the text format, ``ROWS_PER_YIELD``
    rows of a series a piece. Written here rather than as prometheus_client families: three per
    partition are most of a large broker's samples, and its families and writer take ~30 us a
    sample (1 s at 10,000 partitions), this ~1 us."""
    for column, (name, doc) in enumerate(_LOG_SERIES, start=2):
        yield f"# HELP {name} {doc}\n# TYPE {name} gauge\n"
        for first in range(0, len(rows), ROWS_PER_YIELD):
            yield "".join(f'{name}{{topic="{row[0]}",partition="{row[1]}"}} {row[column]}\n'
                          for row in rows[first:first + ROWS_PER_YIELD])


def log_text(rows: list[LogRow]) -> str:
    """`log_text_pieces` in one string."""
    return "".join(log_text_pieces(rows))


def _write(families: list[Metric], rows: list[LogRow]) -> bytes:
    return generate_latest(FamilySnapshot(families)) + log_text(rows).encode()


#: Bytes of a scrape's answer handed to the socket at a time.
WRITE_SLICE = 256 * 1024


class ListenerError(ValueError):
    """metrics.listener is not an http://host:port address."""


def parse_listener(value: str) -> tuple[str, int]:
    """(host, port) of ``http://host:port``; raises ListenerError."""
    parts = urlsplit(value.strip())
    try:
        port = parts.port
    except ValueError:
        port = None
    if parts.scheme != "http" or parts.hostname is None or port is None or parts.path not in ("", "/"):
        raise ListenerError(f"metrics.listener {value!r} must be http://host:port (the endpoint is /metrics)")
    return parts.hostname, port


class MetricsEndpoint:
    """``GET /metrics`` of a registry over HTTP on the process's event loop (scrapes read the
    counters between requests, so they see a consistent state without locks). `body` may be
    overridden to add series written outside the registry."""

    def __init__(self, host: str, port: int, *, what: str = "the broker") -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        # CPU, memory and open files of the process (process_*), as client libraries give.
        self.process = ProcessCollector(registry=self.registry)
        self.host = host
        self.port = port
        self.what = what
        self._runner: web.AppRunner | None = None

    async def body(self) -> bytes:
        """The exposition text now: values read on the loop, the text written on a thread."""
        return await asyncio.to_thread(generate_latest, FamilySnapshot(list(self.registry.collect())))

    async def pieces(self) -> Sequence[bytes]:
        """`body` in pieces, which a scrape sends in turn (overridden where the text is large)."""
        return [await self.body()]

    async def _metrics(self, request: web.Request) -> web.StreamResponse:
        try:
            pieces = await self.pieces()
        except Exception:
            log.exception("metrics scrape failed")
            return web.Response(status=500, text=f"metrics collection failed; see {self.what}'s log\n")
        # Sent a slice at a time, each write waiting for the socket to drain: 8 MB handed to
        # the transport in one go were copied into its buffer and half sent in one step of the
        # loop (30 ms at 10,000 partitions), and a joined body is another copy of them.
        response = web.StreamResponse(headers={"Content-Type": CONTENT_TYPE_LATEST})
        response.content_length = sum(len(piece) for piece in pieces)
        await response.prepare(request)
        for piece in pieces:
            view = memoryview(piece)
            for first in range(0, len(view), WRITE_SLICE):
                await response.write(view[first:first + WRITE_SLICE])
        await response.write_eof()
        return response

    async def start(self) -> None:
        """Bind and serve; raises OSError when the address cannot be bound."""
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, self.host, self.port)
        try:
            await site.start()
        except OSError:
            await runner.cleanup()
            raise
        self._runner = runner
        if self.port == 0 and runner.addresses:
            self.port = int(runner.addresses[0][1])
        log.info("metrics for Prometheus on http://%s:%d/metrics", self.host, self.port)

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None


class MetricsExporter(MetricsEndpoint):
    """The broker's endpoint: its own series, and kafka_exporter's on the active controller."""

    def __init__(self, stats: BrokerMetrics, state: BrokerState, host: str, port: int,
                 cluster: ClusterSeries | None = None) -> None:
        super().__init__(host, port)
        #: kafka_exporter's series of the whole cluster (only the active controller has any).
        self.cluster = cluster
        self.state = state
        # Collected on a thread at a scrape: it counts the open files by listing /proc/self/fd,
        # three per partition, which held the loop ~60 ms in one step at 10,000 partitions (the
        # listing lets go of the GIL while the kernel reads the directory).
        self.registry.unregister(self.process)
        self.registry.register(KafkaCollector(stats, state))

    def render(self) -> bytes:
        """The exposition text of this broker's own series now (kafka_exporter's are async)."""
        return _write([*self.process.collect(), *self.registry.collect()], log_rows(self.state.partitions()))

    async def body(self) -> bytes:
        return b"".join(await self.pieces())

    async def pieces(self) -> Sequence[bytes]:
        # Values and text on the loop, between requests, in slices that hand it back. Not on a
        # thread: a thread's hold on the GIL made each of the loop's system calls wait for the
        # 5 ms switch interval. And the families are made and written in one step: objects
        # that live across many turns of the loop end in the garbage collector's oldest
        # generation, and filling it costs a full collection (see cluster_view.py's ClusterView).
        rows = await log_rows_yielding(self.state.partitions())
        process = await asyncio.to_thread(lambda: list(self.process.collect()))
        pieces = [generate_latest(FamilySnapshot(process))]
        loop_slice = LoopSlice()
        # A family made and written at a time: all of them in one step held the loop 5-7 ms.
        for family in self.registry.collect():
            pieces.append(generate_latest(FamilySnapshot([family])))
            await loop_slice.pause()
        for piece in log_text_pieces(rows):
            pieces.append(piece.encode())
            await loop_slice.pause()
        if self.cluster is not None:
            pieces += await self.cluster.pieces()
        return pieces

    async def stop(self) -> None:
        if self.cluster is not None:
            self.cluster.close()
        await super().stop()
