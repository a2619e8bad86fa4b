"""A real Prometheus scraping a three-broker cluster with the repository's example configuration:
every query of the Kafka Exporter Overview dashboard (grafana.com 7589) and of kaflet's own
dashboard returns series, the lag of a group that left 42 records unconsumed is 42, and a killed
broker leaves its partitions with an ISR of 2. kafka_exporter's series come from one broker only
(the controller), so sums over them are not multiplied."""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from kaflet.coordinator.group.hashing import partition_for
from kaflet.metadata.zk_testing import free_ports
from tests.support.cluster import Cluster
from tests.support.dashboards import (
    KAFKA_EXPORTER_OVERVIEW,
    KAFKA_EXPORTER_OVERVIEW_VARIABLES,
    REPO,
    expand,
    kaflet_dashboard,
    kaflet_dashboard_variables,
)
from tests.support.prometheus import PrometheusServer


def scrape_config(targets: list[str]) -> str:
    """monitoring/prometheus.yml with these targets, scraped every second."""
    text = (REPO / "monitoring" / "prometheus.yml").read_text()
    text = text.replace("scrape_interval: 15s", "scrape_interval: 1s").replace("scrape_timeout: 10s", "scrape_timeout: 1s")
    listed = "".join(f"          - {t}\n" for t in targets)
    text, n = re.subn(r"(?:          - broker-\d\.example\.com:9404\n)+", listed, text)
    assert n == 1, "monitoring/prometheus.yml no longer lists the example brokers as the test expects"
    return text


def wait_for(what: str, check: Callable[[], Any], timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.5)


def test_dashboards_and_values_through_prometheus(cluster_factory: Callable[..., Cluster], tmp_path: Path) -> None:
    ports = free_ports(3)
    cluster = cluster_factory(3, overrides={"kafkaexmetrics.enable": "true", "zookeeper.session.timeout.ms": "6000",
                                         "offsets.topic.num.partitions": "3"},
                              broker_overrides={bid: {"metrics.listener": f"http://127.0.0.1:{port}"}
                                                for bid, port in zip((1, 2, 3), ports, strict=True)})
    instances = {bid: f"127.0.0.1:{port}" for bid, port in zip((1, 2, 3), ports, strict=True)}
    controller = cluster.wait_for_controller()
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    # Asking for a group's coordinator creates __consumer_offsets (3 partitions here).
    admin.describe_consumer_groups(["prom-probe"])["prom-probe"].exception(30)
    coordinators = {p: cluster.wait_for_leader("__consumer_offsets", p) for p in range(3)}
    # The topic is led by another broker and the group coordinated by that broker, so the
    # controller reads both over the wire; the third broker is the one killed at the end.
    leader = next(b for b in sorted(set(coordinators.values()) - {controller}))
    victim = ({1, 2, 3} - {controller, leader}).pop()
    group = next(g for g in (f"prom-group-{i}" for i in range(100)) if coordinators[partition_for(g, 3)] == leader)
    topic = f"prom-{uuid.uuid4().hex[:6]}"
    admin.create_topics([NewTopic(topic, 1, replica_assignment=[[leader, controller, victim]])])[topic].result(30)
    cluster.wait_for_isr(topic, 0, [leader, controller, victim])
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 5})
    for i in range(100):
        producer.produce(topic, f"record-{i}".encode())
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group, "enable.auto.commit": False,
                         "auto.offset.reset": "earliest"})
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        consumed = 0
        deadline = time.monotonic() + 30
        while consumed < 58 and time.monotonic() < deadline:
            for msg in consumer.consume(58 - consumed, timeout=1):
                assert msg.error() is None, msg.error()
                consumed += 1
        assert consumed == 58
        consumer.commit(offsets=[TopicPartition(topic, 0, 58)], asynchronous=False)
    finally:
        consumer.close()

    with PrometheusServer(tmp_path / "prometheus", scrape_config(list(instances.values()))).start() as prom:
        wait_for("every broker scraped", lambda: prom.targets_up() == {i: 1.0 for i in instances.values()})
        lag = f'kafka_consumergroup_lag_sum{{consumergroup="{group}",topic="{topic}"}}'
        [series] = wait_for("the group's lag", lambda: prom.query(lag))
        assert float(series["value"][1]) == 42
        assert cluster.wait_for_controller() == controller
        # Served once per cluster: by the controller's endpoint, by no other.
        assert series["metric"]["instance"] == instances[controller]
        assert {s["metric"]["instance"] for s in prom.query("kafka_brokers")} == {instances[controller]}
        assert float(prom.query("kafka_brokers")[0]["value"][1]) == 3

        # The variables as Grafana resolves them (the first job and instance, every topic).
        values: dict[str, str] = {}
        for name, query in KAFKA_EXPORTER_OVERVIEW_VARIABLES + tuple(kaflet_dashboard_variables()):
            selector, label = re.fullmatch(r"label_values\((.*), (\w+)\)", expand(query, values)).groups()
            found = wait_for(f"values of ${name}", lambda s=selector, lb=label: prom.label_values(s, lb))
            values[name] = found[0] if name != "topic" else ".*"
        assert values["instance"] == instances[controller]
        queries = [*KAFKA_EXPORTER_OVERVIEW, *kaflet_dashboard()]

        def empty() -> list[str]:
            return [f"{title}: {expr}" for title, expr in queries if not prom.query(expand(expr, values))]

        # Range queries need two scrapes inside their window; everything has them after a few seconds.
        missing = empty()
        deadline = time.monotonic() + 20
        while missing and time.monotonic() < deadline:
            time.sleep(1)
            missing = empty()
        assert not missing, "queries without series:\n" + "\n".join(missing)

        cluster.kill(victim)
        isr = f'kafka_topic_partition_in_sync_replica{{topic="{topic}",partition="0"}}'
        wait_for("an ISR of 2 in Prometheus", lambda: [float(s["value"][1]) for s in prom.query(isr)] == [2.0])
        assert [float(s["value"][1]) for s in prom.query(lag)] == [42.0]
