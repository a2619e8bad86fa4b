"""`kaflet leader-election` (kafka-leader-election.sh): flags, the JSON file, and what a single
broker answers. The elections on a 3-broker cluster are in tests/cluster/test_cli_cluster.py."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from kaflet.protocol import codec
from kaflet.protocol.api_keys import ApiKey
from tests.support.cli import assert_one_line_error, assert_usage_error, run
from tests.support.raw_client import RawClient


def elect(bootstrap: str, *args: str) -> tuple[int, str, str]:
    proc = run("leader-election", "--bootstrap-server", bootstrap, "--timeout", "10", *args)
    return proc.returncode, proc.stdout, proc.stderr


def advertises(bootstrap: str, api_key: int) -> bool:
    """Whether the broker lists ``api_key`` in its ApiVersions answer."""
    client = RawClient(bootstrap)
    try:
        resp = client.request(ApiKey.API_VERSIONS, 0, codec.request_class(ApiKey.API_VERSIONS)())
    finally:
        client.close()
    return any(k.api_key == api_key for k in resp.api_keys)


@pytest.mark.parametrize("args", [
    ["--all-topic-partitions"],                                             # no --election-type
    ["--election-type", "dirty", "--all-topic-partitions"],
    ["--election-type", "preferred"],                                       # no partitions chosen
    ["--election-type", "preferred", "--all-topic-partitions", "--topic", "t", "--partition", "0"],
    ["--election-type", "preferred", "--topic", "t"],                       # --topic needs --partition
    ["--election-type", "preferred", "--partition", "0", "--all-topic-partitions"],
    ["--election-type", "preferred", "--topic", "t", "--partition", "-1"],
    ["--election-type", "preferred", "--path-to-json-file", "/nonexistent/elect.json"],
])
def test_usage_errors(args: list[str]) -> None:
    assert_usage_error(run("leader-election", "--bootstrap-server", "127.0.0.1:1", *args))


def test_bootstrap_server_is_required() -> None:
    assert_usage_error(run("leader-election", "--election-type", "preferred", "--all-topic-partitions"))


@pytest.mark.parametrize("content, fragment", [
    ("", "not valid JSON"),
    ("{not json", "not valid JSON"),
    ('[{"topic": "t", "partition": 0}]', 'JSON object with a "partitions" list'),
    ('{"version": 1}', 'missing "partitions" field'),
    ('{"partitions": {"topic": "t"}}', '"partitions"'),
    ('{"partitions": [{"topic": "t"}]}', "Invalid entry"),
    ('{"partitions": [{"topic": "t", "partition": "0"}]}', "Invalid entry"),
    ('{"partitions": [{"topic": "", "partition": 0}]}', "Invalid entry"),
    ('{"partitions": [{"topic": "t", "partition": -2}]}', "Invalid partition -2"),
    ('{"partitions": [{"topic": "t", "partition": 0}, {"topic": "u", "partition": 1},'
     ' {"topic": "t", "partition": 0}]}', "duplicate partitions: t-0"),
])
def test_json_file_errors(tmp_path: Path, content: str, fragment: str) -> None:
    path = tmp_path / "elect.json"
    path.write_text(content)
    # Checked before any broker is contacted: the unreachable bootstrap is never used.
    proc = run("leader-election", "--bootstrap-server", "127.0.0.1:1", "--election-type", "preferred",
               "--path-to-json-file", str(path))
    assert_one_line_error(proc, fragment)
    assert proc.stdout == ""


def test_unreachable_broker() -> None:
    proc = run("leader-election", "--bootstrap-server", "127.0.0.1:1", "--timeout", "2",
               "--election-type", "preferred", "--all-topic-partitions")
    assert_one_line_error(proc, "Could not reach a broker at 127.0.0.1:1")


def test_bad_admin_config_file(tmp_path: Path) -> None:
    conf = tmp_path / "admin.properties"
    conf.write_text("this line has no separator\n")
    for option in ("--admin.config", "--command-config"):
        assert_one_line_error(run("leader-election", "--bootstrap-server", "127.0.0.1:1", option, str(conf),
                                  "--election-type", "preferred", "--all-topic-partitions"), "Invalid line")


def test_single_broker(bootstrap: str, tmp_path: Path) -> None:
    """One broker: an RF=1 topic's only replica already leads. A broker without ElectLeaders
    must give one clear line instead (no traceback)."""
    topic = f"elect-{uuid.uuid4().hex[:8]}"
    created = run("topics", "--bootstrap-server", bootstrap, "--create", "--topic", topic, "--partitions", "2",
                  "--replication-factor", "1")
    assert created.returncode == 0, created
    path = tmp_path / "elect.json"
    path.write_text(json.dumps({"partitions": [{"topic": topic, "partition": 1}, {"topic": topic, "partition": 0}]}))
    runs = [
        ["--election-type", "preferred", "--topic", topic, "--partition", "0"],
        ["--election-type", "PREFERRED", "--path-to-json-file", str(path)],
        ["--election-type", "unclean", "--all-topic-partitions"],
    ]
    if not advertises(bootstrap, ApiKey.ELECT_LEADERS):
        for args in runs:
            assert_one_line_error(run("leader-election", "--bootstrap-server", bootstrap, *args),
                                  "Leader election failed: the broker does not support ElectLeaders")
        return
    code, out, err = elect(bootstrap, *runs[0])
    assert (code, out, err) == (0, f"Valid replica already elected for partitions {topic}-0\n", "")
    code, out, err = elect(bootstrap, *runs[1])
    assert (code, out, err) == (0, f"Valid replica already elected for partitions {topic}-0, {topic}-1\n", "")
    # Across the cluster, partitions needing no election are left out of the answer (Kafka).
    code, out, err = elect(bootstrap, *runs[2])
    assert (code, err) == (0, "") and topic not in out
    # An unknown partition is that partition's error, and the tool fails.
    proc = run("leader-election", "--bootstrap-server", bootstrap, "--election-type", "preferred",
               "--topic", topic, "--partition", "9")
    assert proc.returncode == 1
    assert f"Error completing leader election (PREFERRED) for partition: {topic}-9: " in proc.stdout
    assert proc.stderr.strip() == "Error: 1 replica(s) could not be elected"
