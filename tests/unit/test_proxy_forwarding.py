"""Proxy mode's pieces without processes: the port-per-broker scheme, the answers it rewrites,
a Produce request's acks, the throttle time put into answers, the settings."""

from __future__ import annotations

import logging

import pytest

from kaflet.protocol import codec
from kaflet.protocol.api_keys import ApiKey
from kaflet.protocol.errors import ErrorCode
from kaflet.protocol.produce import decode_produce_request
from kaflet.proxy.config import GatewayConfig
from kaflet.proxy.forwarding import throttled
from kaflet.proxy.ports import BrokerPorts


def _ports(exposed: list[tuple[int, int, int]], refuse: int | None = None) -> BrokerPorts:
    def expose(cluster_id: int, broker_id: int, port: int) -> bool:
        exposed.append((cluster_id, broker_id, port))
        return port != refuse
    return BrokerPorts(20000, 100, expose)


def test_the_port_scheme_is_arithmetic_and_checked(caplog: pytest.LogCaptureFixture) -> None:
    ports = _ports([])
    assert ports.port_of(7, 3) == 20703 and ports.target_of(20703) == (7, 3)
    assert ports.port_of(0, 0) == 20000 and ports.target_of(20000) == (0, 0)
    with caplog.at_level(logging.ERROR, "kaflet.proxy.ports"):
        assert ports.port_of(7, 100) is None  # a broker id that does not fit
        assert ports.port_of(7, 100) is None
        assert ports.port_of(500, 1) is None  # past 65535
    assert len(caplog.records) == 2  # one line per broker


def _metadata(version: int) -> bytes:
    R = codec.response_class(ApiKey.METADATA)
    response = R(brokers=[R.MetadataResponseBroker(node_id=1, host="b1.internal", port=9093, rack="r1"),
                          R.MetadataResponseBroker(node_id=2, host="b2.internal", port=9093, rack=None),
                          R.MetadataResponseBroker(node_id=250, host="b250.internal", port=9093, rack=None)],
                 cluster_id="abc", controller_id=2, topics=[])
    response.throttle_time_ms = 17
    return bytes(response.encode(version=version))


@pytest.mark.parametrize("version", [1, 9, 12])
def test_metadata_brokers_are_rewritten_to_gateway_ports(version: int) -> None:
    exposed: list[tuple[int, int, int]] = []
    ports = _ports(exposed, refuse=20702)
    body = ports.rewrite_answer(7, ApiKey.METADATA, version, _metadata(version), "gw.example")
    out = codec.decode_response(ApiKey.METADATA, version, memoryview(body))
    # Broker 2's port could not be bound and broker 250 has no port: both left out.
    assert [(b.node_id, b.host, b.port) for b in out.brokers] == [(1, "gw.example", 20701)]
    assert out.controller_id == 2  # the rest as the cluster said
    assert out.throttle_time_ms == (17 if version >= 3 else 0)
    assert exposed == [(7, 1, 20701), (7, 2, 20702)]
    assert ports.upstream(7, 1) == ("b1.internal", 9093) and ports.upstream(7, 250) == ("b250.internal", 9093)
    ports.forget_cluster(7)
    assert ports.upstream(7, 1) is None and ports.generation(7) == 1 and ports.generation(8) == 0


def test_an_answer_from_before_a_move_is_rewritten_but_not_learned_from() -> None:
    """A Metadata answer on its way while the manager moved the cluster names where it was: the
    client still gets it (with the gateway's ports), but the ports must lead to the new place."""
    ports = _ports([])
    sent_under = ports.generation(7)
    ports.forget_cluster(7)
    body = ports.rewrite_answer(7, ApiKey.METADATA, 12, _metadata(12), "gw", sent_under)
    out = codec.decode_response(ApiKey.METADATA, 12, memoryview(body))
    assert [(b.node_id, b.port) for b in out.brokers] == [(1, 20701), (2, 20702)]
    assert ports.upstream(7, 1) is None and ports.upstream(7, 2) is None
    # An answer sent under the current generation is learned from.
    ports.rewrite_answer(7, ApiKey.METADATA, 12, _metadata(12), "gw", ports.generation(7))
    assert ports.upstream(7, 1) == ("b1.internal", 9093)


@pytest.mark.parametrize("version", [0, 3, 4])
def test_coordinators_are_rewritten(version: int) -> None:
    R = codec.response_class(ApiKey.FIND_COORDINATOR)
    if version >= 4:
        response = R(coordinators=[R.Coordinator(key="g", node_id=3, host="b3", port=9093, error_code=0,
                                                 error_message=None),
                                   R.Coordinator(key="h", node_id=-1, host="", port=-1,
                                                 error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE, error_message="x")])
    else:
        response = R(error_code=0, error_message=None, node_id=3, host="b3", port=9093)
    ports = _ports([])
    body = ports.rewrite_answer(7, ApiKey.FIND_COORDINATOR, version, bytes(response.encode(version=version)), "gw")
    out = codec.decode_response(ApiKey.FIND_COORDINATOR, version, memoryview(body))
    found = out.coordinators[0] if version >= 4 else out
    assert (found.node_id, found.host, found.port) == (3, "gw", 20703)
    if version >= 4:
        assert out.coordinators[1].error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert ports.upstream(7, 3) == ("b3", 9093)


def test_describe_cluster_brokers_are_rewritten() -> None:
    R = codec.response_class(ApiKey.DESCRIBE_CLUSTER)
    response = R(error_code=0, error_message=None, cluster_id="c", controller_id=1,
                 brokers=[R.DescribeClusterBroker(broker_id=1, host="b1", port=9093, rack=None)])
    ports = _ports([])
    body = ports.rewrite_answer(8, ApiKey.DESCRIBE_CLUSTER, 0, bytes(response.encode(version=0)), "gw")
    out = codec.decode_response(ApiKey.DESCRIBE_CLUSTER, 0, memoryview(body))
    assert [(b.broker_id, b.host, b.port) for b in out.brokers] == [(1, "gw", 20801)]


@pytest.mark.parametrize(("version", "transactional_id", "acks"), [
    (2, None, 0), (3, None, 1), (3, "tx", -1), (8, "tx", 0), (9, None, 0), (9, "tx-long-name", -1), (11, "t", 1)])
def test_produce_acks_are_read(version: int, transactional_id: str | None, acks: int) -> None:
    R = codec.request_class(ApiKey.PRODUCE)
    request = R(transactional_id=transactional_id, acks=acks, timeout_ms=1000, topic_data=[])
    assert decode_produce_request(memoryview(bytes(request.encode(version=version))), version).acks == acks


@pytest.mark.parametrize(("api_key", "version"), [(ApiKey.PRODUCE, 9), (ApiKey.PRODUCE, 3), (ApiKey.METADATA, 12)])
def test_the_gateways_throttle_time_is_put_into_answers(api_key: int, version: int) -> None:
    R = codec.response_class(api_key)
    response = R(responses=[]) if api_key == ApiKey.PRODUCE else R(brokers=[], cluster_id=None, controller_id=-1,
                                                                      topics=[])
    response.throttle_time_ms = 40
    body = bytes(response.encode(version=version))
    assert codec.decode_response(api_key, version, memoryview(throttled(api_key, version, body, 500))) \
        .throttle_time_ms == 500
    # The cluster's own, when longer, is kept.
    assert codec.decode_response(api_key, version, memoryview(throttled(api_key, version, body, 10))) \
        .throttle_time_ms == 40


def test_proxy_settings() -> None:
    config = GatewayConfig.from_properties({"gateway.manager.url": "http://m", "gateway.mode": "proxy",
                                            "gateway.listen": "0.0.0.0:9192", "gateway.advertised.host": "gw"})
    # Kroxylicious's default: the brokers' ports follow the bootstrap port.
    assert (config.broker_port_base, config.ports_per_cluster, config.advertised_host) == (9193, 100, "gw")
