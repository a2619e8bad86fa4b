"""The log cleaner's key -> latest offset map, bounded by ``log.cleaner.dedupe.buffer.size``.

Kafka's SkimpyOffsetMap stores a 16-byte MD5 of each key plus an 8-byte offset in a fixed
buffer, so the buffer size decides how many keys one cleaning pass can cover.  A Python dict
cannot live in a fixed buffer, so the bound is kept as a *count* computed the way Kafka computes
its slots (buffer x load factor / 24 bytes per entry, split over the cleaner threads): the same
buffer size covers the same number of keys as in Kafka.  Keys up to 16 bytes are stored as they
are (exact, and cheaper than hashing); longer keys are reduced to a 16-byte BLAKE2b digest so a
huge key cannot blow up memory, with the same (negligible) collision risk Kafka accepts.
"""

from __future__ import annotations

import hashlib

#: Bytes Kafka spends per entry: a 16-byte hash and an 8-byte offset.
BYTES_PER_ENTRY = 24
_DIGEST_SIZE = 16


def map_capacity(dedupe_buffer_size: int, load_factor: float = 0.9, threads: int = 1) -> int:
    """How many keys a map may hold for this buffer size, as Kafka sizes its offset map."""
    per_thread = dedupe_buffer_size // max(1, threads)
    return max(1, int(per_thread * load_factor) // BYTES_PER_ENTRY)


class OffsetMap:
    """key -> the largest offset seen for it; ``latest_offset`` is the largest offset put."""

    __slots__ = ("capacity", "_map", "latest_offset")

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError("offset map capacity must be at least 1")
        self.capacity = capacity
        self._map: dict[bytes, int] = {}
        self.latest_offset = -1

    @staticmethod
    def _slot_key(key: bytes) -> bytes:
        if len(key) <= _DIGEST_SIZE:
            return key
        return hashlib.blake2b(key, digest_size=_DIGEST_SIZE).digest()

    def __len__(self) -> int:
        return len(self._map)

    @property
    def full(self) -> bool:
        return len(self._map) >= self.capacity

    def room(self) -> int:
        """How many more distinct keys fit."""
        return self.capacity - len(self._map)

    def put(self, key: bytes, offset: int) -> None:
        """Record ``offset`` as the key's latest.  Raises OverflowError when a new key does not fit."""
        k = self._slot_key(key)
        if k not in self._map and len(self._map) >= self.capacity:
            raise OverflowError("offset map is full")
        self._map[k] = offset
        if offset > self.latest_offset:
            self.latest_offset = offset

    def get(self, key: bytes) -> int:
        """The latest offset of ``key``, or -1 if the map does not hold it."""
        return self._map.get(self._slot_key(key), -1)

    def clear(self) -> None:
        self._map.clear()
        self.latest_offset = -1
