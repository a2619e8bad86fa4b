"""Client numbering of topics with disabled partitions (kaflet/gateway/partitions.py)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from kaflet.gateway.partitions import PartitionRouter, PartitionTable

INT32 = st.integers(min_value=-(1 << 31), max_value=(1 << 31) - 1)


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
    for missing in (2, 3, 7, -1, -2, -4):
        assert t.to_real(missing) < 0
        assert t.to_client(t.to_real(missing)) == missing


@given(count=st.integers(min_value=0, max_value=12), disabled=st.frozensets(st.integers(0, 11)),
       client=INT32)
def test_no_client_number_reaches_a_hidden_partition(count: int, disabled: frozenset[int], client: int) -> None:
    """Whatever int32 a client sends, it names a visible partition or none, and comes back as sent."""
    t = PartitionTable(count, disabled)
    real = t.to_real(client)
    if 0 <= client < len(t.real_of):
        assert 0 <= real < count and real not in disabled
    else:
        assert real < 0
    assert t.to_client(real) == client


@given(count=st.integers(min_value=0, max_value=12), disabled=st.frozensets(st.integers(0, 11)),
       a=INT32, b=INT32)
def test_distinct_client_numbers_stay_distinct(count: int, disabled: frozenset[int], a: int, b: int) -> None:
    t = PartitionTable(count, disabled)
    assert (t.to_real(a) == t.to_real(b)) == (a == b)


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
