"""KafkaJS (the Node.js client, pinned in tests/js/package.json) against a real kaflet broker.

The scripts under tests/js/ take the bootstrap address, drive KafkaJS and print one JSON object;
this module asserts on exact partitions, offsets and values. What KafkaJS produced is read back
with confluent-kafka, since KafkaJS can only fetch through a consumer group. Node.js and npm
are required (CI has them): without them these tests fail rather than skip.

KafkaJS's own logs go to the scripts' stderr (shown when one fails); `KAFKAJS_LOG=debug pytest ...`
turns on its request/response tracing.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import time
import uuid
from collections import Counter, defaultdict
from pathlib import Path

import pytest
from confluent_kafka import (
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    Consumer,
    KafkaException,
    TopicPartition,
)

from tests.support.topics import create_topic

JS_DIR = Path(__file__).resolve().parents[1] / "js"
PARTITIONS = 3
N = 2000
CHUNK = 250  # produce.mjs sends this many messages per send()/sendBatch() call


def murmur2(key: bytes) -> int:
    """Kafka's murmur2 (the Java client's Utils.murmur2) as a signed 32-bit int."""
    m = 0x5BD1E995
    mask = 0xFFFFFFFF
    h = (0x9747B28C ^ len(key)) & mask
    whole = len(key) - len(key) % 4
    for i in range(0, whole, 4):
        k = int.from_bytes(key[i:i + 4], "little")
        k = (k * m) & mask
        k ^= k >> 24
        k = (k * m) & mask
        h = ((h * m) & mask) ^ k
    tail = key[whole:]
    if tail:
        for shift, byte in enumerate(tail):
            h ^= byte << (8 * shift)
        h = (h * m) & mask
    h ^= h >> 13
    h = (h * m) & mask
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def murmur2_partition(key: bytes, partitions: int) -> int:
    """The partition of a keyed message under KafkaJS's (Java-compatible) default partitioner."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions


@pytest.fixture(scope="session")
def kafkajs() -> Path:
    """tests/js with its locked dependencies installed by `npm ci`.

    pytest-xdist workers share tests/js: `npm ci` wipes node_modules first, so it runs under a
    file lock and only when node_modules was not installed from this package-lock.json yet."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.fail("the KafkaJS tests need Node.js: `node`/`npm` are not on PATH")
    lock_hash = hashlib.sha256((JS_DIR / "package-lock.json").read_bytes()).hexdigest()
    stamp = JS_DIR / "node_modules" / ".kaflet-installed-from"
    with open(JS_DIR / ".npm-ci.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not stamp.exists() or stamp.read_text() != lock_hash:
            out = subprocess.run([npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"], cwd=JS_DIR,
                                 capture_output=True, text=True, timeout=180)
            assert out.returncode == 0, f"npm ci failed:\n{out.stdout}\n{out.stderr}"
            stamp.write_text(lock_hash)
    return JS_DIR


def _node(js_dir: Path, script: str, *args: str, timeout: float = 60) -> dict:
    env = dict(os.environ, KAFKAJS_NO_PARTITIONER_WARNING="1")
    out = subprocess.run([shutil.which("node") or "node", script, *args], cwd=js_dir, capture_output=True, text=True, timeout=timeout,
                         env=env)
    assert out.returncode == 0, f"node {script} {' '.join(args)} exited {out.returncode}:\n{out.stderr[-4000:]}"
    return json.loads(out.stdout.strip().splitlines()[-1])


def _read_back(bootstrap: str, topic: str, partitions: int, expect: int) -> dict[int, list]:
    """Every record of `topic` via confluent-kafka: partition -> [(offset, key, value, headers, ts)]."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False,
                  "enable.partition.eof": False})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out: dict[int, list] = defaultdict(list)
    got = 0
    deadline = time.monotonic() + 30
    try:
        while got < expect and time.monotonic() < deadline:
            for m in c.consume(1000, timeout=0.5):
                if m.error():
                    raise KafkaException(m.error())
                out[m.partition()].append((m.offset(), m.key(), m.value(), m.headers(), m.timestamp()))
                got += 1
        for m in c.consume(1000, timeout=0.3):  # nothing beyond what was produced
            if m.error():
                raise KafkaException(m.error())
            out[m.partition()].append((m.offset(), m.key(), m.value(), m.headers(), m.timestamp()))
    finally:
        c.close()
    return dict(out)


def _expected_layout(n: int) -> dict[int, list[int]]:
    """Message indexes per partition, in produce order, under KafkaJS's default partitioner."""
    layout: dict[int, list[int]] = defaultdict(list)
    for i in range(n):
        layout[murmur2_partition(f"k{i % 37}".encode(), PARTITIONS)].append(i)
    return layout


@pytest.mark.parametrize(("key", "want"), [
    (b"", 275646681), (b"21", -973932308), (b"abc", 479470107), (b"foobar", -790332482),
    (b"a-little-bit-long-string", -985981536), (b"a-little-bit-longer-string", -1486304829),
])
def test_murmur2_matches_kafka(key, want):
    """Reference values of Kafka's murmur2 (the Java client's and KafkaJS's agree on them)."""
    assert murmur2(key) == want


def test_admin(kaflet_broker, kafkajs):
    prefix = f"kjs-admin-{uuid.uuid4().hex[:6]}"
    a, b = f"{prefix}-a", f"{prefix}-b"
    r = _node(kafkajs, "admin.mjs", kaflet_broker.bootstrap, prefix)

    assert r["created"] is True
    assert r["createdAgain"] is False  # TOPIC_ALREADY_EXISTS, which KafkaJS turns into `false`
    assert r["validateOnly"] is True
    assert r["createErrors"] == {"replicationFactor3": "INVALID_REPLICATION_FACTOR", "unknownConfig": "INVALID_CONFIG",
                                 "invalidName": "INVALID_TOPIC_EXCEPTION", "zeroPartitions": "INVALID_PARTITIONS"}
    assert r["listed"] == [a, b]  # neither the validate-only topic nor the failed ones were created
    cluster = r["cluster"]
    node = cluster["controller"]
    assert cluster["brokers"] == [{"nodeId": node, "host": "127.0.0.1", "port": kaflet_broker.port}]
    assert cluster["clusterId"]
    assert r["createdWithDefaults"] is True  # -1 partitions / replication factor: the broker's defaults
    assert r["defaultsMetadata"] == [{"name": f"{prefix}-defaults", "partitions": [
        {"id": 0, "error": 0, "leader": node, "replicas": [node], "isr": [node]}]}]
    by_name = {t["name"]: t["partitions"] for t in r["metadata"]}
    assert sorted(by_name) == [a, b]
    assert [p["id"] for p in by_name[a]] == [0, 1, 2]
    assert [p["id"] for p in by_name[b]] == [0]
    for p in by_name[a] + by_name[b]:
        assert p == {"id": p["id"], "error": 0, "leader": node, "replicas": [node], "isr": [node]}
    assert r["allMetadataNames"] == [a, b]
    assert r["unknownMetadataError"] == "UNKNOWN_TOPIC_OR_PARTITION"

    (after,) = r["afterCreatePartitions"]
    assert after["name"] == a and [p["id"] for p in after["partitions"]] == [0, 1, 2, 3, 4]
    assert all(p["leader"] == node and p["error"] == 0 for p in after["partitions"])
    assert r["shrinkError"] == "INVALID_PARTITIONS"

    assert r["offsets"] == [{"partition": p, "offset": "0", "high": "0", "low": "0"} for p in range(5)]
    assert sorted(r["offsetsByTimestamp"], key=lambda o: o["partition"]) == [
        {"partition": p, "offset": "0"} for p in range(5)]
    assert r["listedAfterDelete"] == [a]
    assert r["deleteUnknownError"] == "UNKNOWN_TOPIC_OR_PARTITION"


@pytest.mark.parametrize("mode", ["idempotent", "acks-1", "acks1"])
def test_produce_gzip_keyed_batches(kaflet_broker, kafkajs, mode):
    bootstrap = kaflet_broker.bootstrap
    topic = f"kjs-{mode}-{uuid.uuid4().hex[:6]}"
    tag = f"{mode}-{uuid.uuid4().hex[:4]}"
    create_topic(bootstrap, topic, PARTITIONS)
    r = _node(kafkajs, "produce.mjs", bootstrap, topic, mode, str(N), tag)

    layout = _expected_layout(N)
    counts = {p: len(idx) for p, idx in layout.items()}
    assert sum(counts.values()) == N and len(counts) == PARTITIONS

    # Every send()/sendBatch() got one result per partition it touched, with gap-free base offsets.
    assert r["half"] == N // 2
    expected_sends = []
    next_offset: Counter[int] = Counter()
    for start in range(0, N, CHUNK):
        per_part = Counter(murmur2_partition(f"k{i % 37}".encode(), PARTITIONS) for i in range(start, start + CHUNK))
        chunk = [{"partition": p, "errorCode": 0, "baseOffset": next_offset[p]} for p in sorted(per_part)]
        next_offset.update(per_part)
        expected_sends.append(chunk)
    got_sends = [sorted(s, key=lambda x: x["partition"]) for s in _split(r["sends"], [len(c) for c in expected_sends])]
    assert got_sends == expected_sends

    assert r["offsets"] == {str(p): {"low": 0, "high": counts[p]} for p in range(PARTITIONS)}
    first_half = Counter(murmur2_partition(f"k{i % 37}".encode(), PARTITIONS) for i in range(N // 2))
    assert r["offsetsAtSplit"] == {str(p): first_half[p] for p in range(PARTITIONS)}
    assert r["offsetsAtPast"] == {str(p): 0 for p in range(PARTITIONS)}
    assert r["offsetsAtFuture"] == {str(p): counts[p] for p in range(PARTITIONS)}

    # Read back with confluent-kafka: exactly the produced records, in order, at gap-free offsets.
    back = _read_back(bootstrap, topic, PARTITIONS, N)
    for p in range(PARTITIONS):
        want = [(off, f"k{i % 37}".encode(), f"{tag}-{i}".encode(), [("seq", str(i).encode()), ("tag", tag.encode())])
                for off, i in enumerate(layout[p])]
        assert [rec[:4] for rec in back[p]] == want, f"partition {p}"
        assert all(rec[4][0] == TIMESTAMP_CREATE_TIME for rec in back[p])


def _split(flat: list, sizes: list[int]) -> list[list]:
    out, i = [], 0
    for n in sizes:
        out.append(flat[i:i + n])
        i += n
    assert i == len(flat), f"{len(flat)} send results, expected {i}"
    return out


def test_produce_edge_records(kaflet_broker, kafkajs):
    bootstrap = kaflet_broker.bootstrap
    topic = f"kjs-edge-{uuid.uuid4().hex[:6]}"
    create_topic(bootstrap, topic, PARTITIONS)
    create_topic(bootstrap, f"{topic}-lat", 1, {"message.timestamp.type": "LogAppendTime"})
    r = _node(kafkajs, "edge.mjs", bootstrap, topic)
    t0 = 1700000000000

    sends = {s["label"]: s["results"] for s in r["sends"]}
    assert sends == {
        "gzip-acks1": [{"partition": p, "errorCode": 0, "baseOffset": 0} for p in range(3)],
        "none-acks-1": [{"partition": p, "errorCode": 0, "baseOffset": 2} for p in range(2)],
        "gzip-acks0": [],  # acks 0: no response, KafkaJS reports nothing
        "none-acks-1-after-acks0": [{"partition": 2, "errorCode": 0, "baseOffset": 2}],
    }
    assert r["tooLarge"] == "MESSAGE_TOO_LARGE"  # 1.1 MB > max.message.bytes; nothing appended
    assert r["logAppend"] == [{"partition": 0, "baseOffset": 0, "logAppendTimeInWindow": True}]
    assert r["auto"] == [{"partition": 0, "errorCode": 0, "baseOffset": 0}]
    assert r["autoMetadata"] == [{"name": f"{topic}-auto", "partitions": 1}]
    assert r["offsets"] == {str(p): {"low": 0, "high": 3} for p in range(3)}
    # ListOffsets by timestamp: first offset with timestamp >= t; none -> KafkaJS shows the high watermark.
    assert r["offsetsAt"] == {
        str(t0): {"0": 0, "1": 0, "2": 0},
        str(t0 + 1500): {"0": 2, "1": 0, "2": 0},
        str(t0 + 4500): {"0": 2, "1": 2, "2": 1},
        str(t0 + 6000): {"0": 3, "1": 3, "2": 1},
        str(t0 + 9000): {"0": 3, "1": 3, "2": 3},
    }

    back = _read_back(bootstrap, topic, PARTITIONS, 9)
    ts = (TIMESTAMP_CREATE_TIME,)
    big = ("kaflet-" * (262144 // 7 + 1))[:262144].encode()
    assert back[0] == [(0, None, b"no-key", None, ts + (t0,)),
                       (1, b"tomb", None, None, ts + (t0 + 1000,)),
                       (2, b"plain", b"uncompressed", None, ts + (t0 + 5000,))]
    assert back[1] == [(0, b"multi", b"headers", [("multi", b"a"), ("multi", b"b"), ("bin", b"\x00\x01\x02\xff")],
                        ts + (t0 + 2000,)),
                       (1, b"", b"", None, ts + (t0 + 3000,)),
                       (2, b"plain", b"uncompressed", None, ts + (t0 + 5000,))]
    assert back[2] == [(0, b"big", big, None, ts + (t0 + 4000,)),
                       (1, b"fire", b"and-forget", None, ts + (t0 + 6000,)),
                       (2, b"after", b"acks0", None, ts + (t0 + 7000,))]
    lat = _read_back(bootstrap, f"{topic}-lat", 1, 2)[0]
    assert [(off, k, v) for off, k, v, _, _ in lat] == [(0, b"lat", b"one"), (1, b"lat", b"two")]
    assert {t for *_, t in lat} == {(TIMESTAMP_LOG_APPEND_TIME, lat[0][4][1])}  # broker time, not t0
    assert lat[0][4][1] != t0
    (auto,) = _read_back(bootstrap, f"{topic}-auto", 1, 1)[0]
    assert auto[:4] == (0, b"x", b"auto", None) and auto[4][0] == TIMESTAMP_CREATE_TIME


@pytest.mark.parametrize("mode", ["idempotent", "plain"])
def test_produce_concurrent_sends(kaflet_broker, kafkajs, mode):
    """20 send() calls in flight at once: pipelined Produce requests (idempotent: queued, one in flight)."""
    bootstrap = kaflet_broker.bootstrap
    topic = f"kjs-conc-{mode}-{uuid.uuid4().hex[:6]}"
    tag = uuid.uuid4().hex[:6]
    sends, per_send = 20, 50
    create_topic(bootstrap, topic, PARTITIONS)
    r = _node(kafkajs, "concurrent.mjs", bootstrap, topic, mode, str(sends), str(per_send), tag)

    per_part = Counter(murmur2_partition(f"k{i}".encode(), PARTITIONS) for i in range(per_send))
    assert len(r["results"]) == sends
    base: dict[int, dict[int, int]] = defaultdict(dict)  # partition -> send -> base offset
    for j, results in enumerate(r["results"]):
        assert sorted(x["partition"] for x in results) == sorted(per_part)
        for x in results:
            assert x["errorCode"] == 0
            base[x["partition"]][j] = x["baseOffset"]
    for p, n in per_part.items():  # each send appended one batch of n records per partition, none overlap
        assert sorted(base[p].values()) == [n * k for k in range(sends)]
    assert r["offsets"] == {str(p): {"low": 0, "high": per_part[p] * sends} for p in range(PARTITIONS)}

    back = _read_back(bootstrap, topic, PARTITIONS, per_send * sends)
    for p in per_part:
        keys = [i for i in range(per_send) if murmur2_partition(f"k{i}".encode(), PARTITIONS) == p]
        want = sorted((base[p][j] + pos, f"k{i}".encode(), f"{tag}-{j}-{i}".encode(), [("send", str(j).encode())])
                      for j in range(sends) for pos, i in enumerate(keys))
        assert [rec[:4] for rec in back[p]] == want, f"partition {p}"


def test_consumer_group(kaflet_broker, kafkajs):
    bootstrap = kaflet_broker.bootstrap
    topic = f"kjs-group-{uuid.uuid4().hex[:6]}"
    tag = f"grp-{uuid.uuid4().hex[:4]}"
    n = 500
    create_topic(bootstrap, topic, PARTITIONS)
    _node(kafkajs, "produce.mjs", bootstrap, topic, "idempotent", str(n), tag)
    r = _node(kafkajs, "consume.mjs", bootstrap, topic, str(n), f"kjs-group-{uuid.uuid4().hex[:6]}")

    layout = _expected_layout(n)
    assert r["got"] == n
    for p in range(PARTITIONS):
        want = [[off, f"k{i % 37}", f"{tag}-{i}", {"seq": str(i), "tag": tag}] for off, i in enumerate(layout[p])]
        assert r["partitions"].get(str(p), []) == want, f"partition {p}"
    assert r["committed"] == {str(p): len(layout[p]) for p in range(PARTITIONS)}


def test_group_and_config_admin(kaflet_broker, kafkajs):
    bootstrap = kaflet_broker.bootstrap
    topic = f"kjs-ga-{uuid.uuid4().hex[:6]}"
    r = _node(kafkajs, "group_admin.mjs", bootstrap, topic)

    assert r["consumed"] == 10
    assert r["listGroups"] == [{"groupId": f"{topic}-g", "protocolType": "consumer"}]
    assert r["describeGroup"] == {"errorCode": 0, "state": "Stable", "protocolType": "consumer",
                                  "members": [{"clientId": "kaflet-kafkajs-group-admin", "clientHost": "/127.0.0.1"}]}
    assert r["committed"] == {"0": 5, "1": 5}
    assert r["afterSetOffsets"] == {"0": 2, "1": 5}
    # configSource 1 = DYNAMIC_TOPIC_CONFIG, 5 = DEFAULT_CONFIG
    assert r["configs"] == {"cleanup.policy": {"value": "delete", "isDefault": True, "source": 5},
                            "retention.ms": {"value": "86400000", "isDefault": False, "source": 1}}
    assert r["configsAfterAlter"] == {"retention.ms": {"value": "3600000", "isDefault": False, "source": 1}}
    assert r["offsetsAfterDeleteRecords"] == {"0": {"low": 3, "high": 5}, "1": {"low": 0, "high": 5}}
    assert r["deleteGroups"] == [{"groupId": f"{topic}-g", "errorCode": 0}]
    assert r["listGroupsAfterDelete"] == []
