"""DescribeGroups (key 15) v5 responses read for their member counts, hand-written.

The active controller describes every group of every coordinator at each scrape of
kafka_exporter's series (kaflet/metrics/cluster_view.py), which shows only how many members a
group has. The generic codec built an object per group and per member and kept them until
every coordinator had answered; this reads each group's error code, id and member count and
skips the rest (member ids, hosts, metadata and assignments). Requests and the broker's own
answers stay with the generic codec; tests/unit/test_list_offsets_codec.py checks this reader
against answers the generic codec wrote.
"""

from __future__ import annotations

from typing import NamedTuple

from kaflet.protocol.primitives import Reader

VERSION = 5


class GroupMembers(NamedTuple):
    """A described group: its error code, id and number of members."""

    error_code: int
    group_id: str
    members: int


def _skip_compact(r: Reader) -> None:
    """Skip a compact string or compact bytes field (null included)."""
    n = r.uvarint() - 1
    if n > 0:
        r.raw(n)


def decode_member_counts(body: memoryview | bytes) -> list[GroupMembers]:
    """The groups of a v5 response body with their member counts; raises DecodeError."""
    r = Reader(body)
    r.int32()  # the throttle time: the caller sends a few requests a scrape
    groups = []
    # Bounds: a group is at least 12 bytes, a member 7.
    for _ in range(r.compact_array_len(12)):
        error = r.int16()
        group_id = r.compact_string()
        for _ in range(3):  # state, protocol type, protocol data
            _skip_compact(r)
        members = r.compact_array_len(7)
        for _ in range(members):
            for _ in range(6):  # member id, instance id, client id, host, metadata, assignment
                _skip_compact(r)
            r.skip_tagged_fields()
        r.int32()  # authorized operations
        r.skip_tagged_fields()
        groups.append(GroupMembers(error, group_id, members))
    r.skip_tagged_fields()
    return groups
