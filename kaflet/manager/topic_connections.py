"""Live client connections of each topic, from the brokers' session reports.

:func:`rows_from_heartbeat` turns one report (``POST /gateway/api/v1/heartbeat/survive-user``)
into rows to store, and :func:`connections_by_topic` turns stored rows back into the live
connections of each topic, as Logi-KafkaManager shows them.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

#: How long a reported connection counts as live (Logi-KafkaManager's TOPIC_CONNECTION_LATEST_TIME_MS).
CONNECTION_WINDOW_MS = 20 * 60 * 1000


@dataclass(frozen=True)
class ConnectionRow:
    """One reported connection, as stored (Logi-KafkaManager's topic_connections row; the
    field names are that table's columns, so a database model with them fits
    :class:`ConnectionLike` too).

    Its identity is (app_id, cluster_id, topic_name, type, ip, client_version); a later report of
    the same connection only moves ``create_time``, which therefore means "last seen".
    """

    app_id: str
    cluster_id: int
    topic_name: str
    type: str  # "produce" or "fetch", as the broker reports it
    ip: str
    client_version: str
    create_time: int
    client_id: str | None = None

    @property
    def key(self) -> tuple[str, int, str, str, str, str]:
        return (self.app_id, self.cluster_id, self.topic_name, self.type, self.ip, self.client_version)


class ConnectionLike(Protocol):
    """What :func:`connections_by_topic` reads of a stored row (a ConnectionRow or a DB model)."""

    @property
    def app_id(self) -> str: ...
    @property
    def topic_name(self) -> str: ...
    @property
    def type(self) -> str: ...
    @property
    def ip(self) -> str: ...
    @property
    def client_version(self) -> str: ...
    @property
    def create_time(self) -> int: ...


REPORT_KINDS = ("produce", "fetch")


def rows_from_heartbeat(body: Any, cluster_id: int, received_ms: int) -> list[ConnectionRow]:
    """The rows of one session report ``{"produce"|"fetch": {topic: ["app#ip#version[#clientId]"]}}``.

    Raises ValueError when the body is not that shape (the contract answers code -1 "fail").
    An entry with fewer than three ``#`` parts names no connection and is skipped, and
    duplicates within the report collapse to one row.
    """
    if body is None or body == {}:
        return []
    if not isinstance(body, Mapping):
        raise ValueError("the report is not a JSON object")
    rows: dict[tuple[str, int, str, str, str, str], ConnectionRow] = {}
    for kind, by_topic in body.items():
        if not isinstance(kind, str) or not isinstance(by_topic, Mapping):
            raise ValueError(f"report section {kind!r} is not an object of topics")
        for topic, entries in by_topic.items():
            if not isinstance(topic, str) or not isinstance(entries, list) \
                    or not all(isinstance(e, str) for e in entries):
                raise ValueError(f"connections of topic {topic!r} are not a list of strings")
            for entry in entries:
                parts = entry.split("#")
                if len(parts) < 3:
                    continue
                client_id = parts[3] if len(parts) > 3 and parts[3] else None
                row = ConnectionRow(parts[0], cluster_id, topic, kind, parts[1], parts[2], received_ms, client_id)
                rows[row.key] = row
    return list(rows.values())


@dataclass(frozen=True)
class TopicConnection:
    """A live client of a topic, for display (``role`` producer or consumer)."""

    app_id: str
    ip: str
    role: str
    client_version: str
    client_id: str | None
    last_seen_ms: int


_UNKNOWN_VERSIONS = ("-1", "unknown", "")


def connections_by_topic(rows: Iterable[ConnectionLike], now_ms: int, *, window_ms: int = CONNECTION_WINDOW_MS,
                         exclude_hosts: Iterable[str] = ()) -> dict[str, list[TopicConnection]]:
    """The live connections of each topic from stored report rows, as the console lists them.

    Rows older than ``window_ms`` are gone; addresses in ``exclude_hosts`` (the cluster's own
    brokers, whose replica fetches are not clients) are left out; when a client (app, ip,
    role) is known with a version, its rows of unknown version are dropped.
    """
    excluded = set(exclude_hosts)
    live: dict[str, dict[tuple[str, str, str, str], TopicConnection]] = {}
    for row in rows:
        if now_ms - row.create_time > window_ms or row.ip in excluded:
            continue
        role = "producer" if row.type == "produce" else "consumer" if row.type == "fetch" else row.type
        conn = TopicConnection(row.app_id, row.ip, role, row.client_version, getattr(row, "client_id", None),
                               row.create_time)
        key = (row.app_id, row.ip, role, row.client_version)
        seen = live.setdefault(row.topic_name, {})
        old = seen.get(key)
        if old is None or old.last_seen_ms < conn.last_seen_ms:
            seen[key] = conn
    out: dict[str, list[TopicConnection]] = {}
    for topic, by_key in live.items():
        known = {(c.app_id, c.ip, c.role) for c in by_key.values() if c.client_version not in _UNKNOWN_VERSIONS}
        kept = [c for c in by_key.values()
                if c.client_version not in _UNKNOWN_VERSIONS or (c.app_id, c.ip, c.role) not in known]
        out[topic] = sorted(kept, key=lambda c: (c.role, c.app_id, c.ip, c.client_version))
    return dict(sorted(out.items()))


def now_ms() -> int:
    return int(time.time() * 1000)
