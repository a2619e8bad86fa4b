"""The broker's CPU time per request, by kind: what one small Produce, Fetch or Metadata costs it.

Starts one kaflet broker (bench.py's `BrokerProcess`), or one per ``--checkout`` (a source tree
put first on that broker's PYTHONPATH) to compare code versions under the same machine load,
then sends each kind of request from a raw blocking client (tests/support/raw_client.py) with
every request encoded before the clock starts, so the client's own cost is not in the figure.
The broker's user+system CPU (from /proc/PID/stat) over the requests, divided by their count,
is the figure: far less sensitive to a busy machine than latency. Kinds take turns round by
round, so a busy moment falls on all of them.

    python benchmarks/request_cost.py [--requests 5000] [--rounds 3] [--window 1] [--only produce-acks1,...]
    python benchmarks/request_cost.py --checkout ../baseline --checkout .   # two code versions side by side

``--window`` is how many requests are in flight on the connection: 1 is a paced client (one
request per read on the broker), more is a pipelining one.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import struct
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench import BrokerProcess, cpu_seconds  # noqa: E402

from kaflet.protocol import codec  # noqa: E402
from kaflet.protocol.api_keys import ApiKey, is_flexible  # noqa: E402
from kaflet.protocol.records import Record, build_batch  # noqa: E402
from tests.support.raw_client import RawClient  # noqa: E402
from tests.support.topics import create_topic  # noqa: E402

TOPIC = "request-cost"
VALUE = b"v" * 100
PRODUCE_VERSION = 8  # what librdkafka 2.x sends
FETCH_VERSION = 12


class Kind:
    """One kind of request: ``frames(n)`` encodes n of them, ``check`` decodes one response."""

    def __init__(self, name: str, api_key: int, version: int, build: Callable[[RawClient, int], list[bytes]],
                 check: Callable[[Any], int]) -> None:
        self.name = name
        self.api_key = api_key
        self.version = version
        self.build = build
        self.check = check


def _encode(c: RawClient, api_key: int, version: int, request: Any) -> bytes:
    return c.frame(api_key, version, bytes(request.encode(version=version)))


def _produce_frames(acks: int, idempotent: bool) -> Callable[[RawClient, int], list[bytes]]:
    def build(c: RawClient, n: int) -> list[bytes]:
        pid, epoch = -1, -1
        if idempotent:
            ip = c.request(ApiKey.INIT_PRODUCER_ID, 4, codec.request_class(ApiKey.INIT_PRODUCER_ID)(
                transactional_id=None, transaction_timeout_ms=60000, producer_id=-1, producer_epoch=-1))
            assert ip.error_code == 0, ip
            pid, epoch = ip.producer_id, ip.producer_epoch
        P = codec.request_class(ApiKey.PRODUCE)
        now = int(time.time() * 1000)
        frames = []
        for i in range(n):
            batch = build_batch([Record(0, 0, None, VALUE, [])], base_timestamp=now, producer_id=pid,
                                producer_epoch=epoch, base_sequence=i if idempotent else -1)
            frames.append(_encode(c, ApiKey.PRODUCE, PRODUCE_VERSION, P(
                transactional_id=None, acks=acks, timeout_ms=30000, topic_data=[P.TopicProduceData(
                    name=TOPIC, partition_data=[P.TopicProduceData.PartitionProduceData(index=0, records=batch)])])))
        return frames
    return build


def _produce_error(resp: Any) -> int:
    return int(resp.responses[0].partition_responses[0].error_code)


def _fetch_frames(at_end: bool) -> Callable[[RawClient, int], list[bytes]]:
    """A sessionless fetch of partition 0: of its first batch (one record), or at its end,
    waiting 1 ms for data that does not come (a caught-up consumer's long poll)."""
    def build(c: RawClient, n: int) -> list[bytes]:
        offset = 0
        if at_end:
            L = codec.request_class(ApiKey.LIST_OFFSETS)
            lo = c.request(ApiKey.LIST_OFFSETS, 5, L(replica_id=-1, isolation_level=0, topics=[L.ListOffsetsTopic(
                name=TOPIC, partitions=[L.ListOffsetsTopic.ListOffsetsPartition(
                    partition_index=0, current_leader_epoch=-1, timestamp=-1)])]))
            offset = lo.topics[0].partitions[0].offset
        F = codec.request_class(ApiKey.FETCH)
        T = F.FetchTopic
        request = F(replica_id=-1, max_wait_ms=1 if at_end else 0, min_bytes=1, max_bytes=1 << 20,
                    isolation_level=0, session_id=0, session_epoch=-1, topics=[T(topic=TOPIC, partitions=[
                        T.FetchPartition(partition=0, current_leader_epoch=-1, fetch_offset=offset,
                                         last_fetched_epoch=-1, log_start_offset=-1, partition_max_bytes=1)])],
                    forgotten_topics_data=[], rack_id="")
        return [_encode(c, ApiKey.FETCH, FETCH_VERSION, request) for _ in range(n)]
    return build


def _fetch_error(resp: Any) -> int:
    return int(resp.error_code or resp.responses[0].partitions[0].error_code)


def _same_frames(api_key: int, version: int, **fields: Any) -> Callable[[RawClient, int], list[bytes]]:
    def build(c: RawClient, n: int) -> list[bytes]:
        request = codec.request_class(api_key)(**fields)
        return [_encode(c, api_key, version, request) for _ in range(n)]
    return build


def _metadata_request() -> Callable[[RawClient, int], list[bytes]]:
    M = codec.request_class(ApiKey.METADATA)
    return _same_frames(ApiKey.METADATA, 9, topics=[M.MetadataRequestTopic(name=TOPIC)],
                        allow_auto_topic_creation=False, include_cluster_authorized_operations=False,
                        include_topic_authorized_operations=False)


KINDS = [
    Kind("apiversions", ApiKey.API_VERSIONS, 3, _same_frames(
        ApiKey.API_VERSIONS, 3, client_software_name="request-cost", client_software_version="1"),
        lambda r: int(r.error_code)),
    Kind("metadata", ApiKey.METADATA, 9, _metadata_request(), lambda r: int(r.topics[0].error_code)),
    Kind("produce-acks1", ApiKey.PRODUCE, PRODUCE_VERSION, _produce_frames(1, False), _produce_error),
    Kind("produce-acksall", ApiKey.PRODUCE, PRODUCE_VERSION, _produce_frames(-1, False), _produce_error),
    Kind("produce-idempotent", ApiKey.PRODUCE, PRODUCE_VERSION, _produce_frames(-1, True), _produce_error),
    Kind("fetch-1-record", ApiKey.FETCH, FETCH_VERSION, _fetch_frames(False), _fetch_error),
    Kind("fetch-at-end-wait-1ms", ApiKey.FETCH, FETCH_VERSION, _fetch_frames(True), _fetch_error),
]


def run(c: RawClient, frames: list[bytes], kind: Kind, window: int) -> None:
    """Send every frame with at most ``window`` in flight; every response must be an error-free
    answer to its own request, in order."""
    first_correlation = struct.unpack_from(">i", frames[0], 8)[0]
    skip = 5 if is_flexible(kind.api_key, kind.version) and kind.api_key != ApiKey.API_VERSIONS else 4
    response_class = codec.response_class(kind.api_key)
    sent = 0
    for i in range(len(frames)):
        while sent < len(frames) and sent - i < window:
            c.send_raw(frames[sent])
            sent += 1
        data = c.read_frame()
        correlation = struct.unpack_from(">i", data, 0)[0]
        if correlation != first_correlation + i:
            raise RuntimeError(f"{kind.name}: response {correlation} where {first_correlation + i} was due")
        error = kind.check(response_class.decode(data[skip:], version=kind.version))
        if error:
            raise RuntimeError(f"{kind.name}: error code {error}")


def measure(c: RawClient, pid: int, kind: Kind, n: int, window: int) -> float:
    """Broker CPU microseconds per request of this kind."""
    frames = kind.build(c, n)
    before = cpu_seconds(pid)
    run(c, frames, kind, window)
    return (cpu_seconds(pid) - before) / n * 1e6


@contextlib.contextmanager
def broker_of(checkout: str, workdir: Path) -> Iterator[BrokerProcess]:
    """A broker running the code of ``checkout`` (put first on its PYTHONPATH), or of this
    environment's kaflet for ""."""
    saved = os.environ.get("PYTHONPATH")
    if checkout:
        os.environ["PYTHONPATH"] = os.path.abspath(checkout)
    try:
        broker = BrokerProcess("kaflet", workdir)  # the child is spawned here, with the PYTHONPATH above
    finally:
        if saved is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved
    try:
        broker.wait_ready()
        yield broker
    finally:
        broker.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=5000, help="requests per kind and round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--window", type=int, default=1, help="requests in flight (1: one at a time)")
    ap.add_argument("--only", default="", help="comma-separated kinds: " + ",".join(k.name for k in KINDS))
    ap.add_argument("--checkout", action="append", default=[], metavar="DIR",
                    help="run a broker of this source tree (repeat to compare; they take turns)")
    args = ap.parse_args()
    kinds = [k for k in KINDS if not args.only or k.name in args.only.split(",")]
    checkouts = args.checkout or [""]
    figures: dict[tuple[str, str], list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="request-cost-") as tmp, contextlib.ExitStack() as stack:
        clients: list[tuple[str, int, RawClient]] = []
        for i, checkout in enumerate(checkouts):
            broker = stack.enter_context(broker_of(checkout, Path(tmp) / str(i)))
            print(f"broker pid {broker.proc.pid} on {broker.bootstrap} ({checkout or 'installed kaflet'})",
                  file=sys.stderr, flush=True)
            create_topic(broker.bootstrap, TOPIC)
            c = RawClient(broker.bootstrap, timeout=60)
            stack.callback(c.close)
            clients.append((checkout, broker.proc.pid, c))
        # Fill the topic so fetches find a record, and warm the broker's paths up.
        for kind in kinds:
            for _, pid, c in clients:
                measure(c, pid, kind, min(500, args.requests), args.window)
        # Kinds and brokers take turns, so a busy moment of the machine falls on all of them.
        for _ in range(args.rounds):
            for kind in kinds:
                for checkout, pid, c in clients:
                    figures.setdefault((kind.name, checkout), []).append(
                        measure(c, pid, kind, args.requests, args.window))
    print(f"broker CPU us per request, window {args.window}, {args.requests} requests x {args.rounds} rounds")
    for i, checkout in enumerate(checkouts):
        print(f"  [{i}] {checkout or 'installed kaflet'}")
    # /[0]: the median over rounds of this broker's figure over broker 0's in the same round
    # (paired, so a round the machine was busy in weighs on both).
    print(f"{'kind':<24}{'broker':>7}{'median':>8}{'/[0]':>7}  rounds")
    for kind in kinds:
        first = figures[(kind.name, checkouts[0])]
        for i, checkout in enumerate(checkouts):
            values = figures[(kind.name, checkout)]
            pairs = [v / f for v, f in zip(values, first, strict=True) if f]
            ratio = f"{_median(pairs):.2f}" if pairs else "-"
            print(f"{kind.name:<24}{i:>7}{_median(values):>8.0f}{ratio:>7}  " + " ".join(f"{v:.0f}" for v in values))


def _median(values: list[float]) -> float:
    return sorted(values)[(len(values) - 1) // 2]

if __name__ == "__main__":
    main()
