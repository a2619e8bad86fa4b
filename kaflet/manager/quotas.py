"""Writing an application's quota on a topic to a cluster: Kafka's client-id quota entity
``<appId>.<topic>`` (``producer_byte_rate`` / ``consumer_byte_rate``) through AlterClientQuotas.

A kaflet broker with the gateway on reads that entity as the application's quota on the topic
(kaflet/gateway/quotas.py); Logi-Kafka reads the same ZooKeeper node the request writes. The
Kafka client libraries have no ClientQuotas call, so the request goes over kaflet's own
connection (kaflet.network.raw_connection, secured as the cluster's admin settings say).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from kaflet.network.raw_connection import RawConnectionError, connect
from kaflet.protocol.api_keys import ApiKey
from kaflet.protocol.client_quotas import ALTER_CLIENT_QUOTAS_VERSION, alter_refusal, alter_request

PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"


class QuotaWriteError(Exception):
    """The cluster could not be reached or refused the quota; the message says why."""


@dataclass(frozen=True)
class ClusterConnection:
    """How the manager reaches a cluster as its administrator."""

    bootstrap_servers: str
    client_config: Mapping[str, Any]


class QuotaWriter(Protocol):
    """Sets (a rate) or removes (None) the two byte rates of ``<appId>.<topic>`` on a cluster."""

    def write(self, cluster: ClusterConnection, app_id: str, topic: str,
              producer_byte_rate: float | None, consumer_byte_rate: float | None) -> None:
        ...


def quota_entity_name(app_id: str, topic: str) -> str:
    """The client id Logi-Kafka's brokers read as the application's quota on the topic."""
    return f"{app_id}.{topic}"


class AdminQuotaWriter:
    """AlterClientQuotas to the first bootstrap server that answers."""

    def __init__(self, timeout_s: float = 10.0) -> None:
        self.timeout_s = timeout_s

    def write(self, cluster: ClusterConnection, app_id: str, topic: str,
              producer_byte_rate: float | None, consumer_byte_rate: float | None) -> None:
        rates = {PRODUCER_BYTE_RATE: producer_byte_rate, CONSUMER_BYTE_RATE: consumer_byte_rate}
        request = alter_request("client-id", quota_entity_name(app_id, topic),
                                {k: float(v) for k, v in rates.items() if v is not None},
                                [k for k, v in rates.items() if v is None])
        errors = []
        for server in [s.strip() for s in cluster.bootstrap_servers.split(",") if s.strip()]:
            host, _, port = server.rpartition(":")
            try:
                conn = connect(host, int(port), cluster.client_config, self.timeout_s)
            except (RawConnectionError, ValueError) as exc:
                errors.append(f"{server}: {exc}")
                continue  # unreachable: another bootstrap server may answer
            try:
                with conn:
                    refusal = alter_refusal(conn.request(ApiKey.ALTER_CLIENT_QUOTAS, ALTER_CLIENT_QUOTAS_VERSION,
                                                         request))
            except (OSError, ValueError) as exc:
                errors.append(f"{server}: {exc}")
                continue
            if refusal:  # the broker answered and refused
                raise QuotaWriteError(f"{server} refused the quota: {refusal}")
            return
        raise QuotaWriteError("; ".join(errors) or f"no bootstrap server in {cluster.bootstrap_servers!r}")
