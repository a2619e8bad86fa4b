"""Traffic accounting: the bytes per topic a Produce or a Fetch moved, in one place.

The gateway's per-topic quotas (quota/enforcement.py), its session report (which topics each
client used) and the per-application metrics (metrics/stats.py) read these counts from
``RequestContext.traffic`` right after the handler. The broker counts only when something reads
them (``Accounting.track_traffic``); otherwise ``traffic`` stays None and nothing is counted.

What is counted: for a Produce, the record bytes of each partition appended (as the request
carried them); for a consumer's Fetch, the record bytes of each partition read as they go into
the response (a topic read without data counts with 0, so the report still names it). A
follower's fetch is replication, not a client's traffic, and is not counted.
"""

from __future__ import annotations

from collections.abc import Sequence

from kaflet.network.connection import Connection
from kaflet.protocol.api_keys import ApiKey
from kaflet.protocol.errors import ErrorCode
from kaflet.protocol.fetch import records_size
from kaflet.protocol.header import RequestHeader
from kaflet.replication.append import AppendEntry, PartitionAppendResult
from kaflet.server.fetch_session import ResponsePartition
from kaflet.server.services import Accounting

_COUNTED_APIS = (ApiKey.PRODUCE, ApiKey.FETCH)


def start(accounting: Accounting, api_key: int) -> dict[str, int] | None:
    """An empty count for a request whose traffic the broker tracks; None: not counted."""
    return {} if accounting.track_traffic and api_key in _COUNTED_APIS else None


def count_produced(traffic: dict[str, int] | None, entries: Sequence[AppendEntry],
                   appended: Sequence[PartitionAppendResult]) -> None:
    """A Produce's record bytes per topic, of the entries appended without an error."""
    if traffic is None:
        return
    for entry, result in zip(entries, appended, strict=True):
        if result.error == ErrorCode.NONE:
            traffic[entry.topic] = traffic.get(entry.topic, 0) + len(entry.records)


def count_fetched(traffic: dict[str, int] | None, read: Sequence[ResponsePartition]) -> None:
    """A consumer's Fetch: the record bytes per topic of the partitions read."""
    if traffic is None:
        return
    for cp, data in read:
        name = cp.topic
        if name is not None:
            traffic[name] = traffic.get(name, 0) + (records_size(data.records) if data.records else 0)


def report(accounting: Accounting, traffic: dict[str, int] | None, header: RequestHeader, conn: Connection) -> None:
    """Tell the gateway's session report which topics the request used (when there is one)."""
    session_report = accounting.session_report
    if traffic and session_report is not None:
        session_report.note(header.api_key, header.api_version, conn.principal.name, conn.peer[0],
                            header.client_id, list(traffic))
