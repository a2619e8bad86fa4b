"""What a LeaderAndIsr and an UpdateMetadata of every partition cost to build, encode and parse.

A new controller (or a restarted broker's) sends every partition's state to every broker: each
request is built by the controller, encoded for each other broker and parsed by it, and each
broker answers LeaderAndIsr with an error per partition, which the controller parses. This
times those steps for ``--partitions`` partitions (topics of 500, three replicas each) with the
generic codec (kafka-python's schema codec, which kaflet used for them before) and with
kaflet/protocol/controller_codec.py, taking turns round by round in one process, the collector
set up as in ``kaflet broker`` (start-up frozen, threshold 50,000). Medians of ``--rounds``.

    python benchmarks/controller_codec.py [--partitions 10000,20000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kaflet.protocol import codec  # noqa: E402
from kaflet.protocol import controller_codec as cc  # noqa: E402
from kaflet.protocol.api_keys import ApiKey  # noqa: E402

STEPS = ("LeaderAndIsr build", "encode", "parse", "response build", "encode", "parse",
         "UpdateMetadata build", "encode", "parse")


def _generic_steps(topics: list[tuple[str, uuid.UUID]], per_topic: int) -> list[Callable[[Any], Any]]:
    R = codec.request_class(ApiKey.LEADER_AND_ISR)
    T, A = R.LeaderAndIsrTopicState, codec.response_class(ApiKey.LEADER_AND_ISR)
    P, E = T.LeaderAndIsrPartitionState, A.LeaderAndIsrTopicError
    U = codec.request_class(ApiKey.UPDATE_METADATA)
    UT = U.UpdateMetadataTopicState
    UP = UT.UpdateMetadataPartitionState
    return [
        lambda _: R(controller_id=1, controller_epoch=2, broker_epoch=3, type=0, live_leaders=[], topic_states=[
            T(topic_name=name, topic_id=tid, partition_states=[P(
                partition_index=i, controller_epoch=2, leader=1 + i % 3, leader_epoch=4, isr=[1, 2, 3],
                zk_version=5, replicas=[1, 2, 3], adding_replicas=[], removing_replicas=[], is_new=False)
                for i in range(per_topic)]) for name, tid in topics]),
        lambda req: bytes(req.encode(version=5)),
        lambda body: R.decode(body, version=5),
        lambda req: A(error_code=0, topics=[E(topic_id=t.topic_id, partition_errors=[
            E.LeaderAndIsrPartitionError(partition_index=p.partition_index, error_code=0)
            for p in t.partition_states]) for t in req.topic_states]),
        lambda answer: bytes(answer.encode(version=5)),
        lambda body: A.decode(body, version=5),
        lambda _: U(controller_id=1, controller_epoch=2, broker_epoch=3, live_brokers=[], topic_states=[
            UT(topic_name=name, topic_id=tid, partition_states=[UP(
                partition_index=i, controller_epoch=2, leader=1 + i % 3, leader_epoch=4, isr=[1, 2, 3],
                zk_version=5, replicas=[1, 2, 3], offline_replicas=[]) for i in range(per_topic)])
            for name, tid in topics]),
        lambda req: bytes(req.encode(version=7)),
        lambda body: U.decode(body, version=7),
    ]


def _own_steps(topics: list[tuple[str, uuid.UUID]], per_topic: int) -> list[Callable[[Any], Any]]:
    return [
        lambda _: cc.LeaderAndIsrRequest(1, 2, 3, 0, [cc.LeaderAndIsrTopicState(name, tid, [
            cc.LeaderAndIsrPartitionState(i, 2, 1 + i % 3, 4, [1, 2, 3], 5, [1, 2, 3], [], [], False)
            for i in range(per_topic)]) for name, tid in topics], []),
        lambda req: req.encode(version=5),
        cc.decode_leader_and_isr_request,
        lambda req: cc.LeaderAndIsrResponse(0, [cc.LeaderAndIsrTopicError(t.topic_id, [
            cc.LeaderAndIsrPartitionError(p.partition_index, 0) for p in t.partition_states])
            for t in req.topic_states]),
        lambda answer: answer.encode(version=5),
        cc.decode_leader_and_isr_response,
        lambda _: cc.UpdateMetadataRequest(1, 2, 3, [cc.UpdateMetadataTopicState(name, tid, [
            cc.UpdateMetadataPartitionState(i, 2, 1 + i % 3, 4, [1, 2, 3], 5, [1, 2, 3], [])
            for i in range(per_topic)]) for name, tid in topics], []),
        lambda req: req.encode(version=7),
        cc.decode_update_metadata_request,
    ]


def _run(steps: list[Callable[[Any], Any]]) -> list[float]:
    """Each step's seconds; a step gets the previous one's result (a build starts a chain)."""
    times = []
    value: Any = None
    for step in steps:
        t0 = time.perf_counter()
        value = step(value)
        times.append(time.perf_counter() - t0)
    return times


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--partitions", default="10000,20000", help="comma-separated partition counts")
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args()
    gc.freeze()
    gc.set_threshold(50_000, 10, 10)  # as kaflet/server/main.py sets it after start-up
    for n in (int(x) for x in args.partitions.split(",")):
        topics = [(f"topic-{t}", uuid.uuid4()) for t in range(max(1, n // 500))]
        per_topic = n // len(topics)
        kinds = {"generic": _generic_steps(topics, per_topic), "own": _own_steps(topics, per_topic)}
        runs: dict[str, list[list[float]]] = {k: [] for k in kinds}
        for _ in range(args.rounds):
            for kind, steps in kinds.items():
                runs[kind].append(_run(steps))
        print(f"{n} partitions, median of {args.rounds} rounds, ms")
        print(f"  {'step':22} {'generic':>9} {'own':>9} {'own/generic':>12}")
        totals = {k: 0.0 for k in kinds}
        for i, step in enumerate(STEPS):
            med = {k: statistics.median(r[i] for r in runs[k]) * 1000 for k in kinds}
            for k in kinds:
                totals[k] += med[k]
            print(f"  {step:22} {med['generic']:9.1f} {med['own']:9.1f} {med['own'] / med['generic']:12.2f}")
        print(f"  {'all':22} {totals['generic']:9.1f} {totals['own']:9.1f} {totals['own'] / totals['generic']:12.2f}")


if __name__ == "__main__":
    main()
