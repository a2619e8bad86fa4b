"""The console's cluster pages against a real kaflet broker process: the in-process service
(FastAPI's TestClient) samples the broker over real sockets in the background every half
second; topics and groups made with confluent-kafka show up on its pages, operator actions
change the cluster and are audited, bad input changes nothing, non-operators get 403.
"""

from __future__ import annotations

import html
import os
import re
import socket
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, ResourceType
from fastapi.testclient import TestClient
from sqlalchemy import delete, select

from kaflet.manager.db import Database
from kaflet.manager.models import AuditRecord, TopicConnection
from tests.support.broker_process import BrokerProcess
from tests.support.manager import Session, gateway_call, manager_client, wait_for
from tests.support.topics import create_topic

CLUSTER = 3


class Console:
    """The in-process service with an admin session and the registered broker."""

    def __init__(self, client: TestClient, password: str, config: Any, broker: BrokerProcess) -> None:
        self.client = client
        self.admin = Session(client, "admin", password)
        self.db = Database(config.database_url)
        self.broker = broker
        r = self.admin.form("/clusters", {"name": "local", "cluster_id": str(CLUSTER),
                                          "bootstrap_servers": broker.bootstrap})
        assert r.status_code == 303, r.text

    def page(self, path: str) -> str:
        r = self.client.get(f"/clusters/{CLUSTER}{path}")
        assert r.status_code == 200, r.text
        return r.text

    def page_shows(self, path: str, *needles: str, timeout: float = 30.0) -> str:
        """The page once it shows every needle (the observer samples every half second)."""
        found: list[str] = []

        def check() -> bool:
            found[:] = [self.page(path)]
            return all(n in found[0] for n in needles)

        wait_for(check, timeout)
        return found[0]

    def audit(self, action: str) -> list[AuditRecord]:
        with self.db.session() as s:
            return list(s.scalars(select(AuditRecord).where(AuditRecord.action == action)))

    def new_client(self) -> TestClient:
        return TestClient(self.client.app, base_url="http://127.0.0.1")


@pytest.fixture
def console(tmp_path: Path, kaflet_broker: BrokerProcess) -> Iterator[Console]:
    with manager_client(tmp_path, cluster_sample_interval_s=0.5) as (client, password, config):
        c = Console(client, password, config, kaflet_broker)
        try:
            yield c
        finally:
            c.db.dispose()


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def produce(bootstrap: str, topic: str, count: int, partition: int = 0) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(count):
        producer.produce(topic, f"m{i}".encode(), partition=partition)
    assert producer.flush(30) == 0


def consume_and_commit(bootstrap: str, topic: str, group: str, count: int) -> None:
    """Read ``count`` messages of partition 0 by assignment (the group gets no members) and
    commit the position after them."""
    from confluent_kafka import OFFSET_BEGINNING, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        got = 0
        last = None
        while got < count:
            msg = consumer.poll(10)
            assert msg is not None, "no message"
            assert msg.error() is None, msg.error()
            got += 1
            last = msg
        consumer.commit(message=last, asynchronous=False)
    finally:
        consumer.close()


def row_of(page: str, table_id: str, first_cell: str) -> list[str]:
    """The cells of the row of table ``table_id`` whose first cell is ``first_cell`` (any row: "")."""
    table = page.split(f'id="{table_id}"', 1)[1].split("</table>", 1)[0]
    for row in re.findall(r"<tr.*?</tr>", table, re.S):
        cells = [re.sub(r"<[^>]+>", "", c).strip() for c in re.findall(r"<td.*?</td>", row, re.S)]
        if cells and (cells[0] == first_cell or not first_cell):
            return cells
    raise AssertionError(f"no row {first_cell!r} in {table_id}")


def test_pages_show_what_the_cluster_holds(console: Console) -> None:
    bootstrap = console.broker.bootstrap
    topic, group = unique("orders"), unique("billing")
    create_topic(bootstrap, topic, partitions=3)
    page = console.page_shows("", topic)
    broker_row = row_of(page, "brokers", "")
    broker_id = broker_row[0]
    assert broker_id.isdigit() and broker_row[1] == console.broker.bootstrap
    assert broker_row[3:5] == ["controller", "up"]
    cells = row_of(page, "topics", topic)
    assert cells[1:4] == ["3", "1", "0"]  # partitions, replication factor, under-replicated

    n, m = 30, 12
    produce(bootstrap, topic, n)
    consume_and_commit(bootstrap, topic, group, m)
    page = console.page_shows("", group)
    wait_for(lambda: row_of(console.page(""), "groups", group)[3] == str(n - m))
    assert row_of(console.page(""), "groups", group)[1:3] == ["Empty", "0"]

    group_page = console.page(f"/groups/{group}")
    assert re.search(rf'id="total-lag">{n - m}<', group_page)
    assert row_of(group_page, "lag", topic)[1:5] == ["0", str(m), str(n), str(n - m)]

    # Messages keep arriving: the rate chart gets points (one per pair of samples).
    produce(bootstrap, topic, 50)
    wait_for(lambda: row_of(console.page(f"/topics/{topic}"), "topic-groups", group)[1] == str(n - m + 50))
    topic_page = console.page(f"/topics/{topic}")
    chart = topic_page.split('id="rate-chart">', 1)[1].split("</div>", 1)[0]
    assert chart.startswith("<svg") and "<polyline" in chart
    rates = [float(v) for v in re.findall(r"<circle [^>]*><title>\S+ \S+ ([0-9.]+)", chart)]
    assert len(rates) >= 1 and max(rates) > 0  # the 50 messages show as a rise
    assert [row_of(topic_page, "partitions", str(p))[:4] for p in range(3)] == \
        [[str(p), broker_id, broker_id, broker_id] for p in range(3)]
    assert row_of(topic_page, "topic-groups", group)[1] == str(n - m + 50)
    assert "retention.ms" in topic_page


def test_operations_change_the_cluster_and_are_audited(console: Console) -> None:
    admin, bootstrap = console.admin, console.broker.bootstrap
    topic = unique("ops")
    base = f"/clusters/{CLUSTER}/topics"
    r = admin.form(base, {"name": topic, "partitions": "2", "configs": "retention.ms=3600000"})
    assert r.status_code == 303, r.text
    assert row_of(console.page_shows("", topic), "topics", topic)[1] == "2"
    assert row_of(console.page(f"/topics/{topic}"), "configs", "retention.ms")[1] == "3600000"

    assert admin.form(f"{base}/{topic}/partitions", {"partitions": "5"}).status_code == 303
    wait_for(lambda: row_of(console.page(""), "topics", topic)[1] == "5")

    assert admin.form(f"{base}/{topic}/configs", {"set_configs": "retention.ms=7200000\ncleanup.policy=compact"}
                      ).status_code == 303
    page = console.page(f"/topics/{topic}")
    assert row_of(page, "configs", "retention.ms")[1] == "7200000"
    assert row_of(page, "configs", "cleanup.policy")[1] == "compact"
    assert admin.form(f"{base}/{topic}/configs", {"reset": "cleanup.policy"}).status_code == 303
    assert row_of(console.page(f"/topics/{topic}"), "configs", "cleanup.policy")[1] == "delete"

    # A wrong confirmation deletes nothing; the topic's name confirms.
    r = admin.form(f"{base}/{topic}/delete", {"confirm": "something-else"})
    assert r.status_code == 400 and "type the name of the topic" in r.text
    assert topic in AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).topics
    # A topic its clients still use (a broker's session report) is not deleted.
    report = {"produce": {topic: ["app1#10.9.8.7#2.8#writer"]}}
    assert gateway_call(console.client, "POST", f"/heartbeat/survive-user?clusterId={CLUSTER}&brokerId=1",
                        json=report).json()["code"] == 0
    cells = row_of(console.page(f"/topics/{topic}"), "connections", "app1")
    assert [cells[1], *cells[3:5]] == ["10.9.8.7", "producer", "2.8"]
    r = admin.form(f"{base}/{topic}/delete", {"confirm": topic})
    assert r.status_code == 409 and "app1@10.9.8.7 (producer)" in r.text
    with console.db.session() as s:
        s.execute(delete(TopicConnection).where(TopicConnection.topic_name == topic))
        s.commit()
    assert admin.form(f"{base}/{topic}/delete", {"confirm": topic}).status_code == 303
    wait_for(lambda: topic not in console.page(""))
    assert topic not in AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).topics

    for action, details in (("topic.create", ['"partitions": 2']), ("topic.expand", ['"partitions": 5']),
                            ("topic.configs", ["7200000", '"reset": ["cleanup.policy"]']), ("topic.delete", [""])):
        records = [a for a in console.audit(action) if topic in a.target]
        assert len(records) == len(details) and all(a.actor == "admin" for a in records), action
        assert all(d in a.detail for a, d in zip(records, details, strict=True)), action


def test_bad_input_gets_a_clear_error_and_changes_nothing(console: Console) -> None:
    admin, bootstrap = console.admin, console.broker.bootstrap
    topic = unique("kept")
    create_topic(bootstrap, topic, partitions=2)
    base = f"/clusters/{CLUSTER}/topics"
    before = len(console.audit("topic.create")) + len(console.audit("topic.expand")) + len(console.audit("topic.configs"))

    r = admin.form(base, {"name": unique("neg"), "partitions": "-3"})
    assert r.status_code == 400 and "partitions must be from 1" in r.text
    r = admin.form(base, {"name": "bad name!", "partitions": "1"})
    assert r.status_code == 400 and "topic name" in r.text
    r = admin.form(base, {"name": topic, "partitions": "1"})
    assert r.status_code == 409 and "TOPIC_ALREADY_EXISTS" in r.text
    r = admin.form(f"{base}/{unique('nosuch')}/partitions", {"partitions": "4"})
    assert r.status_code == 404 and "UNKNOWN_TOPIC_OR_PART" in r.text
    r = admin.form(f"{base}/{topic}/partitions", {"partitions": "1"})
    assert r.status_code == 400 and "INVALID_PARTITIONS" in r.text
    r = admin.form(f"{base}/{topic}/configs", {"set_configs": "retention.ms=soon"})
    assert r.status_code == 400 and "INVALID_CONFIG" in r.text
    r = admin.form(f"{base}/{topic}/configs", {"set_configs": "no equals sign"})
    assert r.status_code == 400 and "name=value" in r.text
    assert console.client.get(f"/clusters/{CLUSTER}/topics/{unique('nosuch')}").status_code == 404
    assert console.client.get("/clusters/999").status_code == 404
    assert console.client.get(f"/clusters/{CLUSTER}/groups/{unique('nogroup')}").status_code == 404
    r = admin.form(f"{base}/__consumer_offsets/delete", {"confirm": "__consumer_offsets"})
    assert r.status_code == 400 and "internal" in r.text

    admin_client = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(ResourceType.TOPIC, topic)
    configs = admin_client.describe_configs([resource])[resource].result(10)
    assert configs["retention.ms"].is_default
    assert len(admin_client.list_topics(topic, timeout=10).topics[topic].partitions) == 2
    after = len(console.audit("topic.create")) + len(console.audit("topic.expand")) + len(console.audit("topic.configs"))
    assert after == before


def test_offset_reset_is_shown_first_then_confirmed_and_refused_while_the_group_has_members(console: Console) -> None:
    admin, bootstrap = console.admin, console.broker.bootstrap
    topic, group = unique("reset"), unique("readers")
    create_topic(bootstrap, topic, partitions=1)
    produce(bootstrap, topic, 20)
    consume_and_commit(bootstrap, topic, group, 5)
    reset = f"/clusters/{CLUSTER}/groups/{group}/reset"

    r = admin.form(reset, {"topic": topic, "to": "earliest"})
    assert r.status_code == 200 and 'id="reset-confirm"' in r.text and "dry run" in r.text
    assert row_of(r.text, "changes", "0") == ["0", "5", "0"]
    assert row_of(console.page(f"/groups/{group}"), "lag", topic)[2] == "5"  # nothing moved yet

    r = admin.form(reset, {"topic": topic, "to": "offset", "value": "17", "confirm": "yes"})
    assert r.status_code == 303, r.text
    assert row_of(console.page(f"/groups/{group}"), "lag", topic)[2:5] == ["17", "20", "3"]
    records = [a for a in console.audit("group.reset_offsets") if group in a.target]
    assert len(records) == 1 and '"0": [5, 17]' in records[0].detail

    # A time after every record: the log end, as Kafka's tool does (dry run only).
    r = admin.form(reset, {"topic": topic, "to": "timestamp", "value": "2100-01-01T00:00"})
    assert r.status_code == 200 and row_of(r.text, "changes", "0") == ["0", "17", "20"]
    r = admin.form(reset, {"topic": topic, "to": "timestamp", "value": "not a time"})
    assert r.status_code == 400 and "ms since the epoch" in r.text
    r = admin.form(reset, {"topic": topic, "to": "sideways"})
    assert r.status_code == 400

    member = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                       "session.timeout.ms": 6000})
    try:
        member.subscribe([topic])
        wait_for(lambda: member.poll(0.5) is not None or bool(member.assignment()))
        r = admin.form(reset, {"topic": topic, "to": "earliest", "confirm": "yes"})
        assert r.status_code == 409 and "GROUP_NOT_EMPTY" in r.text
        assert row_of(console.page(f"/groups/{group}"), "members", "")[1] != ""
    finally:
        member.close()
    assert row_of(console.page(f"/groups/{group}"), "lag", topic)[2] == "17"
    assert len(console.audit("group.reset_offsets")) == 1


def test_non_operators_see_the_pages_but_may_change_nothing(console: Console) -> None:
    r = console.admin.form("/accounts", {"username": "viewer", "password": "viewer-password", "role": "user"})
    assert r.status_code == 303
    viewer = Session(console.new_client(), "viewer", "viewer-password")
    topic = unique("guarded")
    create_topic(console.broker.bootstrap, topic, partitions=1)
    page = viewer.client.get(f"/clusters/{CLUSTER}")
    assert page.status_code == 200 and 'id="create-topic"' not in page.text
    base = f"/clusters/{CLUSTER}/topics"
    for path, data in ((base, {"name": unique("x"), "partitions": "1"}),
                       (f"{base}/{topic}/partitions", {"partitions": "3"}),
                       (f"{base}/{topic}/configs", {"set_configs": "retention.ms=1000"}),
                       (f"{base}/{topic}/delete", {"confirm": topic}),
                       (f"/clusters/{CLUSTER}/groups/g/reset", {"topic": topic, "to": "earliest", "confirm": "yes"})):
        r = viewer.form(path, data)
        assert r.status_code == 403 and "operator" in r.text, path
    # Without the CSRF token even an admin changes nothing.
    r = console.client.post(f"{base}/{topic}/delete", data={"confirm": topic})
    assert r.status_code == 403
    md = AdminClient({"bootstrap.servers": console.broker.bootstrap}).list_topics(topic, timeout=10)
    assert len(md.topics[topic].partitions) == 1 and md.topics[topic].error is None


def test_observers_follow_the_registered_clusters_and_the_sampling_setting(console: Console, tmp_path: Path) -> None:
    from kaflet.manager.config import ConfigError, load_config
    from kaflet.manager.web import create_app
    from tests.support.manager import write_config

    app = console.client.app
    observer = app.state.manager.observers.get(CLUSTER)  # type: ignore[attr-defined]
    assert observer is not None and observer.interval_s == 0.5

    # A service started later observes the clusters already registered, and stops at shutdown.
    config = load_config(write_config(tmp_path / "again.toml", tmp_path / "data", cluster_sample_interval_s=2))
    with TestClient(create_app(config, console.db), base_url="http://127.0.0.1") as again:
        pool = again.app.state.manager.observers  # type: ignore[attr-defined]
        started = pool.get(CLUSTER)
        assert started is not None and started.interval_s == 2.0
        assert started.wait_for_rounds(1, 30)
        thread = started._thread
        assert thread is not None and thread.is_alive()
    assert pool.get(CLUSTER) is None
    thread.join(20)
    assert not thread.is_alive()

    # Forgetting the cluster stops its observer.
    assert console.admin.form(f"/clusters/{CLUSTER}/delete", {}).status_code == 303
    assert app.state.manager.observers.get(CLUSTER) is None  # type: ignore[attr-defined]
    assert console.client.get(f"/clusters/{CLUSTER}").status_code == 404

    for bad in (0, -1, '"fast"'):
        path = tmp_path / "bad.toml"
        path.write_text(f'data_dir = "{tmp_path / "data"}"\ncluster_sample_interval_s = {bad}\n')
        with pytest.raises(ConfigError, match="cluster_sample_interval_s"):
            load_config(path)


def test_the_json_api_reads_and_operates_on_the_cluster(console: Console) -> None:
    """/api/v1/clusters: what the pages show as JSON, and the operations with the same checks,
    refusals and audit records as the console's forms."""
    admin, bootstrap = console.admin, console.broker.bootstrap
    topic, group = unique("api"), unique("api-readers")
    clusters = admin.api("GET", "/clusters").json()
    assert [c["id"] for c in clusters] == [CLUSTER] and "sasl_password" not in clusters[0]

    r = admin.api("POST", f"/clusters/{CLUSTER}/topics", {"name": topic, "partitions": 2,
                                                          "configs": {"retention.ms": "3600000"}})
    assert r.status_code == 201, r.text
    produce(bootstrap, topic, 12)
    consume_and_commit(bootstrap, topic, group, 4)

    def sampled() -> bool:
        detail = admin.api("GET", f"/clusters/{CLUSTER}").json()
        rows = {t["name"]: t for t in detail["topics"]}
        return topic in rows and any(g["group_id"] == group and g["lag"] == 8 for g in detail["groups"])

    wait_for(sampled)
    detail = admin.api("GET", f"/clusters/{CLUSTER}").json()
    assert detail["brokers"] and all(b["up"] for b in detail["brokers"])
    summary = next(t for t in detail["topics"] if t["name"] == topic)
    assert (summary["partitions"], summary["replication_factor"], summary["under_replicated"]) == (2, 1, 0)

    t = admin.api("GET", f"/clusters/{CLUSTER}/topics/{topic}").json()
    assert [p["log_end_offset"] for p in t["partition_list"]] == [12, 0]
    assert t["groups"] == {group: 8}
    assert {c["name"]: c["value"] for c in t["configs"]}["retention.ms"] == "3600000"

    g = admin.api("GET", f"/clusters/{CLUSTER}/groups/{group}").json()
    assert g["total_lag"] == 8 and [(p["partition"], p["committed"], p["lag"]) for p in g["partitions"]
                                    if p["topic"] == topic and p["partition"] == 0] == [(0, 4, 8)]

    assert admin.api("POST", f"/clusters/{CLUSTER}/topics/{topic}/partitions", {"partitions": 3}).status_code == 200
    r = admin.api("PATCH", f"/clusters/{CLUSTER}/topics/{topic}/configs",
                  {"set": {"cleanup.policy": "compact"}, "reset": ["retention.ms"]})
    assert r.status_code == 200, r.text
    configs = {c["name"]: c for c in admin.api("GET", f"/clusters/{CLUSTER}/topics/{topic}").json()["configs"]}
    assert configs["cleanup.policy"]["value"] == "compact" and configs["retention.ms"]["default"]

    # The reset is a dry run unless told otherwise; then it moves the committed offset.
    r = admin.api("POST", f"/clusters/{CLUSTER}/groups/{group}/reset", {"topic": topic, "to": "earliest"})
    assert r.status_code == 200 and r.json()["dry_run"]
    assert [(o["partition"], o["before"], o["after"]) for o in r.json()["offsets"]] == [(0, 4, 0), (1, None, 0), (2, None, 0)]
    r = admin.api("POST", f"/clusters/{CLUSTER}/groups/{group}/reset",
                  {"topic": topic, "to": "offset", "value": "10", "dry_run": False})
    assert r.status_code == 200, r.text
    g = admin.api("GET", f"/clusters/{CLUSTER}/groups/{group}").json()
    assert [p["committed"] for p in g["partitions"] if p["topic"] == topic and p["partition"] == 0] == [10]

    # Bad input: a clear 4xx and nothing changes.
    audited = len(console.audit("topic.create")) + len(console.audit("topic.expand"))
    for method, path, body, status in (
            ("POST", f"/clusters/{CLUSTER}/topics", {"name": unique("x"), "partitions": 0}, 422),
            ("POST", f"/clusters/{CLUSTER}/topics", {"name": "bad name!", "partitions": 1}, 400),
            ("POST", f"/clusters/{CLUSTER}/topics", {"name": topic, "partitions": 1}, 409),
            ("POST", f"/clusters/{CLUSTER}/topics", {"name": unique("x"), "partitions": 1, "extra": 1}, 422),
            ("POST", f"/clusters/{CLUSTER}/topics/{topic}/partitions", {"partitions": 2}, 400),
            ("POST", f"/clusters/{CLUSTER}/topics/{unique('nosuch')}/partitions", {"partitions": 2}, 404),
            ("PATCH", f"/clusters/{CLUSTER}/topics/{topic}/configs", {"set": {"retention.ms": "soon"}}, 400),
            ("PATCH", f"/clusters/{CLUSTER}/topics/{topic}/configs", {}, 400),
            ("POST", f"/clusters/{CLUSTER}/groups/{group}/reset", {"topic": topic, "to": "sideways"}, 422),
            ("DELETE", f"/clusters/{CLUSTER}/topics/{topic}?confirm=other", None, 400),
            ("GET", "/clusters/999", None, 404),
            ("GET", f"/clusters/{CLUSTER}/topics/{unique('nosuch')}", None, 404)):
        r = admin.api(method, path, body)
        assert r.status_code == status, (method, path, r.status_code, r.text)
        assert "Traceback" not in r.text
    assert len(console.audit("topic.create")) + len(console.audit("topic.expand")) == audited
    configs = {c["name"]: c for c in admin.api("GET", f"/clusters/{CLUSTER}/topics/{topic}").json()["configs"]}
    assert configs["retention.ms"]["default"]

    # Users read but change nothing; without the CSRF header even an admin changes nothing.
    assert console.admin.form("/accounts", {"username": "reader", "password": "reader-password",
                                            "role": "user"}).status_code == 303
    reader = Session(console.new_client(), "reader", "reader-password")
    assert reader.api("GET", f"/clusters/{CLUSTER}/topics/{topic}").status_code == 200
    assert reader.api("DELETE", f"/clusters/{CLUSTER}/topics/{topic}?confirm={topic}").status_code == 403
    assert console.client.delete(f"/api/v1/clusters/{CLUSTER}/topics/{topic}?confirm={topic}").status_code == 403

    assert admin.api("DELETE", f"/clusters/{CLUSTER}/topics/{topic}?confirm={topic}").status_code == 204
    wait_for(lambda: topic not in AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).topics)
    for action in ("topic.create", "topic.expand", "topic.configs", "topic.delete", "group.reset_offsets"):
        assert [a.actor for a in console.audit(action) if topic in a.target or group in a.target] == ["admin"], action


def test_clusters_are_registered_and_forgotten_through_the_json_api(console: Console) -> None:
    admin = console.admin
    body = {"name": "second", "bootstrap_servers": console.broker.bootstrap, "cluster_id": 77,
            "security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN", "sasl_username": "ops",
            "sasl_password": "ops-secret"}
    r = admin.api("POST", "/clusters", body)
    assert r.status_code == 201, r.text
    assert r.json()["id"] == 77 and "ops-secret" not in r.text
    assert admin.api("POST", "/clusters", body).status_code == 409
    assert admin.api("POST", "/clusters", {**body, "name": "third", "cluster_id": 78,
                                           "bootstrap_servers": "no port"}).status_code == 400
    assert [c["id"] for c in admin.api("GET", "/clusters").json()] == [CLUSTER, 77]
    assert "ops-secret" not in admin.api("GET", "/clusters").text
    assert admin.api("DELETE", "/clusters/77").status_code == 204
    assert admin.api("DELETE", "/clusters/77").status_code == 404
    assert [c["id"] for c in admin.api("GET", "/clusters").json()] == [CLUSTER]
    assert [a.target for a in console.audit("cluster.register")] == [f"cluster {CLUSTER}", "cluster 77"]
    assert [a.target for a in console.audit("cluster.delete")] == ["cluster 77"]


def bytes_of(page: str, table_id: str, first_cell: str) -> list[int | None]:
    """The ``data-bytes`` values in the row of ``table_id`` whose first cell is ``first_cell``."""
    table = page.split(f'id="{table_id}"', 1)[1].split("</table>", 1)[0]
    for row in re.findall(r"<tr.*?</tr>", table, re.S):
        cells = [re.sub(r"<[^>]+>", "", c).strip() for c in re.findall(r"<td.*?</td>", row, re.S)]
        if cells and (cells[0] == first_cell or not first_cell):
            return [int(v) if v else None for v in re.findall(r'data-bytes="(\d*)"', row)]
    raise AssertionError(f"no row {first_cell!r} in {table_id}")


def log_bytes(data_dir: Path, pattern: str = "*") -> int:
    """Bytes of the segment files of the partition dirs matching ``pattern`` (``topic-N``); the
    logs of deleted topics waiting out ``file.delete.delay.ms`` (``*-delete``) are no replica."""
    return sum(f.stat().st_size for d in data_dir.glob(pattern)
               if d.is_dir() and not d.name.endswith("-delete") for f in d.glob("*.log"))


def test_sizes_on_disk_per_topic_partition_replica_and_broker(console: Console) -> None:
    bootstrap, data_dir = console.broker.bootstrap, console.broker.data_dir
    topic = unique("sized")
    create_topic(bootstrap, topic, partitions=2)
    produce(bootstrap, topic, 200, partition=0)
    produce(bootstrap, topic, 50, partition=1)
    on_disk = [log_bytes(data_dir, f"{topic}-{p}") for p in range(2)]
    assert on_disk[0] > on_disk[1] > 0
    broker_id = row_of(console.page_shows(f"?q={topic}", f'id="topic-{topic}"'), "brokers", "")[0]

    # Sizes are read every 10th sampling round: wait for one after the writes.
    # (Generous: under a loaded machine a round takes several times its interval.)
    wait_for(lambda: bytes_of(console.page(f"?q={topic}"), "topics", topic) == [sum(on_disk)], timeout=180)
    page = console.page(f"/topics/{topic}")
    for p in range(2):
        # Total over the replicas, then the one replica on the lone broker: the segment files' bytes.
        assert bytes_of(page, "partitions", str(p)) == [on_disk[p], on_disk[p]]
        assert re.search(rf'data-broker="{broker_id}" data-bytes="{on_disk[p]}">{broker_id}: ', page)
    assert re.search(rf'id="topic-size" data-bytes="{sum(on_disk)}"', page)

    # The broker's total is every replica it holds (other tests' topics and __consumer_offsets too):
    # the same as the bytes of every segment in its log dir, once nothing is being written.
    wait_for(lambda: bytes_of(console.page(""), "brokers", broker_id) == [log_bytes(data_dir)], timeout=180)
    assert log_bytes(data_dir) >= sum(on_disk)
    # Its one log dir, with the size of the volume under it as statvfs gives it.
    fs = os.statvfs(data_dir)
    cell = row_of(console.page(""), "brokers", broker_id)[8]
    assert re.fullmatch(rf"{re.escape(str(data_dir))}: [0-9.]+ [KMG]iB free of [0-9.]+ [KMG]iB", cell), cell
    assert f'data-total="{fs.f_blocks * fs.f_frsize}"' in console.page("")


def listed(page: str) -> list[str]:
    """The topics the cluster page's topic table shows."""
    table = page.split('id="topics"', 1)[1].split("</table>", 1)[0]
    return re.findall(r'id="topic-([^"]+)"', table)


def test_topic_and_group_lists_are_paged_and_filtered(console: Console) -> None:
    bootstrap = console.broker.bootstrap
    prefix = unique("paged")
    names = [f"{prefix}-{i:03d}" for i in range(130)]
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(n, num_partitions=1, replication_factor=1) for n in names])
    for f in futures.values():
        f.result(60)

    first = console.page_shows(f"?q={prefix.upper()}", f"of {len(names)}")  # the filter ignores case
    assert f"Topics 1-100 of 130 whose name contains “{prefix.upper()}”, page 1 of 2." in first
    shown = listed(first)
    assert shown == names[:100]
    nav = first.split('id="topics-pages"', 1)[1].split("</nav>", 1)[0]
    page_2 = f"/clusters/{CLUSTER}?q={prefix.upper()}&amp;page=2"
    assert re.findall(r'<a href="([^"]+)">(\w+)</a>', nav) == [(page_2, "2"), (page_2, "next")]
    assert '<span class="current">1</span>' in nav
    r = console.client.get(html.unescape(page_2))
    assert r.status_code == 200
    second = r.text
    assert "Topics 101-130 of 130" in second
    assert listed(second) == names[100:]
    # Past the last page, or more digits than any page count: the last page.
    for page in ("3", "99", "9" * 5000):
        assert listed(console.page(f"?q={prefix}&page={page}")) == names[100:]
    one = console.page(f"?q={names[7]}")
    assert listed(one) == [names[7]] and 'id="topics-pages"' not in one
    assert "No topics whose name contains" in console.page(f"?q={prefix}-nothing")

    # Groups: filtered the same way, the topic filter kept in the group list's links and form.
    groups = [f"{prefix}-g{i}" for i in range(3)]
    for g in groups:
        consume_and_commit_offsets(admin, g, names[0])
    page = console.page_shows(f"?q={prefix}&gq={prefix}-G1", f"{prefix}-g1<")
    assert row_of(page, "groups", f"{prefix}-g1")[0] == f"{prefix}-g1"
    assert f"{prefix}-g0<" not in page and f"{prefix}-g2<" not in page
    assert "Groups 1-1 of 1" in page
    form = page.split('id="groups-filter"', 1)[1].split("</form>", 1)[0]
    assert f'name="q" value="{prefix}"' in form

    # Bad values get a clear 400 page, never a traceback.
    for query, message in (("page=-1", "page must be a whole number from 1"),
                           ("page=0", "page must be a whole number from 1"),
                           ("page=abc", "page must be a whole number from 1"),
                           ("gpage=1.5", "gpage must be a whole number from 1"),
                           ("q=" + "x" * 250, "the topic filter is 250 characters long; at most 249"),
                           ("gq=" + "x" * 1025, "the group filter is 1025 characters long; at most 1024")):
        r = console.client.get(f"/clusters/{CLUSTER}?{query}")
        assert r.status_code == 400 and message in r.text and "Traceback" not in r.text, query


def consume_and_commit_offsets(admin: AdminClient, group: str, topic: str) -> None:
    """Commit offset 0 of ``topic``'s partition 0 for ``group`` (a group without members)."""
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

    request = [ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0, 0)])]
    admin.alter_consumer_group_offsets(request, request_timeout=30)[group].result(30)


def test_live_connections_show_the_host_names_reverse_dns_gives(console: Console) -> None:
    topic = unique("named")
    create_topic(console.broker.bootstrap, topic, partitions=1)
    console.page_shows("", topic)
    # What this machine's resolver says for the loopback address (/etc/hosts: localhost).
    expected, _, _ = socket.gethostbyaddr("127.0.0.1")
    report = {"fetch": {topic: ["reader#127.0.0.1#2.8#r1"]}, "produce": {topic: ["writer#not-an-ip#2.8"]}}
    began = time.monotonic()
    assert gateway_call(console.client, "POST", f"/heartbeat/survive-user?clusterId={CLUSTER}&brokerId=1",
                        json=report).json()["code"] == 0
    # The report queued the lookups; the page shows the answer once the background lookup is in.
    page = console.page_shows(f"/topics/{topic}", f"<td>{expected}</td>", timeout=10)
    assert time.monotonic() - began < 10
    assert row_of(page, "connections", "reader")[1:4] == ["127.0.0.1", expected, "consumer"]
    assert row_of(page, "connections", "writer")[1:4] == ["not-an-ip", "(not an IP address)", "producer"]
