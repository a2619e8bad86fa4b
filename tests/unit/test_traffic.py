"""Traffic accounting (kaflet/server/traffic.py): which requests are counted and what counts."""

from __future__ import annotations

from typing import Any

from kaflet.protocol.api_keys import ApiKey
from kaflet.protocol.errors import ErrorCode
from kaflet.protocol.fetch import PartitionFetchData
from kaflet.protocol.header import RequestHeader
from kaflet.replication.append import AppendEntry, PartitionAppendResult
from kaflet.security.principal import KafkaPrincipal
from kaflet.server import traffic
from kaflet.server.fetch_session import CachedPartition
from kaflet.server.services import Accounting


class _Report:
    def __init__(self) -> None:
        self.notes: list[tuple[Any, ...]] = []

    def note(self, *args: Any) -> None:
        self.notes.append(args)


def _accounting(track: bool, report: Any = None) -> Accounting:
    no_quotas: Any = None  # the counting never asks the quotas
    return Accounting(None, no_quotas, track_traffic=track, session_report=report)


def test_only_produce_and_fetch_are_counted_and_only_when_tracked() -> None:
    assert traffic.start(_accounting(True), ApiKey.PRODUCE) == {}
    assert traffic.start(_accounting(True), ApiKey.FETCH) == {}
    assert traffic.start(_accounting(True), ApiKey.METADATA) is None
    assert traffic.start(_accounting(False), ApiKey.FETCH) is None


def test_produce_counts_the_record_bytes_of_the_partitions_appended() -> None:
    counted: dict[str, int] = {}
    entries = [AppendEntry("a", 0, memoryview(b"x" * 10)), AppendEntry("a", 1, memoryview(b"x" * 5)),
               AppendEntry("b", 0, memoryview(b"x" * 7))]
    results = [PartitionAppendResult(), PartitionAppendResult(), PartitionAppendResult(ErrorCode.NOT_LEADER_OR_FOLLOWER)]
    traffic.count_produced(counted, entries, results)
    assert counted == {"a": 15}
    traffic.count_produced(None, entries, results)  # not tracked: nothing to do


def test_fetch_counts_each_topic_read_even_without_data() -> None:
    counted: dict[str, int] = {}
    read = [(CachedPartition("a", "a", (0, -1, 0, -1, -1, 100)), PartitionFetchData(0, records=[b"x" * 4])),
            (CachedPartition("b", "b", (0, -1, 0, -1, -1, 100)), PartitionFetchData(0)),
            (CachedPartition(b"\x01" * 16, None, (0, -1, 0, -1, -1, 100)), PartitionFetchData(0))]
    traffic.count_fetched(counted, read)
    assert counted == {"a": 4, "b": 0}


def test_the_session_report_hears_of_the_topics_used() -> None:
    report = _Report()
    conn: Any = type("Conn", (), {"principal": KafkaPrincipal.user("alice"), "peer": ("10.0.0.7", 4000)})()
    header = RequestHeader(ApiKey.FETCH, 12, 7, "app", False, 0)
    traffic.report(_accounting(True, report), {"a": 4, "b": 0}, header, conn)
    traffic.report(_accounting(True, report), {}, header, conn)
    assert report.notes == [(ApiKey.FETCH, 12, "alice", "10.0.0.7", "app", ["a", "b"])]
