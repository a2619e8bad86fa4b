"""AddPartitionsToTxn, AddOffsetsToTxn and EndTxn through a real broker's dispatcher (an
in-process broker, raw requests): partitions and the group's offsets partition join, EndTxn is
answered once PrepareCommit is written, and the connection's next request sees the transaction
complete."""

from __future__ import annotations

import asyncio
from typing import Any

from kaflet.embedded_broker import embedded_async
from kaflet.network.client import BrokerClient
from kaflet.protocol import codec
from kaflet.protocol.api_keys import ApiKey as K
from kaflet.protocol.errors import ErrorCode as E


def _req(api: int, **fields: Any) -> Any:
    return codec.request_class(api)(**fields)


async def _until(client: BrokerClient, api: int, version: int, req: Any, *, retry: tuple[int, ...]) -> Any:
    for _ in range(200):
        resp = await client.send(api, version, req)
        if getattr(resp, "error_code", 0) not in retry:
            return resp
        await asyncio.sleep(0.05)
    raise AssertionError(f"{api} kept answering {resp}")


async def test_transaction_apis() -> None:
    async with embedded_async({"num.partitions": "2"}) as bootstrap:
        host, port = bootstrap.rsplit(":", 1)
        async with await BrokerClient.connect(host, int(port)) as c:
            loading = (E.COORDINATOR_NOT_AVAILABLE, E.COORDINATOR_LOAD_IN_PROGRESS, E.NOT_COORDINATOR)
            await _until(c, K.FIND_COORDINATOR, 3, _req(K.FIND_COORDINATOR, key="h", key_type=1), retry=loading)
            init = await _until(c, K.INIT_PRODUCER_ID, 4, _req(
                K.INIT_PRODUCER_ID, transactional_id="h", transaction_timeout_ms=60000, producer_id=-1,
                producer_epoch=-1), retry=loading)
            pid, epoch = init.producer_id, init.producer_epoch
            await c.send(K.METADATA, 4, _req(K.METADATA, topics=[codec.request_class(K.METADATA).MetadataRequestTopic(
                name="tx-topic")], allow_auto_topic_creation=True))
            await asyncio.sleep(0.5)
            A: Any = codec.request_class(K.ADD_PARTITIONS_TO_TXN)

            def add(topic: str, parts: list[int], p: int = pid, e: int = epoch) -> Any:
                return A(v3_and_below_transactional_id="h", v3_and_below_producer_id=p,
                         v3_and_below_producer_epoch=e,
                         v3_and_below_topics=[A.AddPartitionsToTxnTopic(name=topic, partitions=parts)])

            def errors(resp: Any) -> dict[tuple[str, int], int]:
                return {(t.name, r.partition_index): r.partition_error_code for t in resp.results_by_topic_v3_and_below
                        for r in t.results_by_partition}

            assert errors(await c.send(K.ADD_PARTITIONS_TO_TXN, 3, add("tx-topic", [0, 1]))) == {
                ("tx-topic", 0): 0, ("tx-topic", 1): 0}
            # An unknown partition fails alone; the others are not attempted. Internal topics are refused.
            assert errors(await c.send(K.ADD_PARTITIONS_TO_TXN, 3, add("tx-topic", [0, 9]))) == {
                ("tx-topic", 0): E.OPERATION_NOT_ATTEMPTED, ("tx-topic", 9): E.UNKNOWN_TOPIC_OR_PARTITION}
            assert errors(await c.send(K.ADD_PARTITIONS_TO_TXN, 3, add("__consumer_offsets", [0]))) == {
                ("__consumer_offsets", 0): E.TOPIC_AUTHORIZATION_FAILED}
            # A stale epoch: PRODUCER_FENCED from v2, INVALID_PRODUCER_EPOCH before.
            assert errors(await c.send(K.ADD_PARTITIONS_TO_TXN, 1, add("tx-topic", [0], e=epoch - 1))) == {
                ("tx-topic", 0): E.INVALID_PRODUCER_EPOCH}
            assert errors(await c.send(K.ADD_PARTITIONS_TO_TXN, 2, add("tx-topic", [0], e=epoch - 1))) == {
                ("tx-topic", 0): E.PRODUCER_FENCED}
            off = await c.send(K.ADD_OFFSETS_TO_TXN, 3, _req(K.ADD_OFFSETS_TO_TXN, transactional_id="h",
                                                             producer_id=pid, producer_epoch=epoch, group_id="grp"))
            assert off.error_code == E.NONE
            # The group's offsets join the transaction; OffsetFetch with require_stable sees them pending.
            await _until(c, K.FIND_COORDINATOR, 3, _req(K.FIND_COORDINATOR, key="grp", key_type=0), retry=loading)
            T: Any = codec.request_class(K.TXN_OFFSET_COMMIT)
            commit = T(transactional_id="h", group_id="grp", producer_id=pid, producer_epoch=epoch, generation_id=-1,
                       member_id="", group_instance_id=None, topics=[T.TxnOffsetCommitRequestTopic(
                           name="tx-topic", partitions=[
                               T.TxnOffsetCommitRequestTopic.TxnOffsetCommitRequestPartition(
                                   partition_index=i, committed_offset=5, committed_leader_epoch=-1,
                                   committed_metadata="m") for i in (0, 9)])])
            for _ in range(100):
                tr = await c.send(K.TXN_OFFSET_COMMIT, 3, commit)
                codes = {p.partition_index: p.error_code for p in tr.topics[0].partitions}
                if codes[0] not in loading:
                    break
                await asyncio.sleep(0.05)
            assert codes == {0: E.NONE, 9: E.UNKNOWN_TOPIC_OR_PARTITION}
            F: Any = codec.request_class(K.OFFSET_FETCH)
            fetched = await c.send(K.OFFSET_FETCH, 7, F(group_id="grp", require_stable=True, topics=[
                F.OffsetFetchRequestTopic(name="tx-topic", partition_indexes=[0])]))
            assert fetched.topics[0].partitions[0].error_code == E.UNSTABLE_OFFSET_COMMIT
            plain = await c.send(K.OFFSET_FETCH, 7, F(group_id="grp", require_stable=False, topics=[
                F.OffsetFetchRequestTopic(name="tx-topic", partition_indexes=[0])]))
            assert (plain.topics[0].partitions[0].error_code, plain.topics[0].partitions[0].committed_offset) == (0, -1)
            end = _req(K.END_TXN, transactional_id="h", producer_id=pid, producer_epoch=epoch, committed=True)
            describe = _req(K.DESCRIBE_TRANSACTIONS, transactional_ids=["h"])
            # EndTxn is answered once PrepareCommit is written; the connection reads its next
            # request (sent with it here) only once the marker round and CompleteCommit are done.
            ended, described = await asyncio.gather(c.send(K.END_TXN, 3, end),
                                                    c.send(K.DESCRIBE_TRANSACTIONS, 0, describe))
            assert ended.error_code == E.NONE
            assert described.transaction_states[0].transaction_state == "CompleteCommit"
            # The same commit again is answered NONE (Kafka's EndTxn in CompleteCommit).
            assert (await c.send(K.END_TXN, 3, end)).error_code == E.NONE
            wrong = _req(K.END_TXN, transactional_id="h", producer_id=pid + 1, producer_epoch=epoch, committed=True)
            assert (await c.send(K.END_TXN, 3, wrong)).error_code == E.INVALID_PRODUCER_ID_MAPPING


async def test_an_idempotent_producer_always_gets_a_new_id() -> None:
    """Kafka's answer to InitProducerId without a transactional id is a new producer id at epoch
    0, also when the request names the producer's current id and epoch (KIP-360's reset); an
    id without an epoch, or an epoch without an id, is INVALID_REQUEST."""
    async with embedded_async() as bootstrap:
        host, port = bootstrap.rsplit(":", 1)
        async with await BrokerClient.connect(host, int(port)) as c:
            def init(pid: int, epoch: int) -> Any:
                return _req(K.INIT_PRODUCER_ID, transactional_id=None, transaction_timeout_ms=60000,
                            producer_id=pid, producer_epoch=epoch)

            first = await c.send(K.INIT_PRODUCER_ID, 4, init(-1, -1))
            assert first.error_code == 0 and first.producer_id >= 0 and first.producer_epoch == 0
            again = await c.send(K.INIT_PRODUCER_ID, 4, init(first.producer_id, first.producer_epoch))
            assert again.error_code == 0 and again.producer_epoch == 0
            assert again.producer_id != first.producer_id
            for pid, epoch in ((first.producer_id, -1), (-1, 3)):
                bad = await c.send(K.INIT_PRODUCER_ID, 4, init(pid, epoch))
                assert (bad.error_code, bad.producer_id, bad.producer_epoch) == (E.INVALID_REQUEST, -1, -1)
