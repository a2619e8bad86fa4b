"""The gateway's Prometheus series (``metrics.listener``): its counters and what is read of the
process at scrape time.

=====================================================================  =================================================
series                                                                 what
=====================================================================  =================================================
``kaflet_gateway_connections{cluster,app}``                            client connections now, by the login's cluster and
                                                                       application (both empty before a login completes)
``kaflet_gateway_requests_total{cluster,request}``                     requests read from clients (cluster empty before login)
``kaflet_gateway_request_bytes_total{cluster,request}``                their frame bytes
``kaflet_gateway_response_bytes_total{cluster,request}``               the answers' bytes sent back
``kaflet_gateway_app_requests_total{cluster,app}``                     requests of each logged-in application
``kaflet_gateway_upstream_request_time_ms{cluster,request}``           a histogram of the time from a request written to a
                                                                       cluster to its answer (cached answers not counted)
``kaflet_gateway_upstream_errors_total{cluster}``                      requests the cluster could not be reached for
``kaflet_gateway_upstream_available{cluster}``                         0 while the cluster's brokers cannot be reached
``kaflet_gateway_throttled_requests_total{cluster,app}``               requests answered with a throttle time (the
                                                                       manager's rates; app empty before login)
``kaflet_gateway_throttle_time_ms_total{cluster,app}``                 the throttle time handed out
``kaflet_gateway_failed_authentication_total``                         logins refused (by the gateway or the cluster)
``kaflet_gateway_sync_last_success_age_seconds``                       since the last pull from the manager that worked
                                                                       (absent until one has)
``kaflet_gateway_sync_failures_total``                                 pulls the manager did not answer
``kaflet_gateway_clusters``                                            clusters the discovery settings list
=====================================================================  =================================================

Counting costs the request path a dict lookup and two additions per request; connections and
availability are read when scraped.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric

from kaflet.metrics.exporter import histogram_buckets
from kaflet.metrics.stats import Histogram, request_name

#: A cluster id as a label ("" before a client has logged in).
ClusterLabel = str


def cluster_label(cluster_id: int | None) -> ClusterLabel:
    return "" if cluster_id is None or cluster_id < 0 else str(cluster_id)


class _Traffic:
    __slots__ = ("requests", "request_bytes", "response_bytes")

    def __init__(self) -> None:
        self.requests = self.request_bytes = self.response_bytes = 0


class GatewayMetrics:
    """The gateway's counters, bumped by the routers and the upstream pool."""

    def __init__(self) -> None:
        self.traffic: dict[tuple[ClusterLabel, int], _Traffic] = {}
        self.app_requests: dict[tuple[ClusterLabel, str], int] = {}
        self.upstream_time: dict[tuple[ClusterLabel, int], Histogram] = {}
        self.upstream_errors: dict[ClusterLabel, int] = {}
        #: (cluster, app) -> [throttled requests, throttle ms handed out]
        self.throttles: dict[tuple[ClusterLabel, str], list[int]] = {}
        self.failed_authentications = 0

    def _traffic(self, cluster: ClusterLabel, api_key: int) -> _Traffic:
        traffic = self.traffic.get((cluster, api_key))
        if traffic is None:
            traffic = self.traffic[(cluster, api_key)] = _Traffic()
        return traffic

    def on_request(self, cluster_id: int | None, app: str | None, api_key: int, nbytes: int, throttle_ms: int) -> None:
        """One request frame of ``nbytes`` read from a client, and its throttle time."""
        cluster = cluster_label(cluster_id)
        traffic = self._traffic(cluster, api_key)
        traffic.requests += 1
        traffic.request_bytes += nbytes
        if app is not None:
            key = (cluster, app)
            self.app_requests[key] = self.app_requests.get(key, 0) + 1
        if throttle_ms:
            counts = self.throttles.setdefault((cluster, app or ""), [0, 0])
            counts[0] += 1
            counts[1] += throttle_ms

    def on_response(self, cluster_id: int | None, api_key: int, nbytes: int) -> None:
        """An answer of ``nbytes`` (without its size prefix) for a client."""
        self._traffic(cluster_label(cluster_id), api_key).response_bytes += nbytes

    def on_upstream(self, cluster_id: int, api_key: int, elapsed_ms: float) -> None:
        """A cluster answered a request after ``elapsed_ms``."""
        key = (cluster_label(cluster_id), api_key)
        histogram = self.upstream_time.get(key)
        if histogram is None:
            histogram = self.upstream_time[key] = Histogram()
        histogram.observe(elapsed_ms)

    def on_upstream_error(self, cluster_id: int) -> None:
        cluster = cluster_label(cluster_id)
        self.upstream_errors[cluster] = self.upstream_errors.get(cluster, 0) + 1

    def on_failed_authentication(self) -> None:
        self.failed_authentications += 1


@dataclass(frozen=True, slots=True)
class GatewayState:
    """What the collector reads of the gateway at scrape time (the process passes these in)."""

    #: Client connections by (cluster label, app), "" for both before login.
    connections: Callable[[], Mapping[tuple[ClusterLabel, str], int]]
    #: Each listed cluster: True while its brokers answer (False during an outage).
    available: Callable[[], Mapping[int, bool]]
    #: Seconds since the last pull from the manager that worked; None before any.
    sync_age_s: Callable[[], float | None]
    sync_failures: Callable[[], int]


class GatewayCollector:
    """A prometheus_client collector turning GatewayMetrics and the gateway's state into series."""

    def __init__(self, metrics: GatewayMetrics, state: GatewayState) -> None:
        self.metrics = metrics
        self.state = state

    def collect(self) -> Iterator[Metric]:
        m, state = self.metrics, self.state
        connections = GaugeMetricFamily("kaflet_gateway_connections",
                                        "Client connections by the cluster and application they logged in as",
                                        labels=["cluster", "app"])
        for (cluster, app), n in sorted(state.connections().items()):
            connections.add_metric([cluster, app], float(n))
        yield connections
        families = {
            "requests": CounterMetricFamily("kaflet_gateway_requests", "Requests read from clients",
                                            labels=["cluster", "request"]),
            "request_bytes": CounterMetricFamily("kaflet_gateway_request_bytes",
                                                 "Request frame bytes read from clients", labels=["cluster", "request"]),
            "response_bytes": CounterMetricFamily("kaflet_gateway_response_bytes", "Answer bytes sent to clients",
                                                  labels=["cluster", "request"]),
        }
        for (cluster, key), traffic in sorted(m.traffic.items()):
            labels = [cluster, request_name(key)]
            for attr, family in families.items():
                family.add_metric(labels, float(getattr(traffic, attr)))
        yield from families.values()
        apps = CounterMetricFamily("kaflet_gateway_app_requests", "Requests of each logged-in application",
                                   labels=["cluster", "app"])
        for (cluster, app), n in sorted(m.app_requests.items()):
            apps.add_metric([cluster, app], float(n))
        yield apps
        timing = HistogramMetricFamily("kaflet_gateway_upstream_request_time_ms",
                                       "Time from a request written to a cluster to its answer (ms)",
                                       labels=["cluster", "request"])
        for (cluster, key), histogram in sorted(m.upstream_time.items()):
            timing.add_metric([cluster, request_name(key)], histogram_buckets(histogram), histogram.sum)
        yield timing
        errors = CounterMetricFamily("kaflet_gateway_upstream_errors",
                                     "Requests for which the cluster's brokers could not be reached", labels=["cluster"])
        for cluster, n in sorted(m.upstream_errors.items()):
            errors.add_metric([cluster], float(n))
        yield errors
        available = GaugeMetricFamily("kaflet_gateway_upstream_available",
                                      "1 while the cluster's brokers answer the gateway, 0 during an outage",
                                      labels=["cluster"])
        for cluster_id, up in sorted(state.available().items()):
            available.add_metric([str(cluster_id)], 1.0 if up else 0.0)
        yield available
        yield GaugeMetricFamily("kaflet_gateway_clusters", "Clusters the discovery settings list",
                                value=float(len(state.available())))
        throttled = CounterMetricFamily("kaflet_gateway_throttled_requests",
                                        "Requests answered with a throttle time for the manager's rates",
                                        labels=["cluster", "app"])
        throttle_ms = CounterMetricFamily("kaflet_gateway_throttle_time_ms", "Throttle time handed to clients (ms)",
                                          labels=["cluster", "app"])
        for (cluster, app), (n, ms) in sorted(m.throttles.items()):
            throttled.add_metric([cluster, app], float(n))
            throttle_ms.add_metric([cluster, app], float(ms))
        yield throttled
        yield throttle_ms
        yield CounterMetricFamily("kaflet_gateway_failed_authentication", "Client logins refused",
                                  value=float(m.failed_authentications))
        age = state.sync_age_s()
        if age is not None:
            yield GaugeMetricFamily("kaflet_gateway_sync_last_success_age_seconds",
                                    "Seconds since the last pull from the management service that worked",
                                    value=age)
        yield CounterMetricFamily("kaflet_gateway_sync_failures", "Pulls the management service did not answer",
                                  value=float(state.sync_failures()))
