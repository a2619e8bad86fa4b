"""Hostile input: the broker answers or closes the offending connection, logs one line, and
keeps serving a producer that runs alongside."""

from __future__ import annotations

import asyncio
import os
import random
import struct
import sys
import threading
import time
import uuid

import pytest
from confluent_kafka import Producer

from kaflet.protocol import codec
from kaflet.protocol.api_keys import ApiKey
from kaflet.protocol.records import Record, build_batch
from tests.support.hostile import HUGE, HugeFramePeer
from tests.support.raw_client import RawClient
from tests.support.topics import create_topic


@pytest.fixture
def busy_producer(kaflet_broker):
    """A producer that keeps producing during the test; yields a function returning its tally."""
    topic = f"steady-{uuid.uuid4().hex[:6]}"
    create_topic(kaflet_broker.bootstrap, topic, 1)
    stop = threading.Event()
    tally = {"sent": 0, "ok": 0, "err": 0}

    def run() -> None:
        p = Producer({"bootstrap.servers": kaflet_broker.bootstrap, "linger.ms": 1, "acks": "all"})

        def cb(err, _msg):
            tally["err" if err else "ok"] += 1

        while not stop.is_set():
            p.produce(topic, b"x" * 100, on_delivery=cb)
            tally["sent"] += 1
            p.poll(0.005)
        p.flush(30)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    yield tally
    stop.set()
    t.join(60)
    assert tally["err"] == 0 and tally["ok"] == tally["sent"] and tally["ok"] > 0, tally


def _produce_body(topic: str, records: bytes, version: int = 7, acks: int = -1) -> bytes:
    cls = codec.request_class(0)
    req = cls(transactional_id=None, acks=acks, timeout_ms=5000, topic_data=[
        cls.TopicProduceData(name=topic, partition_data=[cls.TopicProduceData.PartitionProduceData(index=0, records=records)])])
    return bytes(req.encode(version=version))


# Runs `kaflet` and then reports its peak RSS (KiB) on stderr's last line.
# The peak RSS of this process's own image: /proc's VmHWM starts again at exec, whereas
# getrusage's ru_maxrss keeps the forking pytest worker's peak across the exec.
_CLI_WITH_PEAK_RSS = """
import sys
from kaflet.cli.main import main
try:
    main()
finally:
    with open("/proc/self/status") as f:
        print(next(line.split()[1] for line in f if line.startswith("VmHWM:")), file=sys.stderr)
"""


async def test_cli_refuses_a_response_announcing_two_gigabytes(kaflet_broker):
    """`kaflet configs` meets a peer (in front of a real broker) that answers its DescribeConfigs
    with a 2 GiB size: one error line, the connection closed, and no such allocation."""
    peer = HugeFramePeer(hostile_apis={ApiKey.DESCRIBE_CONFIGS}, upstream=("127.0.0.1", kaflet_broker.port))
    port = await peer.start()
    try:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", _CLI_WITH_PEAK_RSS, "configs", "--bootstrap-server", f"127.0.0.1:{port}",
            "--describe", "--entity-type", "brokers", "--entity-default",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        _, err = await asyncio.wait_for(proc.communicate(), 60)
        await peer.wait_answered(1)
    finally:
        await peer.close()
    *lines, peak_kib = err.decode().strip().splitlines()
    print(f"kaflet configs: peak RSS {int(peak_kib) / 1024:.1f} MiB")
    assert proc.returncode == 1
    assert len(lines) == 1 and lines[0].startswith("Error: "), lines
    assert f"announced a response of {HUGE} bytes, more than receive.message.max.bytes (100000000)" in lines[0]
    assert int(peak_kib) * 1024 < 256 * 2**20


def test_garbage_frames_close_only_that_connection(kaflet_broker, busy_producer):
    rng = random.Random(7)
    for _ in range(50):
        c = RawClient(kaflet_broker.bootstrap)
        payload = bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 200)))
        c.send_raw(struct.pack(">i", len(payload)) + payload)
        # It is answered (a valid-looking header by chance) or closed; never a hang or crash.
        try:
            c.sock.settimeout(5)
            c.read_frame()
        except (ConnectionError, OSError):
            pass
        c.close()
    assert kaflet_broker.alive


def test_frame_claiming_two_gigabytes_is_refused(kaflet_broker, busy_producer):
    c = RawClient(kaflet_broker.bootstrap)
    c.send_raw(struct.pack(">i", 2_000_000_000) + b"\x00\x12\x00\x00")
    assert c.is_closed_by_peer()
    c.close()
    assert "larger than socket.request.max.bytes" in kaflet_broker.new_log()


def test_truncated_frame_then_disconnect(kaflet_broker, busy_producer):
    c = RawClient(kaflet_broker.bootstrap)
    c.send_raw(struct.pack(">i", 1000) + b"\x00\x03\x00\x01" + os.urandom(20))
    c.close()
    time.sleep(0.2)
    assert kaflet_broker.alive


def test_unknown_api_key_and_version(kaflet_broker, busy_producer):
    c = RawClient(kaflet_broker.bootstrap)
    c.send_raw(c.frame(9999 % 32768, 0, b""))
    assert c.is_closed_by_peer()
    c.close()
    c = RawClient(kaflet_broker.bootstrap)
    c.send_raw(c.frame(3, 99, b""))  # Metadata v99
    assert c.is_closed_by_peer()
    c.close()
    # ApiVersions at an unknown version answers UNSUPPORTED_VERSION (v0 body) instead.
    c = RawClient(kaflet_broker.bootstrap)
    c.send_raw(c.frame(18, 99, b""))
    data = c.read_frame()
    resp = codec.response_class(18).decode(data[4:], version=0)
    assert resp.error_code == 35 and any(k.api_key == 0 for k in resp.api_keys)
    c.close()


def test_bad_crc_batch_gets_corrupt_message(kaflet_broker, busy_producer):
    topic = f"crc-{uuid.uuid4().hex[:6]}"
    create_topic(kaflet_broker.bootstrap, topic, 1)
    batch = bytearray(build_batch([Record(0, 0, b"k", b"v" * 50, [])]))
    batch[-3] ^= 0xFF  # corrupt a record byte covered by the CRC
    c = RawClient(kaflet_broker.bootstrap)
    c.send_raw(c.frame(0, 7, _produce_body(topic, bytes(batch))))
    resp = c.read_response(0, 7)
    assert resp.responses[0].partition_responses[0].error_code == 2  # CORRUPT_MESSAGE
    # The connection stays usable and nothing was appended.
    lo = codec.request_class(2)
    req = lo(replica_id=-1, isolation_level=0, topics=[lo.ListOffsetsTopic(name=topic, partitions=[
        lo.ListOffsetsTopic.ListOffsetsPartition(partition_index=0, current_leader_epoch=-1, timestamp=-1)])])
    offsets = c.request(2, 5, req)
    assert offsets.topics[0].partitions[0].offset == 0
    c.close()


def test_truncated_batch_and_old_magic_are_refused(kaflet_broker, busy_producer):
    topic = f"trunc-{uuid.uuid4().hex[:6]}"
    create_topic(kaflet_broker.bootstrap, topic, 1)
    batch = build_batch([Record(0, 0, b"k", b"v" * 50, [])])
    c = RawClient(kaflet_broker.bootstrap)
    c.send_raw(c.frame(0, 7, _produce_body(topic, batch[:-10])))
    assert c.read_response(0, 7).responses[0].partition_responses[0].error_code in (2, 87)
    old = bytearray(batch)
    old[16] = 1  # magic 1
    c.send_raw(c.frame(0, 7, _produce_body(topic, bytes(old))))
    assert c.read_response(0, 7).responses[0].partition_responses[0].error_code == 87  # INVALID_RECORD
    c.close()
