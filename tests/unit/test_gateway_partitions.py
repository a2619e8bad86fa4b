"""Client numbering of topics with disabled partitions (kaflet/gateway/partitions.py)."""

from __future__ import annotations

from kaflet.gateway.partitions import PartitionRouter, PartitionTable


class View:
    def __init__(self) -> None:
        self.by_topic: dict[str, frozenset[int]] = {}

    def disabled(self, topic: str) -> frozenset[int]:
        return self.by_topic.get(topic, frozenset())


def test_table_renumbers_and_maps_back() -> None:
    # The seed's example: 4 partitions, 1 and 2 disabled -> clients see 0 -> 0 and 1 -> 3.
    t = PartitionTable(4, frozenset({1, 2}))
    assert [t.to_real(i) for i in (0, 1)] == [0, 3]
    assert [t.to_client(r) for r in range(4)] == [0, None, None, 1]
    # A client number with no partition maps to a negative index, and back to the same number.
    for missing in (2, 3, 7):
        assert t.to_real(missing) < 0
        assert t.to_client(t.to_real(missing)) == missing


def test_router_follows_the_view_and_the_partition_count() -> None:
    view, counts = View(), {"t": 4}
    router = PartitionRouter(view, lambda topic: counts.get(topic, 0))
    assert router.table("t") is None  # nothing disabled: no mapping at all
    view.by_topic["t"] = frozenset({0})
    first = router.table("t")
    assert first is not None and first.real_of == [1, 2, 3]
    assert router.table("t") is first  # reused while nothing changes
    counts["t"] = 6  # partitions added
    grown = router.table("t")
    assert grown is not None and grown.real_of == [1, 2, 3, 4, 5]
    view.by_topic["t"] = frozenset({0, 1, 2, 3, 4, 5})
    none_left = router.table("t")
    assert none_left is not None and none_left.real_of == []
    view.by_topic["t"] = frozenset()
    assert router.table("t") is None
