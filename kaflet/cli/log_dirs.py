"""`kaflet log-dirs --describe`: each broker's log directories, like kafka-log-dirs.sh.

For every broker asked (``--broker-list``, default all), DescribeLogDirs v4 over kaflet's own
connection (the client libraries do not offer it): each directory with its state (an offline
one carries KAFKA_STORAGE_ERROR), the bytes of its replicas, the free and total bytes of its
volume, and each replica's size and offset lag (``--topic-list`` keeps some topics). By default
two tables; ``--json`` prints Kafka's JSON line instead, as kafka-log-dirs.sh does.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import click

from kaflet.cli.common import (
    Admin,
    CliError,
    bootstrap_option,
    config_file_option,
    raw_connect,
    timeout_option,
)

_DESCRIBE_LOG_DIRS = 35
_VERSION = 4
#: Kafka's exception class of an error code, as kafka-log-dirs.sh prints it.
_EXCEPTIONS = {56: "org.apache.kafka.common.errors.KafkaStorageException"}


@dataclass
class Replica:
    """One replica in a log dir."""

    topic: str
    partition: int
    size: int
    offset_lag: int
    is_future: bool


@dataclass
class LogDir:
    """One log dir of one broker."""

    broker: int
    path: str
    error: int
    total_bytes: int
    usable_bytes: int
    replicas: list[Replica] = field(default_factory=list)

    @property
    def size(self) -> int:
        return sum(r.size for r in self.replicas)


def _parse_ids(text: str) -> list[int]:
    try:
        ids = [int(part) for part in text.split(",") if part.strip()]
    except ValueError as exc:
        raise click.BadParameter(f"{text!r} is not a comma-separated list of broker ids") from exc
    if not ids:
        raise click.BadParameter("no broker id given")
    return ids


def describe_log_dirs(admin: Admin, broker_ids: list[int] | None, topics: set[str] | None) -> list[LogDir]:
    """The log dirs of the brokers asked (all when None), their replicas kept to ``topics``."""
    from kaflet.protocol import codec

    brokers = {b.id: (str(b.host), int(b.port)) for b in admin.metadata().brokers.values()}
    wanted = sorted(brokers) if broker_ids is None else broker_ids
    unknown = [b for b in wanted if b not in brokers]
    if unknown:
        raise CliError(f"Broker(s) {','.join(map(str, unknown))} are not in the cluster (brokers: "
                       f"{','.join(map(str, sorted(brokers)))}).")
    out: list[LogDir] = []
    request = codec.request_class(_DESCRIBE_LOG_DIRS)(topics=None)
    for broker in wanted:
        host, port = brokers[broker]
        with raw_connect(host, port, admin.conf, admin.timeout_s, admin.bootstrap) as conn:
            try:
                response = conn.request(_DESCRIBE_LOG_DIRS, _VERSION, request)
            except (OSError, ValueError) as exc:
                raise CliError(f"Broker {broker} at {host}:{port} did not answer DescribeLogDirs: {exc}") from exc
        if response.error_code:
            raise CliError(f"Broker {broker} refused DescribeLogDirs: {_error_name(response.error_code)}")
        for result in response.results:
            d = LogDir(broker, result.log_dir, result.error_code, result.total_bytes, result.usable_bytes)
            for t in result.topics:
                if topics is not None and t.name not in topics:
                    continue
                d.replicas += [Replica(t.name, p.partition_index, p.partition_size, p.offset_lag, p.is_future_key)
                               for p in t.partitions]
            d.replicas.sort(key=lambda r: (r.topic, r.partition))
            out.append(d)
    return out


def _error_name(code: int) -> str:
    from kaflet.protocol.errors import ErrorCode

    try:
        return ErrorCode(code).name
    except ValueError:
        return f"error {code}"


def as_json(dirs: list[LogDir]) -> dict[str, Any]:
    """kafka-log-dirs.sh's JSON: brokers, their logDirs with error and partitions."""
    brokers: dict[int, list[dict[str, Any]]] = {}
    for d in dirs:
        brokers.setdefault(d.broker, []).append({
            "logDir": d.path,
            "error": None if d.error == 0 else _EXCEPTIONS.get(d.error, _error_name(d.error)),
            "partitions": [{"partition": f"{r.topic}-{r.partition}", "size": r.size, "offsetLag": r.offset_lag,
                            "isFuture": r.is_future} for r in d.replicas]})
    return {"version": 1, "brokers": [{"broker": b, "logDirs": ds} for b, ds in brokers.items()]}


def _table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(str(c)) for c in col) for col in zip(header, *rows, strict=False)]
    return "\n".join("  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
                     for row in [header, *rows])


def as_tables(dirs: list[LogDir]) -> str:
    """The directories, then the replicas, as two aligned tables."""
    def known(n: int) -> str:
        return str(n) if n >= 0 else "-"

    dir_rows = [[str(d.broker), d.path, "online" if d.error == 0 else f"offline ({_error_name(d.error)})",
                 str(d.size) if d.error == 0 else "-", known(d.usable_bytes), known(d.total_bytes)] for d in dirs]
    text = _table(["BROKER", "LOG DIR", "STATE", "SIZE", "USABLE BYTES", "TOTAL BYTES"], dir_rows)
    replica_rows = [[str(d.broker), d.path, f"{r.topic}-{r.partition}", str(r.size), str(r.offset_lag),
                     "yes" if r.is_future else "no"] for d in dirs for r in d.replicas]
    if replica_rows:
        text += "\n\n" + _table(["BROKER", "LOG DIR", "REPLICA", "SIZE", "OFFSET LAG", "FUTURE"], replica_rows)
    return text


@click.command("log-dirs")
@click.option("--describe", is_flag=True, required=True, help="Describe the brokers' log directories.")
@bootstrap_option()
@click.option("--broker-list", metavar="1,2", help="The brokers to ask (default: every broker).")
@click.option("--topic-list", metavar="T1,T2", help="Only the replicas of these topics (default: all).")
@click.option("--json", "json_output", is_flag=True, help="Kafka's JSON line instead of tables.")
@config_file_option("--command-config")
@timeout_option()
def log_dirs(describe: bool, bootstrap: str, broker_list: str | None, topic_list: str | None, json_output: bool,
             config_file: str | None, timeout_s: float) -> None:
    """Describe the brokers' log directories, like kafka-log-dirs.sh."""
    brokers = _parse_ids(broker_list) if broker_list is not None else None
    topics = {t.strip() for t in topic_list.split(",") if t.strip()} if topic_list is not None else None
    dirs = describe_log_dirs(Admin(bootstrap, config_file, timeout_s), brokers, topics)
    if json_output:
        click.echo("Querying brokers for log directories information")
        click.echo(f"Received log directory information from brokers {','.join(sorted({str(d.broker) for d in dirs}))}")
        click.echo(json.dumps(as_json(dirs), separators=(",", ":")))
    else:
        click.echo(as_tables(dirs))
