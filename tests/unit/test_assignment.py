"""Replica assignment, checked against Kafka's documented examples and by properties."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kaflet.metadata.assignment import (
    BrokerMetadata,
    assign_new_partitions,
    assign_replicas_to_brokers,
    rack_alternated_broker_list,
    validate_new_replica_assignment,
    validate_topic_assignment,
)
from kaflet.metadata.errors import (
    AdminOperationError,
    BrokerNotAvailableError,
    InvalidPartitionsError,
    InvalidReplicaAssignmentError,
    InvalidReplicationFactorError,
)


def test_rack_unaware_kafka_example() -> None:
    brokers = [BrokerMetadata(i) for i in range(5)]
    got = assign_replicas_to_brokers(brokers, 10, 3, fixed_start_index=0)
    assert got == {
        0: [0, 1, 2],
        1: [1, 2, 3],
        2: [2, 3, 4],
        3: [3, 4, 0],
        4: [4, 0, 1],
        5: [0, 2, 3],
        6: [1, 3, 4],
        7: [2, 4, 0],
        8: [3, 0, 1],
        9: [4, 1, 2],
    }


def test_rack_alternated_list() -> None:
    racks = {0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}
    assert rack_alternated_broker_list(racks) == [0, 3, 1, 5, 4, 2]
    nine = {i: f"rack{i // 3 + 1}" for i in range(9)}
    assert rack_alternated_broker_list(nine) == [0, 3, 6, 1, 4, 7, 2, 5, 8]
    uneven = {0: "a", 1: "a", 2: "a", 3: "b"}
    assert rack_alternated_broker_list(uneven) == [0, 3, 1, 2]


def test_rack_aware_kafka_example() -> None:
    racks = {0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}
    brokers = [(b, r) for b, r in racks.items()]
    got = assign_replicas_to_brokers(brokers, 7, 3, fixed_start_index=0)
    assert got == {
        0: [0, 3, 1],
        1: [3, 1, 5],
        2: [1, 5, 4],
        3: [5, 4, 2],
        4: [4, 2, 0],
        5: [2, 0, 3],
        6: [0, 4, 2],
    }


def test_rack_aware_puts_replicas_on_distinct_racks_when_uneven() -> None:
    # Kafka's AdminRackAwareTest: 2 racks, 3 brokers in one and 1 in the other, RF 2: every
    # partition has one replica on each rack.
    brokers = [(0, "a"), (1, "a"), (2, "a"), (3, "b")]
    got = assign_replicas_to_brokers(brokers, 8, 2, fixed_start_index=0)
    rack = dict(brokers)
    for reps in got.values():
        assert {rack[r] for r in reps} == {"a", "b"}


def test_start_partition_id_and_randomness() -> None:
    brokers = [BrokerMetadata(i) for i in range(4)]
    got = assign_replicas_to_brokers(brokers, 3, 2, fixed_start_index=1, start_partition_id=5)
    assert sorted(got) == [5, 6, 7]
    a = assign_replicas_to_brokers(brokers, 20, 3, rng=random.Random(7))
    b = assign_replicas_to_brokers(brokers, 20, 3, rng=random.Random(7))
    assert a == b


def test_errors() -> None:
    brokers = [BrokerMetadata(1), BrokerMetadata(2)]
    with pytest.raises(InvalidReplicationFactorError) as ei:
        assign_replicas_to_brokers(brokers, 1, 3)
    assert ei.value.message == "Replication factor: 3 larger than available brokers: 2."
    assert ei.value.error_code == 38
    with pytest.raises(InvalidReplicationFactorError):
        assign_replicas_to_brokers(brokers, 1, 0)
    with pytest.raises(InvalidPartitionsError) as e2:
        assign_replicas_to_brokers(brokers, 0, 1)
    assert e2.value.error_code == 37
    with pytest.raises(AdminOperationError) as e3:
        assign_replicas_to_brokers([(1, "a"), (2, None)], 1, 1)
    assert "Not all brokers have rack information" in e3.value.message


def test_add_partitions_continues_from_partition_zero_leader() -> None:
    brokers = [BrokerMetadata(i) for i in (10, 11, 12, 13)]
    existing = {0: [12, 13], 1: [13, 10]}
    got = assign_new_partitions(brokers, existing, 5)
    # Start index = position of the first broker with id >= 12, i.e. 2; ids continue at 2.
    assert got == assign_replicas_to_brokers(brokers, 3, 2, fixed_start_index=2, start_partition_id=2)
    assert sorted(got) == [2, 3, 4]
    assert got[2][0] == 10  # (partition 2 + start 2) % 4 = 0
    with pytest.raises(InvalidPartitionsError):
        assign_new_partitions(brokers, existing, 2)
    with pytest.raises(AdminOperationError):
        assign_new_partitions(brokers, {1: [10]}, 3)


def test_validate_topic_assignment() -> None:
    validate_topic_assignment({0: [1, 2], 1: [2, 1]})
    with pytest.raises(InvalidReplicaAssignmentError, match="same number of replicas"):
        validate_topic_assignment({0: [1, 2], 1: [2]})
    with pytest.raises(InvalidReplicaAssignmentError, match="Duplicate replica assignment"):
        validate_topic_assignment({0: [1, 1]})
    with pytest.raises(InvalidReplicaAssignmentError, match="consecutive 0-based"):
        validate_topic_assignment({0: [1], 2: [1]})


def test_validate_new_replica_assignment() -> None:
    validate_new_replica_assignment({2: [1, 2]}, 2, [1, 2, 3])
    with pytest.raises(InvalidReplicaAssignmentError, match="Duplicate brokers"):
        validate_new_replica_assignment({2: [1, 1]}, 2, [1, 2])
    with pytest.raises(BrokerNotAvailableError):
        validate_new_replica_assignment({2: [1, 9]}, 2, [1, 2])
    with pytest.raises(InvalidReplicaAssignmentError, match="Inconsistent replication factor"):
        validate_new_replica_assignment({2: [1, 2, 3]}, 2, [1, 2, 3])


@settings(max_examples=150, deadline=None)
@given(
    n_brokers=st.integers(1, 12),
    n_partitions=st.integers(1, 60),
    data=st.data(),
)
def test_property_rack_unaware(n_brokers: int, n_partitions: int, data: st.DataObject) -> None:
    rf = data.draw(st.integers(1, n_brokers))
    seed = data.draw(st.integers(0, 2**32))
    ids = data.draw(st.lists(st.integers(0, 1000), min_size=n_brokers, max_size=n_brokers, unique=True))
    got = assign_replicas_to_brokers(
        [BrokerMetadata(i) for i in ids], n_partitions, rf, rng=random.Random(seed)
    )
    assert sorted(got) == list(range(n_partitions))
    for reps in got.values():
        assert len(reps) == rf and len(set(reps)) == rf and set(reps) <= set(ids)
    leaders = Counter(reps[0] for reps in got.values())
    counts = [leaders.get(b, 0) for b in ids]
    assert max(counts) - min(counts) <= 1


@settings(max_examples=150, deadline=None)
@given(
    rack_sizes=st.lists(st.integers(1, 4), min_size=1, max_size=4),
    n_partitions=st.integers(1, 40),
    data=st.data(),
)
def test_property_rack_aware(rack_sizes: list[int], n_partitions: int, data: st.DataObject) -> None:
    brokers = []
    bid = 0
    for r, size in enumerate(rack_sizes):
        for _ in range(size):
            brokers.append((bid, f"rack-{r}"))
            bid += 1
    rf = data.draw(st.integers(1, len(brokers)))
    seed = data.draw(st.integers(0, 2**32))
    got = assign_replicas_to_brokers(brokers, n_partitions, rf, rng=random.Random(seed))
    rack = dict(brokers)
    n_racks = len(rack_sizes)
    for reps in got.values():
        assert len(reps) == rf and len(set(reps)) == rf
        # Every partition spans min(rf, racks) racks.
        assert len({rack[r] for r in reps}) == min(rf, n_racks)
    leaders = Counter(reps[0] for reps in got.values())
    counts = [leaders.get(b, 0) for b, _ in brokers]
    assert max(counts) - min(counts) <= 1
