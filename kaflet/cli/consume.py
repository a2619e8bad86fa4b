"""`kaflet consume`: print records of a topic (like kafka-console-consumer.sh)."""

from __future__ import annotations

import os
import sys
import time
import uuid
from typing import BinaryIO

import click
from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)

from kaflet.cli.common import (
    CliError,
    bootstrap_option,
    client_config,
    config_file_option,
    describe_kafka_error,
    parse_key_values,
    timeout_option,
)

# Formatter properties with kafka-console-consumer's (DefaultMessageFormatter) defaults.
_FORMATTER_DEFAULTS = {
    "print.timestamp": "false",
    "print.key": "false",
    "print.offset": "false",
    "print.partition": "false",
    "print.headers": "false",
    "print.value": "true",
    "key.separator": "\t",
    "line.separator": "\n",
    "headers.separator": ",",
    "null.literal": "null",
}
# Errors after which waiting longer cannot help.
_FATAL_CODES = {
    KafkaError.UNKNOWN_TOPIC_OR_PART,
    KafkaError.TOPIC_AUTHORIZATION_FAILED,
    KafkaError.GROUP_AUTHORIZATION_FAILED,
    KafkaError.SASL_AUTHENTICATION_FAILED,
    KafkaError._AUTHENTICATION,
    KafkaError._UNKNOWN_PARTITION,
}
_POLL_S = 0.1


def _truthy(value: str) -> bool:
    return value.strip().lower() in ("true", "1", "yes")


def _parse_offset(value: str | None) -> int | None:
    if value is None:
        return None
    lowered = value.strip().lower()
    if lowered == "earliest":
        return OFFSET_BEGINNING
    if lowered == "latest":
        return OFFSET_END
    try:
        offset = int(lowered)
    except ValueError:
        offset = -1
    if offset < 0:
        raise click.BadParameter("must be a non-negative number, 'earliest' or 'latest'", param_hint="--offset")
    return offset


class _Formatter:
    """Renders a record the way Kafka's DefaultMessageFormatter does."""

    def __init__(self, props: dict[str, str]) -> None:
        self.timestamp = _truthy(props["print.timestamp"])
        self.key = _truthy(props["print.key"])
        self.offset = _truthy(props["print.offset"])
        self.partition = _truthy(props["print.partition"])
        self.headers = _truthy(props["print.headers"])
        self.value = _truthy(props["print.value"])
        self.sep = props["key.separator"].encode()
        self.eol = props["line.separator"].encode()
        self.hsep = props["headers.separator"].encode()
        self.null = props["null.literal"].encode()

    def render(self, msg: Message) -> bytes:
        fields: list[bytes] = []
        if self.timestamp:
            ts_type, ts = msg.timestamp()
            if ts_type == TIMESTAMP_CREATE_TIME:
                fields.append(b"CreateTime:%d" % ts)
            elif ts_type == TIMESTAMP_LOG_APPEND_TIME:
                fields.append(b"LogAppendTime:%d" % ts)
            else:
                fields.append(b"NO_TIMESTAMP")
        # A consumed message (not an error event) always has its partition and offset.
        if self.partition and (partition := msg.partition()) is not None:
            fields.append(b"Partition:%d" % partition)
        if self.offset and (offset := msg.offset()) is not None:
            fields.append(b"Offset:%d" % offset)
        if self.headers:
            headers = msg.headers() or []
            if headers:
                # A consumer gets a list of (key, bytes or None); the type also allows a dict and str values.
                pairs = headers.items() if isinstance(headers, dict) else headers
                fields.append(self.hsep.join(
                    k.encode() + b":" + (self.null if v is None else v.encode() if isinstance(v, str) else v)
                    for k, v in pairs
                ))
            else:
                fields.append(b"NO_HEADERS")
        if self.key:
            key = msg.key()
            fields.append(self.null if key is None else key)
        if self.value:
            value = msg.value()
            fields.append(self.null if value is None else value)
        return self.sep.join(fields) + self.eol


@click.command("consume")
@bootstrap_option()
@click.option("--topic", required=True, metavar="NAME", help="Topic to read.")
@click.option("--from-beginning", is_flag=True, help="Start at the earliest offset instead of the end.")
@click.option("--partition", type=click.IntRange(min=0), help="Read only this partition.")
@click.option("--offset", "offset_arg", metavar="OFFSET|earliest|latest",
              help="Start offset within --partition (default: latest).")
@click.option("--max-messages", type=click.IntRange(min=1), help="Exit after printing this many records.")
@click.option("--timeout-ms", type=click.IntRange(min=1),
              help="Exit when no record arrives for this many milliseconds.")
@click.option("--group", metavar="GROUP", help="Consume as a member of this consumer group (subscribe).")
@click.option("--property", "properties", multiple=True, metavar="KEY=VALUE",
              help="Output setting: print.key, print.partition, print.offset, print.timestamp, key.separator, ...")
@click.option("--consumer-property", "consumer_properties", multiple=True, metavar="KEY=VALUE",
              help="Consumer client setting.")
@config_file_option("--consumer.config", "--command-config")
@timeout_option()
def consume(
    bootstrap: str,
    topic: str,
    from_beginning: bool,
    partition: int | None,
    offset_arg: str | None,
    max_messages: int | None,
    timeout_ms: int | None,
    group: str | None,
    properties: tuple[str, ...],
    consumer_properties: tuple[str, ...],
    config_file: str | None,
    timeout_s: float,
) -> None:
    """Print each record's value (and optionally key, partition, offset...) on its own line."""
    offset = _parse_offset(offset_arg)
    if offset is not None and partition is None:
        raise click.UsageError("--offset requires --partition.")
    if offset is not None and from_beginning:
        raise click.UsageError("--offset and --from-beginning cannot be used together.")
    if group is not None and partition is not None:
        raise click.UsageError("--group and --partition cannot be used together.")
    fmt_props = dict(_FORMATTER_DEFAULTS)
    given = parse_key_values(properties, "--property")
    unknown = sorted(set(given) - set(fmt_props))
    if unknown:
        raise click.BadParameter(
            f"unknown propert{'y' if len(unknown) == 1 else 'ies'} {', '.join(unknown)} "
            f"(supported: {', '.join(sorted(fmt_props))})",
            param_hint="--property",
        )
    fmt_props.update(given)
    formatter = _Formatter(fmt_props)

    conf = client_config(bootstrap, config_file, timeout_s=timeout_s)
    conf.update({
        # librdkafka insists on a group id even for assign(); a throwaway one never
        # commits, and explicit start offsets mean it never fetches committed ones.
        "group.id": group or f"kaflet-console-consumer-{uuid.uuid4().hex[:12]}",
        "enable.auto.commit": group is not None,
        "auto.offset.reset": "earliest" if from_beginning else "latest",
        "enable.partition.eof": False,
    })
    conf.update(parse_key_values(consumer_properties, "--consumer-property"))
    try:
        consumer = Consumer(conf)
    except (KafkaException, ValueError, TypeError) as exc:
        raise CliError(f"Invalid consumer configuration: {describe_kafka_error(exc)}") from exc

    count = 0
    out = sys.stdout.buffer
    try:
        _start(consumer, topic, group, partition, offset, from_beginning, bootstrap, timeout_s)
        count = _loop(consumer, formatter, out, max_messages, timeout_ms)
    except KeyboardInterrupt:
        pass
    finally:
        _safe_flush(out)
        consumer.close()
    click.echo(f"Processed a total of {count} messages", err=True)


def _start(consumer: Consumer, topic: str, group: str | None, partition: int | None, offset: int | None,
           from_beginning: bool, bootstrap: str, timeout_s: float) -> None:
    """Probe metadata (broker up? topic known?) then assign or subscribe."""
    try:
        meta = consumer.list_topics(topic=topic, timeout=timeout_s).topics.get(topic)
    except KafkaException as exc:
        raise CliError(describe_kafka_error(exc, bootstrap=bootstrap, timeout_s=timeout_s)) from exc
    if meta is None:
        raise CliError(f"Topic '{topic}' does not exist.")
    if meta.error is not None:
        raise CliError(describe_kafka_error(meta.error, topic=topic, bootstrap=bootstrap, timeout_s=timeout_s))
    if group is not None:
        consumer.subscribe([topic])
        return
    start = OFFSET_BEGINNING if from_beginning else OFFSET_END
    if partition is not None:
        if partition not in meta.partitions:
            raise CliError(f"Topic '{topic}' has no partition {partition} (it has {len(meta.partitions)}).")
        consumer.assign([TopicPartition(topic, partition, start if offset is None else offset)])
    else:
        consumer.assign([TopicPartition(topic, p, start) for p in sorted(meta.partitions)])


def _loop(consumer: Consumer, formatter: _Formatter, out: BinaryIO, max_messages: int | None,
          timeout_ms: int | None) -> int:
    """Print records until --max-messages or --timeout-ms of silence; returns the count."""
    count = 0
    idle_limit = timeout_ms / 1000 if timeout_ms is not None else None
    last_activity = time.monotonic()
    interactive = out.isatty()
    try:
        while max_messages is None or count < max_messages:
            wait = _POLL_S
            if idle_limit is not None:
                wait = min(wait, max(0.0, last_activity + idle_limit - time.monotonic()))
            msg = consumer.poll(wait)
            if msg is None:
                # Pipes get flushed whenever we are idle, so `| head` style users still see output.
                _safe_flush(out)
                if idle_limit is not None and time.monotonic() - last_activity >= idle_limit:
                    break
                continue
            err = msg.error()
            if err is not None:
                if err.fatal() or err.code() in _FATAL_CODES:
                    raise CliError(describe_kafka_error(err, topic=msg.topic()))
                continue  # transient: librdkafka retries on its own
            last_activity = time.monotonic()
            try:
                out.write(formatter.render(msg))
                if interactive:
                    out.flush()
            except BrokenPipeError:
                _quiet_stdout()
                break
            count += 1
    except KeyboardInterrupt:
        pass  # Ctrl-C is the normal way to stop an open-ended consume
    return count


def _safe_flush(out: BinaryIO) -> None:
    try:
        out.flush()
    except BrokenPipeError:
        _quiet_stdout()


def _quiet_stdout() -> None:
    """After the reader went away, point stdout at /dev/null so exit-time flushes stay silent."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
