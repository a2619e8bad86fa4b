"""`kaflet log-dirs --describe` against a real broker: each dir's size and volume, each
replica's size and lag, as tables or as kafka-log-dirs.sh's JSON; bad arguments are usage errors."""

from __future__ import annotations

import json
import os
import uuid

from confluent_kafka import Producer

from tests.support.broker_process import BrokerProcess
from tests.support.cli import assert_one_line_error, assert_usage_error, run
from tests.support.topics import create_topic


def test_describe_as_json_and_as_tables(kaflet_broker: BrokerProcess) -> None:
    bootstrap = kaflet_broker.bootstrap
    topic = f"dirs-{uuid.uuid4().hex[:6]}"
    create_topic(bootstrap, topic, 2)
    p = Producer({"bootstrap.servers": bootstrap})
    for i in range(20):
        p.produce(topic, b"v" * 100, partition=i % 2)
    assert p.flush(10) == 0
    proc = run("log-dirs", "--describe", "--bootstrap-server", bootstrap, "--topic-list", topic, "--json")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "Querying brokers for log directories information"
    assert lines[1].startswith("Received log directory information from brokers ")
    described = json.loads(lines[2])
    assert described["version"] == 1
    (broker,) = described["brokers"]
    (log_dir,) = broker["logDirs"]
    assert log_dir["logDir"] == str(kaflet_broker.data_dir) and log_dir["error"] is None
    sizes = {p["partition"]: p["size"] for p in log_dir["partitions"]}
    assert set(sizes) == {f"{topic}-0", f"{topic}-1"}
    for name, size in sizes.items():
        on_disk = sum(os.path.getsize(kaflet_broker.data_dir / name / f) for f in os.listdir(kaflet_broker.data_dir / name)
                      if f.endswith(".log"))
        assert size == on_disk > 0
    assert all(p["offsetLag"] == 0 and p["isFuture"] is False for p in log_dir["partitions"])

    table = run("log-dirs", "--describe", "--bootstrap-server", bootstrap, "--broker-list",
                str(broker["broker"]), "--topic-list", topic).stdout
    first, *rest = table.splitlines()
    assert first.split() == ["BROKER", "LOG", "DIR", "STATE", "SIZE", "USABLE", "BYTES", "TOTAL", "BYTES"]
    row = rest[0].split()
    st = os.statvfs(kaflet_broker.data_dir)
    assert row[:4] == [str(broker["broker"]), str(kaflet_broker.data_dir), "online", str(sum(sizes.values()))]
    assert int(row[5]) == st.f_blocks * st.f_frsize
    assert f"{topic}-0" in table and f"{topic}-1" in table


def test_bad_arguments(kaflet_broker: BrokerProcess) -> None:
    assert_usage_error(run("log-dirs", "--bootstrap-server", kaflet_broker.bootstrap))  # no --describe
    assert_usage_error(run("log-dirs", "--describe", "--bootstrap-server", kaflet_broker.bootstrap,
                           "--broker-list", "one,two"))
    assert_one_line_error(run("log-dirs", "--describe", "--bootstrap-server", kaflet_broker.bootstrap,
                              "--broker-list", "77"), "77", "not in the cluster")
    assert_one_line_error(run("log-dirs", "--describe", "--bootstrap-server", "127.0.0.1:1", "--timeout", "2"),
                          "could not reach")
