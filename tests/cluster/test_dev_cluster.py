"""`kaflet dev-cluster`: argument errors, the ZooKeeper it starts and keeps, a broker that dies
at start-up, and a stop by SIGTERM, all with real processes that must be gone afterwards.

The run with brokers that form a cluster is in test_cli_cluster.py.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
from pathlib import Path

import pytest

from kaflet.metadata.zk_testing import ZooKeeperServer
from tests.support.cli import CLI, assert_one_line_error, assert_usage_error, free_port_range, run
from tests.support.cluster import processes_mentioning

pytestmark = pytest.mark.timeout(120)


def dev_cluster(*args: str, timeout: float = 90, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, "dev-cluster", *args], capture_output=True, text=True, timeout=timeout, env=env)


@pytest.mark.parametrize("args", [
    ["--brokers", "0"],
    ["--zookeeper", "no-port-here"],
    ["--zookeeper", "h:1/ch root"],
    ["--override", "broker.id=7"],
    ["--override", "listeners=PLAINTEXT://:1"],
    ["--override", "log.dirs=/tmp/x"],
    ["--override", "zookeeper.connect=h:1"],
    ["--override", "novalue"],
    ["--port", "65535", "--brokers", "2"],
])
def test_argument_errors(args: list[str], tmp_path: Path) -> None:
    proc = run("dev-cluster", "--data-dir", str(tmp_path / "dc"), *args)
    assert_usage_error(proc)
    assert not (tmp_path / "dc").exists()  # nothing started, nothing made


def test_busy_port_is_one_line_error(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        assert_one_line_error(run("dev-cluster", "--brokers", "1", "--port", str(port),
                                  "--data-dir", str(tmp_path / "dc")), f"Port {port}", "in use")


def test_missing_java_is_one_line_error(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("ZOOKEEPER_CLASSPATH", "ZOOKEEPER_HOME")}
    env["PATH"] = str(tmp_path)  # no java there
    proc = dev_cluster("--brokers", "1", "--port", str(free_port_range(1)), "--data-dir", str(tmp_path / "dc"),
                       env=env)
    assert_one_line_error(proc, "Cannot start ZooKeeper", "java is not installed")


def test_broker_dying_at_start_stops_everything_and_keeps_zookeeper_data(tmp_path: Path) -> None:
    data = tmp_path / "dc"
    base = free_port_range(2)
    # Every broker refuses this value and exits: the tool must show why and stop ZooKeeper.
    args = ["--brokers", "2", "--port", str(base), "--data-dir", str(data),
            "--override", "log.segment.bytes=not-a-number"]
    proc = dev_cluster(*args)
    assert proc.returncode == 1, proc
    assert "Traceback" not in proc.stderr
    assert "ZooKeeper listening on 127.0.0.1:" in proc.stdout and "zookeeper.connect=127.0.0.1:" in proc.stdout
    assert f"Last lines of {data.resolve()}/broker-1.log (broker 1):" in proc.stderr
    assert "log.segment.bytes" in proc.stderr  # the broker's own reason, from its log
    assert proc.stderr.strip().splitlines()[-1].startswith("Error: Broker 1 exited with code 1 before listening")
    assert processes_mentioning(str(data)) == []
    # ZooKeeper's data stays under the data dir and a second run starts on it.
    snapshots = sorted(p.name for p in (data / "zookeeper" / "data" / "version-2").iterdir())
    assert snapshots, "ZooKeeper wrote nothing"
    zk = ZooKeeperServer(data_dir=data / "zookeeper").start()
    try:
        from kazoo.client import KazooClient

        client = KazooClient(zk.connect_string)
        client.start(15)
        client.create("/left-by-the-test", b"1")
        client.stop()
        client.close()
    finally:
        zk.stop()
    again = dev_cluster(*args)
    assert again.returncode == 1
    log = (data / "zookeeper" / "zookeeper.log").read_text(errors="replace")
    # The second run's ZooKeeper loaded the transaction the test made (its log is appended to).
    loaded = re.findall(r"Snapshot loaded in \d+ ms, highest zxid is (0x[0-9a-f]+)", log)
    assert len(loaded) >= 3 and int(loaded[-1], 16) > 0, loaded
    assert processes_mentioning(str(data)) == []


def test_external_zookeeper_is_used_not_started(zk_server: ZooKeeperServer, tmp_path: Path) -> None:
    data = tmp_path / "dc"
    proc = dev_cluster("--brokers", "1", "--port", str(free_port_range(1)), "--data-dir", str(data),
                       "--zookeeper", f"{zk_server.connect_string}/mine", "--override", "log.segment.bytes=x")
    assert proc.returncode == 1, proc
    assert "ZooKeeper listening" not in proc.stdout
    assert f"zookeeper.connect={zk_server.connect_string}/mine" in proc.stdout
    assert not (data / "zookeeper").exists()
    assert zk_server.mode() == "standalone"  # not stopped by the tool


def test_sigterm_stops_zookeeper_and_brokers(tmp_path: Path) -> None:
    data = tmp_path / "dc"
    proc = subprocess.Popen([*CLI, "dev-cluster", "--brokers", "2", "--port", str(free_port_range(2)),
                             "--data-dir", str(data)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("ZooKeeper listening on"), line
        # The brokers are being launched now; the stop must find and end them and ZooKeeper.
        os.kill(proc.pid, signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, (out, err)
    assert "SIGTERM received: stopping the cluster." in out and out.rstrip().endswith("Stopped.")
    assert "Traceback" not in err
    assert processes_mentioning(str(data)) == []
