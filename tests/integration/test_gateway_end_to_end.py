"""The gateway end to end: a broker process whose users, ACLs and disabled partitions come from
a (scripted) management service, with Logi-Kafka's login module and authorizer, and real
clients. A user created in the service can log in; revoking its write permission in the
service stops its producer within about one sync interval plus one commit."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient

from tests.support.broker_process import BrokerProcess, running_broker
from tests.support.management_service import ScriptedManagementService, scripted_management_service
from tests.support.topics import create_topic

SYNC_MS = 300
JAAS = ('com.didichuxing.datachannel.kafka.security.sasl.plain.PlainLoginModule required '
        'username="admin" password="admin-secret";')


@pytest.fixture(scope="module")
def service() -> Iterator[ScriptedManagementService]:
    with scripted_management_service() as svc:
        svc.add_user("app_a", "pw-a", timestamp=1000)
        svc.add_acl("orders", "app_a", 3, timestamp=1000)
        yield svc


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory, service: ScriptedManagementService) -> Iterator[BrokerProcess]:
    overrides = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        "authorizer.class.name": "com.didichuxing.datachannel.kafka.security.authorizer.DidiAuthorizer",
        "gateway.url": service.url,
        "cluster.id": "0",
        "gateway.sync.interval.ms": str(SYNC_MS),
        "gateway.default.users": "admin:admin-secret:true",
    }
    with running_broker(tmp_path_factory.mktemp("gateway-e2e") / "data", overrides) as b:
        create_topic(b.bootstrap, "orders", partitions=2)
        yield b


def produce(broker: BrokerProcess, app: str, password: str, topic: str = "orders") -> Any:
    """The error of one produce as ``0.<app>`` (None: acknowledged)."""
    producer = Producer({"bootstrap.servers": broker.bootstrap_for("SASL_PLAINTEXT"),
                         "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                         "sasl.username": f"0.{app}", "sasl.password": password,
                         "message.timeout.ms": 5000, "retries": 0})
    errors: list[Any] = []
    producer.produce(topic, b"v", partition=0, on_delivery=lambda err, msg: errors.append(err))
    producer.flush(10)
    return errors[0] if errors else KafkaError(KafkaError._MSG_TIMED_OUT)


def wait_for(check: Any, timeout: float = 30.0) -> float:
    began = time.monotonic()
    while not check():
        if time.monotonic() - began > timeout:
            raise AssertionError("condition not met in time")
        time.sleep(0.1)
    return time.monotonic() - began


def test_a_user_of_the_service_produces_until_its_write_is_revoked(
        broker: BrokerProcess, service: ScriptedManagementService) -> None:
    assert produce(broker, "app_a", "pw-a") is None
    service.add_acl("orders", "app_a", 2, operation=2)  # the revoke row carries the removed bit
    took = wait_for(lambda: produce(broker, "app_a", "pw-a") is not None)
    err = produce(broker, "app_a", "pw-a")
    assert err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    print(f"revoke enforced {took:.2f} s after it was written (sync interval {SYNC_MS} ms)")


def test_a_user_created_in_the_service_can_log_in_and_a_deleted_one_cannot(
        broker: BrokerProcess, service: ScriptedManagementService) -> None:
    service.add_user("app_b", "pw-b")
    service.add_acl("orders", "app_b", 2)
    wait_for(lambda: produce(broker, "app_b", "pw-b") is None)
    service.add_user("app_b", "pw-b", operation=2)
    wait_for(lambda: produce(broker, "app_b", "pw-b") is not None)


def test_disabled_partitions_from_the_service_are_hidden(broker: BrokerProcess,
                                                        service: ScriptedManagementService) -> None:
    def partitions() -> int:
        md = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics("orders", timeout=10)
        return len(md.topics["orders"].partitions)

    assert partitions() == 2
    service.add_partitions("orders", "1")
    wait_for(lambda: partitions() == 1)
