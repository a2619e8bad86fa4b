"""The server-side assignors of consumer groups: balanced, sticky and deterministic."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kaflet.coordinator.group.assignors import (
    ASSIGNORS,
    Assignment,
    MemberSpec,
    RangeAssignor,
    UniformAssignor,
    assignor_names,
)

T1, T2, T3 = b"\x01" * 16, b"\x02" * 16, b"\x03" * 16


def _owners(result: dict[str, Assignment]) -> dict[tuple[bytes, int], str]:
    owners: dict[tuple[bytes, int], str] = {}
    for member, by_topic in result.items():
        for t, ps in by_topic.items():
            for p in ps:
                assert (t, p) not in owners, f"partition {p} assigned twice"
                owners[(t, p)] = member
    return owners


def _count(result: dict[str, Assignment], member: str) -> int:
    return sum(len(ps) for ps in result[member].values())


topics_st = st.dictionaries(st.sampled_from([T1, T2, T3]), st.integers(0, 12), min_size=1)
members_st = st.lists(st.text("abcdefgh", min_size=1, max_size=4), min_size=1, max_size=7, unique=True)


@settings(max_examples=200, deadline=None)
@given(topics=topics_st, members=members_st)
def test_uniform_homogeneous_is_complete_and_balanced(topics: dict[bytes, int], members: list[str]) -> None:
    specs = {m: MemberSpec(frozenset(topics)) for m in members}
    result = UniformAssignor().assign(specs, topics)
    owners = _owners(result)
    assert set(owners) == {(t, p) for t, n in topics.items() for p in range(n)}
    counts = [_count(result, m) for m in members]
    assert max(counts) - min(counts) <= 1


@settings(max_examples=200, deadline=None)
@given(topics=topics_st, members=members_st, data=st.data())
def test_uniform_heterogeneous_no_member_could_take_from_a_heavier_one(
        topics: dict[bytes, int], members: list[str], data: st.DataObject) -> None:
    specs = {m: MemberSpec(frozenset(data.draw(st.sets(st.sampled_from(sorted(topics)))))) for m in members}
    result = UniformAssignor().assign(specs, topics)
    owners = _owners(result)
    subscribed = {t for s in specs.values() for t in s.subscribed}
    assert set(owners) == {(t, p) for t in subscribed for p in range(topics[t])}
    for (t, _p), owner in owners.items():
        assert t in specs[owner].subscribed
        for other, spec in specs.items():
            if t in spec.subscribed:
                assert _count(result, other) >= _count(result, owner) - 1


@settings(max_examples=150, deadline=None)
@given(topics=topics_st, members=members_st, data=st.data())
def test_uniform_is_deterministic_and_sticky(topics: dict[bytes, int], members: list[str],
                                             data: st.DataObject) -> None:
    specs = {m: MemberSpec(frozenset(topics)) for m in members}
    first = UniformAssignor().assign(specs, topics)
    # The same input in another order gives the same answer.
    assert UniformAssignor().assign(dict(reversed(list(specs.items()))), topics) == first
    # Nothing changed: nothing moves.
    again = {m: MemberSpec(frozenset(topics), first[m]) for m in members}
    assert UniformAssignor().assign(again, topics) == first
    # One member joins: every partition that moves, moves to it, and the others keep the rest.
    newcomer = data.draw(st.text("xyz", min_size=5, max_size=5))
    grown = dict(again)
    grown[newcomer] = MemberSpec(frozenset(topics))
    after = UniformAssignor().assign(grown, topics)
    for m in members:
        for t, ps in after[m].items():
            assert ps <= first[m].get(t, frozenset()), f"{m} was given a partition it did not have"
    counts = [_count(after, m) for m in grown]
    assert max(counts) - min(counts) <= 1


def test_uniform_moves_the_fewest_partitions_when_a_fourth_member_joins() -> None:
    topics = {T1: 12}
    three = {m: MemberSpec(frozenset(topics)) for m in "abc"}
    first = UniformAssignor().assign(three, topics)
    assert [_count(first, m) for m in "abc"] == [4, 4, 4]
    four = {m: MemberSpec(frozenset(topics), first[m]) for m in "abc"} | {"d": MemberSpec(frozenset(topics))}
    after = UniformAssignor().assign(four, topics)
    moved = sum(len(first[m][T1] - after[m].get(T1, frozenset())) for m in "abc")
    assert moved == 3 and _count(after, "d") == 3


def test_range_gives_contiguous_ranges_in_member_id_order() -> None:
    specs = {"b": MemberSpec(frozenset({T1, T2})), "a": MemberSpec(frozenset({T1, T2})), "c": MemberSpec(frozenset({T2}))}
    result = RangeAssignor().assign(specs, {T1: 5, T2: 3})
    assert result["a"] == {T1: frozenset({0, 1, 2}), T2: frozenset({0})}
    assert result["b"] == {T1: frozenset({3, 4}), T2: frozenset({1})}
    assert result["c"] == {T2: frozenset({2})}


@settings(max_examples=100, deadline=None)
@given(topics=topics_st, members=members_st)
def test_range_is_complete_and_balanced_per_topic(topics: dict[bytes, int], members: list[str]) -> None:
    specs = {m: MemberSpec(frozenset(topics)) for m in members}
    result = RangeAssignor().assign(specs, topics)
    _owners(result)
    for t, n in topics.items():
        sizes = [len(result[m].get(t, frozenset())) for m in members]
        assert sum(sizes) == n and max(sizes) - min(sizes) <= 1


def test_assignor_names_accept_kafkas_class_names_and_refuse_others() -> None:
    assert assignor_names(["org.apache.kafka.coordinator.group.assignor.RangeAssignor", "uniform"]) == \
        ["range", "uniform"]
    assert set(ASSIGNORS) == {"uniform", "range"}
    for bad in (["sticky"], []):
        try:
            assignor_names(bad)
        except ValueError:
            continue
        raise AssertionError(f"{bad} accepted")
