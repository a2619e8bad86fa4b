"""The management service end to end: a `kaflet manager` process and a kaflet broker process
whose gateway.url points at it (the gateway token in the URL), with confluent-kafka clients
logging in over SASL/PLAIN as `<clusterId>.<appId>`.

A user creates an application and asks for produce on a topic; an operator approves; the
producer writes. An operator sets a quota (AlterClientQuotas to the cluster): the producer's
rate is held to it. The broker's connection reports show up on the application's page. The
permission is revoked: the producer is refused. The manager allows no address without the
gateway token, so the broker's pulls prove the token in its gateway.url.
"""

from __future__ import annotations

import html
import re
import socket
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from confluent_kafka import Consumer, KafkaError

from tests.support.broker_process import BrokerProcess, running_broker
from tests.support.manager import (
    CLUSTER_ID,
    SYNC_MS,
    ManagerProcess,
    Session,
    app_client_config,
    csrf_of,
    gateway_broker_overrides,
    refused,
    running_manager,
    wait_for,
)
from tests.support.manager import produce_once as produce_as
from tests.support.quotas import MB, MeasuredProducer
from tests.support.topics import create_topic

TOPIC = "orders"


@pytest.fixture(scope="module")
def manager(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ManagerProcess]:
    # No allowed networks: the broker gets in only with the token in its gateway.url.
    with running_manager(tmp_path_factory.mktemp("manager-e2e"), allowed_addresses=()) as m:
        yield m


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory, manager: ManagerProcess) -> Iterator[BrokerProcess]:
    with running_broker(tmp_path_factory.mktemp("manager-e2e-broker") / "data",
                        gateway_broker_overrides(manager.gateway_url)) as b:
        create_topic(b.bootstrap, TOPIC, partitions=2)
        yield b


def produce_once(broker: BrokerProcess, app: str, password: str) -> Any:
    return produce_as(broker.bootstrap_for("SASL_PLAINTEXT"), app, password, TOPIC)


def test_grant_produce_quota_and_revoke_through_the_manager(manager: ManagerProcess, broker: BrokerProcess,
                                                            tmp_path: Path) -> None:
    assert manager.admin_password
    with httpx.Client(base_url=manager.url, timeout=30) as admin_http, \
            httpx.Client(base_url=manager.url, timeout=30) as user_http, \
            httpx.Client(base_url=manager.url, timeout=30) as op_http:
        admin = Session(admin_http, "admin", manager.admin_password)
        # The admin registers the cluster under the id its brokers have and creates two accounts.
        assert admin.form("/clusters", {"name": "e2e", "cluster_id": str(CLUSTER_ID),
                                        "bootstrap_servers": broker.bootstrap}).status_code == 303
        for name, role in (("alice", "user"), ("oscar", "operator")):
            r = admin.form("/accounts", {"username": name, "password": f"{name}-password-1", "role": role})
            assert r.status_code == 303, r.text
        user = Session(user_http, "alice", "alice-password-1")
        operator = Session(op_http, "oscar", "oscar-password-1")

        created = user.api("POST", "/apps", {"app_id": "orders_app", "description": "writes orders"})
        assert created.status_code == 201, created.text
        password = created.json()["password"]
        # The brokers know the application (it logs in) but it may not write yet.
        wait_for(lambda: refused(produce_once(broker, "orders_app", password)))
        wrong = produce_once(broker, "orders_app", "wrong-password")
        assert wrong is not None and not refused(wrong)

        asked = user.api("POST", "/apps/orders_app/requests",
                         {"cluster_id": CLUSTER_ID, "topic": TOPIC, "access": 2, "reason": "order events"})
        assert asked.status_code == 201, asked.text
        assert user.api("POST", f"/requests/{asked.json()['id']}/approve", {}).status_code == 403
        approved = operator.api("POST", f"/requests/{asked.json()['id']}/approve", {"reason": "ok"})
        assert approved.status_code == 200 and approved.json()["access"] == 2
        took = wait_for(lambda: produce_once(broker, "orders_app", password) is None)
        print(f"\ngrant enforced {took:.2f} s after approval (sync interval {SYNC_MS} ms)")

        # The broker's connection reports reach the application's page, the address with the
        # name this machine's resolver gives it (looked up in the background after the report).
        host = re.escape(html.escape(socket.gethostbyaddr("127.0.0.1")[0]))
        wait_for(lambda: re.search(r"<td>7</td><td>orders</td><td>producer</td>\s*<td>127\.0\.0\.1 "
                                   rf'<small class="muted">{host}</small></td>',
                                   user_http.get("/apps/orders_app").text) is not None)

        # A quota of 1 MB/s, written to the cluster through AlterClientQuotas, holds the producer.
        r = operator.api("PUT", "/apps/orders_app/quotas",
                         {"cluster_id": CLUSTER_ID, "topic": TOPIC, "producer_byte_rate": float(MB)})
        assert r.status_code == 200, r.text
        config = app_client_config(broker.bootstrap_for("SASL_PLAINTEXT"), "orders_app", password)
        producer = MeasuredProducer(config.pop("bootstrap.servers"), "any-client-id", TOPIC,
                                    {**config, "batch.size": 262144})
        try:
            producer.run(3)  # a new client may send what the windows allow at once: not measured
            rate = producer.run(10)
            print(f"orders_app on {TOPIC}: {rate:.3f} MB/s under a 1 MB/s quota set in the manager, "
                  f"{len(producer.throttles)} throttle events")
            assert 0.5 <= rate <= 1.2  # never over the quota; a slow machine may stay under it
            assert producer.throttles
        finally:
            producer.close()
        # Both rates empty: the quota leaves the cluster and the manager.
        r = operator.api("PUT", "/apps/orders_app/quotas", {"cluster_id": CLUSTER_ID, "topic": TOPIC})
        assert r.status_code == 200 and r.json() == {"producer_byte_rate": None, "consumer_byte_rate": None}
        assert user.api("GET", "/apps/orders_app").json()["quotas"] == []

        # Consume is a permission of its own: refused until granted, then the group reads.
        assert consumed(broker, password) is False
        asked = user.api("POST", "/apps/orders_app/requests", {"cluster_id": CLUSTER_ID, "topic": TOPIC, "access": 1})
        assert operator.api("POST", f"/requests/{asked.json()['id']}/approve", {}).json()["access"] == 3
        wait_for(lambda: consumed(broker, password) is True, timeout=60)

        # Produce revoked: the producer is refused; consuming still works.
        r = operator.api("POST", "/apps/orders_app/revoke", {"cluster_id": CLUSTER_ID, "topic": TOPIC, "access": 2})
        assert r.status_code == 200 and r.json()["access"] == 1
        took = wait_for(lambda: refused(produce_once(broker, "orders_app", password)))
        print(f"revoke enforced {took:.2f} s after it was made")
        assert consumed(broker, password) is True

        audit = [(r["actor"], r["action"]) for r in operator.api("GET", "/audit").json()]
        for entry in (("alice", "app.create"), ("alice", "permission.request"), ("oscar", "permission.approve"),
                      ("oscar", "quota.set"), ("oscar", "permission.revoke")):
            assert entry in audit
        assert password not in manager.log_path.read_text()
        assert password not in user_http.get("/apps/orders_app").text
        assert csrf_of(user_http.get("/apps/orders_app").text)


def consumed(broker: BrokerProcess, password: str) -> bool | None:
    """True: the application's consumer read a record of the topic; False: it was refused the
    topic; None: neither within the time."""
    config = app_client_config(broker.bootstrap_for("SASL_PLAINTEXT"), "orders_app", password)
    consumer = Consumer({**config, "group.id": f"g-{uuid.uuid4().hex[:6]}", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    try:
        consumer.subscribe([TOPIC])
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error() is None:
                return True
            if msg.error().code() == KafkaError.TOPIC_AUTHORIZATION_FAILED:
                return False
        return None
    finally:
        consumer.close()


def test_gateway_refuses_callers_without_the_token(manager: ManagerProcess, broker: BrokerProcess) -> None:
    body = {"clusterId": CLUSTER_ID, "start": 0, "end": 0}
    r = httpx.post(manager.url + "/gateway/api/v1/security/users", json=body)
    assert r.status_code == 403 and r.json()["code"] == -1
    r = httpx.post(manager.gateway_url + "/api/v1/security/users", json=body)  # the token as Basic password
    assert r.status_code == 200 and r.json()["code"] == 0
    assert "gateway call from 127.0.0.1 refused" in manager.log_path.read_text()


def test_a_super_user_application_passes_every_permission_check(manager: ManagerProcess,
                                                                 broker: BrokerProcess) -> None:
    """An admin makes an application a super user (Logi-Kafka's userType 1): with no permission
    at all it writes; made normal again, it is refused."""
    assert manager.admin_password
    with httpx.Client(base_url=manager.url, timeout=30) as admin_http:
        admin = Session(admin_http, "admin", manager.admin_password)
        created = admin.api("POST", "/apps", {"app_id": "root_app", "description": "platform tooling"})
        assert created.status_code == 201, created.text
        password = created.json()["password"]
        wait_for(lambda: refused(produce_once(broker, "root_app", password)))

        r = admin.form("/apps/root_app/super-user", {"super_user": "yes"})
        assert r.status_code == 303, r.text
        assert 'id="super-user"' in admin_http.get("/apps/root_app").text
        took = wait_for(lambda: produce_once(broker, "root_app", password) is None)
        print(f"\nsuper user enforced {took:.2f} s after it was set")

        r = admin.api("PUT", "/apps/root_app/super-user", {"super_user": False})
        assert r.status_code == 200 and r.json()["super_user"] is False
        wait_for(lambda: refused(produce_once(broker, "root_app", password)))

        # Only admins; bad values change nothing.
        assert admin.form("/apps/root_app/super-user", {"super_user": "maybe"}).status_code == 400
        assert admin.api("PUT", "/apps/root_app/super-user", {"super_user": "sure"}).status_code == 422
        r = admin.form("/accounts", {"username": "olga", "password": "olga-password-1", "role": "operator"})
        assert r.status_code == 303, r.text
        with httpx.Client(base_url=manager.url, timeout=30) as op_http:
            operator = Session(op_http, "olga", "olga-password-1")
            assert operator.api("PUT", "/apps/root_app/super-user", {"super_user": True}).status_code == 403
            assert 'id="super-user-on"' not in op_http.get("/apps/root_app").text
        assert admin.api("GET", "/apps/root_app").json()["super_user"] is False
        actions = [(r["actor"], r["action"], r["detail"]) for r in admin.api("GET", "/audit").json()
                   if r["target"] == "root_app" and r["action"] == "app.super-user"]
        assert [(a, d) for a, _, d in actions] == [("admin", '{"super_user": false}'), ("admin", '{"super_user": true}')]
