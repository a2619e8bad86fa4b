"""The session report: which connections produced to and fetched from each topic.

Every session.report.ms the broker POSTs to the management service's
``/api/v1/heartbeat/survive-user?clusterId=&brokerId=`` the body
``{"produce": {topic: [conn, ...]}, "fetch": {topic: [conn, ...]}}`` where a connection is
``user#ip#clientVersion#clientId``. The service shows them as the topic's live clients (seen in
the last 20 minutes) and refuses to delete a topic or an application that still has some.

Each report holds the connections seen since the previous one. A report the service does not
take is merged into the next, so a service that is down loses nothing but freshness; its outage
is logged once when it starts, summed up every minute while it lasts, and once when it ends
(kaflet/util/outage_log.py), not at every report.

Clients do not say which version they are; the version of the Produce or Fetch request they
send does (a client sends the highest version it and the broker both know), so the report names
the oldest Kafka release whose Java client sends that version.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from kaflet.gateway.model import ManagementService, ManagementServiceError
from kaflet.gateway.quotas import app_id
from kaflet.protocol.api_keys import ApiKey
from kaflet.util.outage_log import OutageLog

log = logging.getLogger("kaflet.gateway.session_report")

PATH = "/api/v1/heartbeat/survive-user"
PRODUCE, FETCH = "produce", "fetch"
UNKNOWN = "unknown"

# The Kafka release that introduced each request version (Kafka's message definitions by tag).
_PRODUCE_VERSIONS = {3: "0.11.0", 4: "1.0", 5: "1.1", 6: "2.0", 7: "2.1", 8: "2.4", 9: "2.8", 10: "3.7", 11: "3.8"}
_FETCH_VERSIONS = {4: "0.11.0", 5: "0.11.0", 6: "1.0", 7: "1.1", 8: "2.0", 9: "2.1", 10: "2.1", 11: "2.3",
                   12: "2.7", 13: "3.1", 14: "3.5", 15: "3.5", 16: "3.7"}


def guess_client_version(api_key: int, api_version: int) -> str:
    """The oldest Kafka release whose Java client sends this Produce / Fetch version, or "unknown"."""
    table = _PRODUCE_VERSIONS if api_key == ApiKey.PRODUCE else _FETCH_VERSIONS if api_key == ApiKey.FETCH else {}
    return table.get(api_version, UNKNOWN)


def connection_key(user: str, ip: str, client_version: str, client_id: str | None) -> str:
    """``user#ip#clientVersion#clientId`` as the management service splits it."""
    return f"{user}#{ip}#{client_version}#{client_id or UNKNOWN}"


class SessionReport:
    """Collects the connections per topic and direction, and reports them periodically."""

    def __init__(self, cluster_id: int, broker_id: Callable[[], int], period_ms: int) -> None:
        self.cluster_id = cluster_id
        self.broker_id = broker_id
        self.period_ms = period_ms
        self._seen: dict[str, dict[str, set[str]]] = {PRODUCE: {}, FETCH: {}}
        #: Reports the service took (for the broker's log and tests).
        self.sent = 0
        self.outage = OutageLog(log, "session report to the management service")

    def note(self, api_key: int, api_version: int, principal: str, ip: str, client_id: str | None,
             topics: list[str]) -> None:
        """A Produce (or a consumer's Fetch) of `topics` on a connection."""
        kind = PRODUCE if api_key == ApiKey.PRODUCE else FETCH
        key = connection_key(app_id(principal, self.cluster_id), ip, guess_client_version(api_key, api_version),
                             client_id)
        by_topic = self._seen[kind]
        for topic in topics:
            conns = by_topic.get(topic)
            if conns is None:
                by_topic[topic] = {key}
            else:
                conns.add(key)

    def take(self) -> dict[str, dict[str, list[str]]]:
        """The report body of the connections seen since the last take (which it forgets)."""
        seen, self._seen = self._seen, {PRODUCE: {}, FETCH: {}}
        return {kind: {topic: sorted(conns) for topic, conns in by_topic.items()} for kind, by_topic in seen.items()}

    def _give_back(self, body: dict[str, dict[str, list[str]]]) -> None:
        for kind, by_topic in body.items():
            for topic, conns in by_topic.items():
                self._seen[kind].setdefault(topic, set()).update(conns)

    async def send(self, service: ManagementService) -> bool:
        """POST one report; False (and the report kept for the next) when the service fails."""
        body = self.take()
        query = {"clusterId": self.cluster_id, "brokerId": self.broker_id()}
        try:
            await service.post(PATH, body, query)
        except ManagementServiceError as exc:
            self._give_back(body)
            self.outage.failed(exc, "the connections are kept for the next report")
            return False
        self.sent += 1
        self.outage.succeeded()
        return True

    async def run(self, service: ManagementService, stop: asyncio.Event) -> None:
        """Report every period until `stop` is set."""
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), self.period_ms / 1000)
                return
            except TimeoutError:
                pass
            await self.send(service)
