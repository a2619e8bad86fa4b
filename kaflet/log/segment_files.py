"""The broker's bound on open segment files: a least-recently-used set of segments whose
``.log`` is open.

Kafka keeps one descriptor per segment for as long as the segment exists; with tens of
thousands of partitions that alone exhausts a descriptor limit of the same size.  kaflet opens a
segment's ``.log`` on demand and keeps at most ``capacity`` of them open (``log.segment.open.files.max``):
opening another closes the least recently used one.  Busy partitions stay open (a hit costs a
dictionary move); an idle one is reopened on its next append or read.  A file closed here stays
open for as long as a fetch response or the cleaner still holds it (see ``segment.SharedFile``).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Protocol


class OpenSegment(Protocol):
    """What the cache closes: a segment that drops its open file when asked."""

    def release_file(self) -> None: ...


class SegmentFileCache:
    """At most ``capacity`` segments with an open ``.log``; the least recently used closes first."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"segment file cache capacity must be at least 1, not {capacity}")
        self.capacity = capacity
        self._open: OrderedDict[OpenSegment, None] = OrderedDict()
        #: Files closed to make room, and files opened again after that (for the metrics and tests).
        self.evictions = 0
        self.opens = 0

    def __len__(self) -> int:
        return len(self._open)

    def opened(self, segment: OpenSegment) -> None:
        """``segment`` just opened its file: make room for it."""
        self.opens += 1
        self._open[segment] = None
        self._open.move_to_end(segment)
        while len(self._open) > self.capacity:
            evicted, _ = self._open.popitem(last=False)
            self.evictions += 1
            evicted.release_file()

    def touch(self, segment: OpenSegment) -> None:
        """``segment``'s file was used: it is the most recently used now."""
        try:
            self._open.move_to_end(segment)
        except KeyError:
            pass  # closed by a log-creating thread meanwhile: the caller's handle is still good

    def discard(self, segment: OpenSegment) -> None:
        """``segment`` closed its file itself."""
        self._open.pop(segment, None)
