"""`kaflet produce`: one record per stdin line (like kafka-console-producer.sh)."""

from __future__ import annotations

import os
import stat
import sys
import time
from collections.abc import Callable
from typing import BinaryIO

import click
from confluent_kafka import KafkaError, KafkaException, Message, Producer

from kaflet.cli.common import (
    CliError,
    bootstrap_option,
    client_config,
    config_file_option,
    describe_kafka_error,
    parse_key_values,
    timeout_option,
)
from kaflet.cli.progress import progress

# Properties understood by --property, with kafka-console-producer's defaults.
_READER_DEFAULTS = {
    "parse.key": "false",
    "key.separator": "\t",
    "null.marker": "",
    "ignore.error": "false",
}
_CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
# Kafka's default delivery.timeout.ms: long enough for a slow broker, still bounded.
_DELIVERY_TIMEOUT_MS = 120_000


def _truthy(value: str) -> bool:
    return value.strip().lower() in ("true", "1", "yes")


class _Delivery:
    """Collects delivery reports so failures can be summarised once at the end."""

    def __init__(self) -> None:
        self.ok = 0
        self.failed = 0
        self.reasons: dict[str, int] = {}

    def __call__(self, err: KafkaError | None, _msg: Message) -> None:
        if err is None:
            self.ok += 1
            return
        self.reject(err)

    def reject(self, err: KafkaError | BaseException) -> None:
        """Count a record that will never be delivered."""
        reason = err.str() if isinstance(err, KafkaError) else str(err)
        self.failed += 1
        self.reasons[reason] = self.reasons.get(reason, 0) + 1


@click.command("produce")
@bootstrap_option("--broker-list")
@click.option("--topic", required=True, metavar="NAME", help="Topic to write to.")
@click.option("--property", "properties", multiple=True, metavar="KEY=VALUE",
              help="Line reader setting: parse.key, key.separator, null.marker, ignore.error.")
@click.option("--producer-property", "producer_properties", multiple=True, metavar="KEY=VALUE",
              help="Producer client setting, e.g. acks=all or linger.ms=5.")
@config_file_option("--producer.config", "--command-config")
@click.option("--compression-codec", type=click.Choice(_CODECS), is_flag=False, flag_value="gzip",
              default=None, help="Compress batches (gzip when given without a value).")
@timeout_option()
def produce(
    bootstrap: str,
    topic: str,
    properties: tuple[str, ...],
    producer_properties: tuple[str, ...],
    config_file: str | None,
    compression_codec: str | None,
    timeout_s: float,
) -> None:
    """Send each line of stdin as one record; flush at end of input."""
    reader = dict(_READER_DEFAULTS)
    given = parse_key_values(properties, "--property")
    unknown = sorted(set(given) - set(reader))
    if unknown:
        raise click.BadParameter(
            f"unknown propert{'y' if len(unknown) == 1 else 'ies'} {', '.join(unknown)} "
            f"(supported: {', '.join(sorted(reader))})",
            param_hint="--property",
        )
    reader.update(given)

    overrides: dict[str, str | int] = {"message.timeout.ms": _DELIVERY_TIMEOUT_MS}
    if compression_codec:
        overrides["compression.codec"] = compression_codec
    conf = client_config(bootstrap, config_file, timeout_s=timeout_s)
    # Explicit flags win over the config file, matching the Kafka tools.
    conf = {**overrides, **conf, **parse_key_values(producer_properties, "--producer-property")}
    if compression_codec:
        conf["compression.codec"] = compression_codec
    try:
        producer = Producer(conf)
    except (KafkaException, ValueError, TypeError) as exc:
        raise CliError(f"Invalid producer configuration: {describe_kafka_error(exc)}") from exc

    _check_topic(producer, topic, bootstrap, timeout_s)
    delivery = _Delivery()
    # Lines typed at a terminal need no bar (it would draw over them).
    with progress(f"producing to {topic}", _input_size(sys.stdin.buffer), shown=not sys.stdin.isatty(),
                  each="records") as advance:
        sent, bad_lines = _send_lines(producer, topic, sys.stdin.buffer, reader, delivery, advance)
    delivery_ms = int(conf.get("delivery.timeout.ms", conf.get("message.timeout.ms", _DELIVERY_TIMEOUT_MS)))
    _flush(producer, delivery_ms / 1000)
    if bad_lines and not _truthy(reader["ignore.error"]):
        shown = ", ".join(str(n) for n in bad_lines[:5]) + (", ..." if len(bad_lines) > 5 else "")
        raise CliError(
            f"{len(bad_lines)} line(s) had no key separator {reader['key.separator']!r} and were not sent "
            f"(line {shown})."
        )
    if delivery.failed or sent != delivery.ok:
        undelivered = sent - delivery.ok
        reasons = "; ".join(f"{r} (x{n})" for r, n in delivery.reasons.items()) or "no delivery report"
        raise CliError(f"{undelivered} of {sent} records were not delivered: {reasons}.")


def _check_topic(producer: Producer, topic: str, bootstrap: str, timeout_s: float) -> None:
    """Probe the broker before reading stdin so a dead broker fails within the timeout."""
    try:
        meta = producer.list_topics(topic=topic, timeout=timeout_s).topics.get(topic)
    except KafkaException as exc:
        raise CliError(describe_kafka_error(exc, bootstrap=bootstrap, timeout_s=timeout_s)) from exc
    # LEADER_NOT_AVAILABLE is what a broker answers while auto-creating the topic.
    if meta is not None and meta.error is not None and meta.error.code() != KafkaError.LEADER_NOT_AVAILABLE:
        raise CliError(describe_kafka_error(meta.error, topic=topic, bootstrap=bootstrap, timeout_s=timeout_s))


def _input_size(stream: BinaryIO) -> int | None:
    """Bytes left in stdin when it is a file (`< big.txt`); None for a pipe or a terminal."""
    try:
        st = os.fstat(stream.fileno())
        return max(st.st_size - stream.tell(), 0) if stat.S_ISREG(st.st_mode) else None
    except (OSError, ValueError):
        return None


def _send_lines(producer: Producer, topic: str, stream: BinaryIO, reader: dict[str, str],
                delivery: _Delivery, advance: Callable[[int], None]) -> tuple[int, list[int]]:
    """Produce every line; returns (records handed to the client, numbers of rejected lines)."""
    parse_key = _truthy(reader["parse.key"])
    separator = reader["key.separator"].encode()
    null_marker = reader["null.marker"].encode() if reader["null.marker"] else None
    sent = 0
    bad: list[int] = []
    for lineno, raw in enumerate(stream, start=1):
        advance(len(raw))
        line = raw.rstrip(b"\n").rstrip(b"\r")
        key: bytes | None = None
        value: bytes | None = line
        if parse_key:
            key, sep, rest = line.partition(separator)
            if not sep:
                # Reported once at the end so stderr stays a single line.
                bad.append(lineno)
                continue
            value = rest
        if null_marker is not None:
            key = None if key == null_marker else key
            value = None if value == null_marker else value
        while True:
            try:
                producer.produce(topic, value=value, key=key, on_delivery=delivery)
                break
            except BufferError:
                # Local queue full: let deliveries drain, then retry the same line.
                producer.poll(0.1)
            except KafkaException as exc:
                # Rejected before it left the client (e.g. too large): a failed delivery.
                delivery.reject(exc.args[0] if exc.args else exc)
                break
        sent += 1
        producer.poll(0)
    return sent, bad


def _flush(producer: Producer, delivery_timeout_s: float) -> None:
    """Wait for every outstanding record; the client's delivery timeout bounds the wait."""
    deadline = time.monotonic() + delivery_timeout_s + 30
    while len(producer) > 0 and time.monotonic() < deadline:
        producer.flush(1.0)
