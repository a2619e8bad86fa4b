"""The transaction coordinator through real sockets: FindCoordinator for a transactional id,
InitProducerId epochs and fencing, and the state surviving a restart (read back from
__transaction_state). AddPartitionsToTxn/EndTxn are not advertised yet (they need the log
side's WriteTxnMarkers), so clients stop after init_transactions."""

from __future__ import annotations

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, ConfigResource

from kaflet.protocol import codec
from kaflet.protocol.api_keys import ApiKey
from kaflet.protocol.errors import ErrorCode
from tests.support.broker_process import BrokerProcess
from tests.support.raw_client import RawClient


def _init(c: RawClient, txn_id: str, version: int = 4, pid: int = -1, epoch: int = -1) -> tuple[int, int, int]:
    R = codec.request_class(ApiKey.INIT_PRODUCER_ID)
    fields = {"transactional_id": txn_id, "transaction_timeout_ms": 60000}
    if version >= 3:
        fields.update(producer_id=pid, producer_epoch=epoch)
    resp = c.request(ApiKey.INIT_PRODUCER_ID, version, R(**fields))
    return resp.error_code, resp.producer_id, resp.producer_epoch


def _find(c: RawClient, txn_id: str) -> tuple[int, int]:
    R = codec.request_class(ApiKey.FIND_COORDINATOR)
    for _ in range(100):
        resp = c.request(ApiKey.FIND_COORDINATOR, 3, R(key=txn_id, key_type=1))
        if resp.error_code != ErrorCode.COORDINATOR_NOT_AVAILABLE:
            return resp.error_code, resp.port
    raise AssertionError("no transaction coordinator")


def _init_until_loaded(c: RawClient, txn_id: str, **kw: int) -> tuple[int, int, int]:
    for _ in range(200):
        out = _init(c, txn_id, **kw)
        if out[0] not in (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.NOT_COORDINATOR,
                          ErrorCode.COORDINATOR_NOT_AVAILABLE):
            return out
    raise AssertionError("coordinator never loaded")


def test_init_transactions_with_confluent_kafka(fresh_broker: BrokerProcess) -> None:
    fresh_broker.start()
    p = Producer({"bootstrap.servers": fresh_broker.bootstrap, "transactional.id": "ck-txn"})
    p.init_transactions(30)
    # __transaction_state was created by the first FindCoordinator, with Kafka's settings.
    admin = AdminClient({"bootstrap.servers": fresh_broker.bootstrap})
    md = admin.list_topics(timeout=10)
    assert len(md.topics["__transaction_state"].partitions) == 50
    res = ConfigResource(ConfigResource.Type.TOPIC, "__transaction_state")
    configs = admin.describe_configs([res])[res].result(timeout=10)
    assert configs["cleanup.policy"].value == "compact"
    assert configs["compression.type"].value == "uncompressed"
    assert configs["min.insync.replicas"].value == "1"  # capped with the replication factor of one broker


def test_epochs_fencing_and_restart(fresh_broker: BrokerProcess) -> None:
    fresh_broker.start()
    c = RawClient(fresh_broker.bootstrap)
    try:
        assert _find(c, "raw-txn") == (ErrorCode.NONE, fresh_broker.port)
        err, pid, epoch = _init_until_loaded(c, "raw-txn")
        assert (err, epoch) == (ErrorCode.NONE, 0)
        assert _init(c, "raw-txn") == (ErrorCode.NONE, pid, 1)
        # KIP-360 re-initialisation: the fenced epoch is refused, PRODUCER_FENCED from v4, and
        # INVALID_PRODUCER_EPOCH before (older clients do not know the newer code).
        assert _init(c, "raw-txn", pid=pid, epoch=0)[0] == ErrorCode.PRODUCER_FENCED
        assert _init(c, "raw-txn", version=3, pid=pid, epoch=0)[0] == ErrorCode.INVALID_PRODUCER_EPOCH
        assert _init(c, "raw-txn", pid=pid, epoch=1) == (ErrorCode.NONE, pid, 2)
        assert _init(c, "", version=2)[0] == ErrorCode.INVALID_REQUEST
    finally:
        c.close()
    fresh_broker.restart(hard=True)
    c = RawClient(fresh_broker.bootstrap)
    try:
        _find(c, "raw-txn")
        assert _init_until_loaded(c, "raw-txn") == (ErrorCode.NONE, pid, 3)  # the epoch survived the kill
    finally:
        c.close()
