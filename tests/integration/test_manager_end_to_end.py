"""The management service end to end: a `kaflet manager` process and a kaflet broker process
whose gateway.url points at it (the gateway token in the URL), with confluent-kafka clients
logging in over SASL/PLAIN as `<clusterId>.<appId>`.

A user creates an application and asks for produce on a topic; an operator approves; the
producer writes. An operator sets a quota (AlterClientQuotas to the cluster): the producer's
rate is held to it. The broker's connection reports show up on the application's page. The
permission is revoked: the producer is refused.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from confluent_kafka import KafkaError, Producer

from tests.support.broker_process import BrokerProcess, running_broker
from tests.support.manager import ManagerProcess, Session, csrf_of, running_manager
from tests.support.quotas import MB, MeasuredProducer
from tests.support.topics import create_topic

CLUSTER_ID = 7
SYNC_MS = 300
TOPIC = "orders"
JAAS = ('com.didichuxing.datachannel.kafka.security.sasl.plain.PlainLoginModule required '
        'username="admin" password="admin-secret";')


@pytest.fixture(scope="module")
def manager(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ManagerProcess]:
    with running_manager(tmp_path_factory.mktemp("manager-e2e")) as m:
        yield m


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory, manager: ManagerProcess) -> Iterator[BrokerProcess]:
    overrides = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        "authorizer.class.name": "com.didichuxing.datachannel.kafka.security.authorizer.DidiAuthorizer",
        "gateway.url": manager.gateway_url,
        "cluster.id": str(CLUSTER_ID),
        "gateway.sync.interval.ms": str(SYNC_MS),
        "gateway.default.users": "admin:admin-secret:true",
        "session.report.ms": "1000",
        "max.throttle.time.ms": "2000",
        "quota.window.num": "3",
        "quota.window.size.seconds": "1",
    }
    with running_broker(tmp_path_factory.mktemp("manager-e2e-broker") / "data", overrides) as b:
        create_topic(b.bootstrap, TOPIC, partitions=2)
        yield b


def sasl_config(broker: BrokerProcess, app: str, password: str) -> dict[str, Any]:
    return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
            "sasl.username": f"{CLUSTER_ID}.{app}", "sasl.password": password}


def produce_once(broker: BrokerProcess, app: str, password: str) -> Any:
    """The error of one produce as the application (None: acknowledged)."""
    producer = Producer({"bootstrap.servers": broker.bootstrap_for("SASL_PLAINTEXT"),
                         **sasl_config(broker, app, password), "message.timeout.ms": 5000, "retries": 0})
    errors: list[Any] = []
    producer.produce(TOPIC, b"v", partition=0, on_delivery=lambda err, msg: errors.append(err))
    producer.flush(10)
    return errors[0] if errors else KafkaError(KafkaError._MSG_TIMED_OUT)


def wait_for(check: Any, timeout: float = 30.0) -> float:
    began = time.monotonic()
    while not check():
        if time.monotonic() - began > timeout:
            raise AssertionError("condition not met in time")
        time.sleep(0.2)
    return time.monotonic() - began


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
        wait_for(lambda: (err := produce_once(broker, "orders_app", password)) is not None
                 and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED)
        assert produce_once(broker, "orders_app", "wrong-password").code() != KafkaError.TOPIC_AUTHORIZATION_FAILED

        asked = user.api("POST", "/apps/orders_app/requests",
                         {"cluster_id": CLUSTER_ID, "topic": TOPIC, "access": 2, "reason": "order events"})
        assert asked.status_code == 201, asked.text
        assert user.api("POST", f"/requests/{asked.json()['id']}/approve", {}).status_code == 403
        approved = operator.api("POST", f"/requests/{asked.json()['id']}/approve", {"reason": "ok"})
        assert approved.status_code == 200 and approved.json()["access"] == 2
        took = wait_for(lambda: produce_once(broker, "orders_app", password) is None)
        print(f"\ngrant enforced {took:.2f} s after approval (sync interval {SYNC_MS} ms)")

        # The broker's connection reports reach the application's page.
        wait_for(lambda: re.search(r"<td>7</td><td>orders</td><td>producer</td>\s*<td>127\.0\.0\.1</td>",
                                   user_http.get("/apps/orders_app").text) is not None)

        # A quota of 1 MB/s, written to the cluster through AlterClientQuotas, holds the producer.
        r = operator.api("PUT", "/apps/orders_app/quotas",
                         {"cluster_id": CLUSTER_ID, "topic": TOPIC, "producer_byte_rate": float(MB)})
        assert r.status_code == 200, r.text
        producer = MeasuredProducer(broker.bootstrap_for("SASL_PLAINTEXT"), "any-client-id", TOPIC,
                                    {**sasl_config(broker, "orders_app", password), "batch.size": 262144})
        try:
            producer.run(3)  # a new client may send what the windows allow at once: not measured
            rate = producer.run(10)
            print(f"orders_app on {TOPIC}: {rate:.3f} MB/s under a 1 MB/s quota set in the manager, "
                  f"{len(producer.throttles)} throttle events")
            assert 0.5 <= rate <= 1.2  # never over the quota; a slow machine may stay under it
            assert producer.throttles
        finally:
            producer.close()

        # Revoked: the producer is refused.
        r = operator.api("POST", "/apps/orders_app/revoke", {"cluster_id": CLUSTER_ID, "topic": TOPIC, "access": 2})
        assert r.status_code == 200 and r.json()["access"] == 0
        took = wait_for(lambda: (err := produce_once(broker, "orders_app", password)) is not None
                        and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED)
        print(f"revoke enforced {took:.2f} s after it was made")

        audit = [(r["actor"], r["action"]) for r in operator.api("GET", "/audit").json()]
        for entry in (("alice", "app.create"), ("alice", "permission.request"), ("oscar", "permission.approve"),
                      ("oscar", "quota.set"), ("oscar", "permission.revoke")):
            assert entry in audit
        assert password not in manager.log_path.read_text()
        assert password not in user_http.get("/apps/orders_app").text
        assert csrf_of(user_http.get("/apps/orders_app").text)


def test_gateway_refuses_callers_without_token_from_other_addresses(manager: ManagerProcess) -> None:
    # 127.0.0.1 is allowed; the token is not needed from there.
    body = {"clusterId": CLUSTER_ID, "start": 0, "end": 0}
    r = httpx.post(manager.url + "/gateway/api/v1/security/users", json=body)
    assert r.status_code == 200 and r.json()["code"] == 0
