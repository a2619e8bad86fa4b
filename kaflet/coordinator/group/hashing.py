"""Which __consumer_offsets partition coordinates a group: Kafka's `abs(groupId.hashCode) % n`."""

from __future__ import annotations

from functools import lru_cache

_INT_MIN = -(1 << 31)


def java_string_hash(s: str) -> int:
    """Java's String.hashCode: h = 31*h + c over UTF-16 code units, wrapping at 32 bits."""
    data = s.encode("utf-16-be", "surrogatepass")
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def java_utils_abs(n: int) -> int:
    """Kafka's Utils.abs: like Math.abs, but Integer.MIN_VALUE maps to 0 instead of itself."""
    return 0 if n == _INT_MIN else abs(n)


# Both coordinators ask this several times per request for the same few ids; the hash walks
# the id in Python, so the answers are remembered (bounded).
@lru_cache(maxsize=8192)
def partition_for(group_id: str, num_partitions: int) -> int:
    """The __consumer_offsets partition whose leader coordinates `group_id` (also the
    __transaction_state partition of a transactional id)."""
    return java_utils_abs(java_string_hash(group_id)) % num_partitions
