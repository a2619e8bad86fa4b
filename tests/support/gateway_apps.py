"""Applications logging in over SASL/PLAIN to a broker with the gateway on (traffic tests).

The users come from the listener's JAAS config, so these tests do not depend on the gateway's
own authentication; gateway.url points where nothing answers (nothing here calls it).
"""

from __future__ import annotations

from typing import Any

from kaflet.cli.broker_process import BrokerProcess
from tests.support.quotas import MeasuredProducer

PASSWORDS = {"app_quota": "pw-quota", "app_free": "pw-free"}
JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" password="admin-secret" '
        'user_admin="admin-secret" ' + " ".join(f'user_{u}="{p}"' for u, p in PASSWORDS.items()) + ";")

#: Broker settings: a PLAINTEXT listener for admin work, a SASL_PLAINTEXT one for the apps.
OVERRIDES = {
    "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
    "sasl.enabled.mechanisms": "PLAIN",
    "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
    "gateway.url": "http://127.0.0.1:9/gateway",
    "cluster.id": "7",
    "max.throttle.time.ms": "2000",
    # 3 windows of 1 s keep a greedy client's averages within a few percent (test_quotas.py).
    "quota.window.num": "3",
    "quota.window.size.seconds": "1",
}


def sasl(broker: BrokerProcess, app: str) -> dict[str, Any]:
    """Client settings to log in to `broker` as `app`."""
    return {"bootstrap.servers": broker.bootstrap_for("SASL_PLAINTEXT"), "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN", "sasl.username": app, "sasl.password": PASSWORDS[app]}


def app_producer(broker: BrokerProcess, app: str, topic: str, client_id: str = "rdkafka") -> MeasuredProducer:
    """A MeasuredProducer logged in as `app`. Batches of 256 KB: a request (a batch per
    partition) stays well under what a quota allows in max.throttle.time.ms, so the bound does
    not let more through than the quota."""
    config = sasl(broker, app)
    return MeasuredProducer(config.pop("bootstrap.servers"), client_id, topic, {**config, "batch.size": 262144})
