"""Every advertised API version answers a well-formed request with a decodable response.

This drives the broker with the schema-generated codec at each version it advertises, so a
field that exists only in some versions cannot silently break one of them.
"""

from __future__ import annotations

import uuid

import pytest

from kaflet.protocol import codec
from tests.support.raw_client import RawClient
from tests.support.topics import create_topic


def _advertised(bootstrap: str) -> dict[int, tuple[int, int]]:
    c = RawClient(bootstrap)
    try:
        resp = c.request(18, 3, codec.request_class(18)(client_software_name="t", client_software_version="1"))
    finally:
        c.close()
    assert resp.error_code == 0
    return {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}


def test_advertised_versions_are_exactly_the_implemented_ones(kaflet_broker):
    adv = _advertised(kaflet_broker.bootstrap)
    expected = {0: (3, 10), 1: (4, 12), 2: (0, 7), 3: (0, 12), 18: (0, 3), 19: (0, 7), 20: (0, 6),
                22: (0, 4), 37: (0, 3), 60: (0, 1)}
    for key, rng in expected.items():
        assert adv.get(key) == rng, (key, adv.get(key))


@pytest.mark.parametrize("version", range(0, 4))
def test_api_versions_each_version(kaflet_broker, version):
    c = RawClient(kaflet_broker.bootstrap)
    req = codec.request_class(18)(client_software_name="t", client_software_version="1")
    resp = c.request(18, version, req)
    c.close()
    assert resp.error_code == 0 and len(resp.api_keys) >= 10


@pytest.mark.parametrize("version", range(0, 13))
def test_metadata_each_version(kaflet_broker, version):
    topic = f"mv{version}-{uuid.uuid4().hex[:6]}"
    create_topic(kaflet_broker.bootstrap, topic, 2)
    M = codec.request_class(3)
    req = M(topics=[M.MetadataRequestTopic(name=topic, topic_id=uuid.UUID(int=0))], allow_auto_topic_creation=False,
            include_cluster_authorized_operations=False, include_topic_authorized_operations=False)
    c = RawClient(kaflet_broker.bootstrap)
    resp = c.request(3, version, req)
    c.close()
    assert resp.brokers and resp.brokers[0].port == kaflet_broker.port
    t = resp.topics[0]
    assert t.error_code == 0 and t.name == topic and len(t.partitions) == 2
    if version >= 10:
        assert t.topic_id != uuid.UUID(int=0)


@pytest.mark.parametrize("version", range(3, 11))
def test_produce_then_fetch_and_list_offsets_each_version(kaflet_broker, version):
    from kaflet.protocol.records import Record, build_batch, decode_records

    topic = f"pv{version}-{uuid.uuid4().hex[:6]}"
    create_topic(kaflet_broker.bootstrap, topic, 1)
    P = codec.request_class(0)
    batch = build_batch([Record(i, 0, b"k%d" % i, b"v%d" % i, []) for i in range(3)])
    req = P(transactional_id=None, acks=-1, timeout_ms=5000, topic_data=[P.TopicProduceData(
        name=topic, partition_data=[P.TopicProduceData.PartitionProduceData(index=0, records=batch)])])
    c = RawClient(kaflet_broker.bootstrap)
    resp = c.request(0, version, req)
    part = resp.responses[0].partition_responses[0]
    assert part.error_code == 0 and part.base_offset == 0
    fetch_version = min(4 + (version - 3), 12)
    F = codec.request_class(1)
    freq = F(replica_id=-1, max_wait_ms=100, min_bytes=1, max_bytes=1 << 20, isolation_level=0, session_id=0,
             session_epoch=-1, topics=[F.FetchTopic(topic=topic, partitions=[F.FetchTopic.FetchPartition(
                 partition=0, current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=-1, log_start_offset=-1,
                 partition_max_bytes=1 << 20)])], forgotten_topics_data=[], rack_id="")
    fresp = c.request(1, fetch_version, freq)
    fpart = fresp.responses[0].partitions[0]
    assert fpart.error_code == 0 and fpart.high_watermark == 3
    records = decode_records(bytes(fpart.records))
    assert [(r.key, r.value) for r in records] == [(b"k%d" % i, b"v%d" % i) for i in range(3)]
    L = codec.request_class(2)
    for lv in range(0, 8):
        lreq = L(replica_id=-1, isolation_level=0, topics=[L.ListOffsetsTopic(name=topic, partitions=[
            L.ListOffsetsTopic.ListOffsetsPartition(partition_index=0, current_leader_epoch=-1, timestamp=-1,
                                                    max_num_offsets=1)])])
        lp = c.request(2, lv, lreq).topics[0].partitions[0]
        assert lp.error_code == 0
        assert (lp.old_style_offsets == [3]) if lv == 0 else (lp.offset == 3)
    c.close()


@pytest.mark.parametrize("version", range(0, 8))
def test_create_topics_each_version(kaflet_broker, version):
    name = f"ct{version}-{uuid.uuid4().hex[:6]}"
    C = codec.request_class(19)
    req = C(topics=[C.CreatableTopic(name=name, num_partitions=2, replication_factor=1, assignments=[],
                                     configs=[C.CreatableTopic.CreatableTopicConfig(name="segment.bytes", value="1048576")])],
            timeout_ms=10000, validate_only=False)
    c = RawClient(kaflet_broker.bootstrap)
    resp = c.request(19, version, req)
    assert resp.topics[0].error_code == 0, resp
    again = c.request(19, version, req)
    assert again.topics[0].error_code == 36  # TOPIC_ALREADY_EXISTS
    D = codec.request_class(20)
    if version <= 6:
        dver = min(version, 6)
        dreq = D(topic_names=[name], topics=[D.DeleteTopicState(name=name, topic_id=uuid.UUID(int=0))], timeout_ms=10000)
        dresp = c.request(20, dver, dreq)
        assert dresp.responses[0].error_code == 0
    c.close()


@pytest.mark.parametrize("version", range(0, 4))
def test_create_partitions_each_version(kaflet_broker, version):
    name = f"cp{version}-{uuid.uuid4().hex[:6]}"
    create_topic(kaflet_broker.bootstrap, name, 1)
    CP = codec.request_class(37)
    c = RawClient(kaflet_broker.bootstrap)
    resp = c.request(37, version, CP(topics=[CP.CreatePartitionsTopic(name=name, count=3, assignments=None)],
                                     timeout_ms=10000, validate_only=False))
    assert resp.results[0].error_code == 0
    shrink = c.request(37, version, CP(topics=[CP.CreatePartitionsTopic(name=name, count=2, assignments=None)],
                                       timeout_ms=10000, validate_only=False))
    assert shrink.results[0].error_code == 37  # INVALID_PARTITIONS
    c.close()


@pytest.mark.parametrize("version", range(0, 5))
def test_init_producer_id_each_version(kaflet_broker, version):
    init = codec.request_class(22)
    c = RawClient(kaflet_broker.bootstrap)
    a = c.request(22, version, init(transactional_id=None, transaction_timeout_ms=60000, producer_id=-1, producer_epoch=-1))
    b = c.request(22, version, init(transactional_id=None, transaction_timeout_ms=60000, producer_id=-1, producer_epoch=-1))
    c.close()
    assert a.error_code == 0 and b.error_code == 0
    assert a.producer_id >= 0 and b.producer_id != a.producer_id and a.producer_epoch == 0


@pytest.mark.parametrize("version", range(0, 2))
def test_describe_cluster_each_version(kaflet_broker, version):
    D = codec.request_class(60)
    c = RawClient(kaflet_broker.bootstrap)
    resp = c.request(60, version, D(include_cluster_authorized_operations=False, endpoint_type=1))
    c.close()
    assert resp.error_code == 0 and resp.cluster_id and resp.brokers[0].port == kaflet_broker.port
    assert resp.controller_id == resp.brokers[0].broker_id
