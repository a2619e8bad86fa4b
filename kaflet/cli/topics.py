"""`kaflet topics`: create, list, describe, alter and delete topics (like kafka-topics.sh)."""

from __future__ import annotations

import base64
from typing import Any

import click
from confluent_kafka import KafkaError, KafkaException, TopicCollection
from confluent_kafka.admin import ConfigResource, ConfigSource, NewPartitions, NewTopic

from kaflet.cli.common import (
    Admin,
    CliError,
    bootstrap_option,
    config_file_option,
    is_code,
    parse_key_values,
    timeout_option,
)
from kaflet.metadata.topic_names import is_internal

_ACTIONS = ("create", "list", "describe", "alter", "delete")
# kafka-topics' partition reports (--describe only, one at a time): option name -> test.
_REPORTS = {
    "under-replicated-partitions": "ISR smaller than the replicas",
    "under-min-isr-partitions": "ISR smaller than min.insync.replicas, or no leader",
    "at-min-isr-partitions": "ISR exactly min.insync.replicas",
    "unavailable-partitions": "no leader, or the leader is not a live broker",
}


def _topic_id(uuid: Any) -> str:
    """Kafka prints topic ids as URL-safe base64 without padding (Uuid.toString)."""
    msb = uuid.get_most_significant_bits() & (2**64 - 1)
    lsb = uuid.get_least_significant_bits() & (2**64 - 1)
    raw = msb.to_bytes(8, "big") + lsb.to_bytes(8, "big")
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _ids(nodes: list[int]) -> str:
    return ",".join(str(n) for n in nodes)


def _report_option(name: str) -> Any:
    return click.option(f"--{name}", "reports", flag_value=name, multiple=True,
                        help=f"With --describe: only partitions with {_REPORTS[name]}.")


@click.command("topics")
@bootstrap_option()
@click.option("--create", "create", is_flag=True, help="Create a new topic.")
@click.option("--list", "list_", is_flag=True, help="List all topics.")
@click.option("--describe", is_flag=True, help="Describe one topic, or all topics.")
@click.option("--alter", is_flag=True, help="Increase the number of partitions of a topic.")
@click.option("--delete", is_flag=True, help="Delete a topic.")
@click.option("--topic", metavar="NAME", help="The topic to act on.")
@click.option("--partitions", type=click.IntRange(min=1), help="Partition count (create: broker default if omitted).")
@click.option("--replication-factor", type=click.IntRange(min=1), help="Replication factor (create only).")
@click.option("--config", "configs", multiple=True, metavar="KEY=VALUE", help="Topic config override (create only).")
@click.option("--if-not-exists", is_flag=True, help="With --create: succeed quietly if the topic exists.")
@click.option("--if-exists", is_flag=True, help="With --alter/--delete/--describe: succeed quietly if it does not.")
@click.option("--exclude-internal", is_flag=True,
              help="With --list/--describe: hide internal topics (__consumer_offsets, __transaction_state).")
@_report_option("under-replicated-partitions")
@_report_option("under-min-isr-partitions")
@_report_option("at-min-isr-partitions")
@_report_option("unavailable-partitions")
@click.option("--topics-with-overrides", is_flag=True,
              help="With --describe: only topics with config overrides, without their partitions.")
@config_file_option()
@timeout_option()
def topics(
    bootstrap: str,
    create: bool,
    list_: bool,
    describe: bool,
    alter: bool,
    delete: bool,
    topic: str | None,
    partitions: int | None,
    replication_factor: int | None,
    configs: tuple[str, ...],
    if_not_exists: bool,
    if_exists: bool,
    exclude_internal: bool,
    reports: tuple[str, ...],
    topics_with_overrides: bool,
    config_file: str | None,
    timeout_s: float,
) -> None:
    """Create, list, describe, alter or delete topics."""
    chosen = [name for name, on in zip(_ACTIONS, (create, list_, describe, alter, delete), strict=True) if on]
    if len(chosen) != 1:
        raise click.UsageError("Exactly one of --create, --list, --describe, --alter or --delete is required.")
    action = chosen[0]
    if action in ("create", "alter", "delete") and not topic:
        raise click.UsageError(f"--topic is required with --{action}.")
    if action == "alter" and partitions is None:
        raise click.UsageError("--alter needs --partitions (the new, larger partition count).")
    if configs and action != "create":
        raise click.UsageError("--config is only valid with --create.")
    if replication_factor is not None and action != "create":
        raise click.UsageError("--replication-factor is only valid with --create.")
    if partitions is not None and action not in ("create", "alter"):
        raise click.UsageError("--partitions is only valid with --create or --alter.")
    if (reports or topics_with_overrides) and action != "describe":
        shown = f"--{reports[0]}" if reports else "--topics-with-overrides"
        raise click.UsageError(f"{shown} is only valid with --describe.")
    if len(set(reports)) + topics_with_overrides > 1:
        raise click.UsageError("Use only one of --under-replicated-partitions, --under-min-isr-partitions, "
                               "--at-min-isr-partitions, --unavailable-partitions and --topics-with-overrides.")
    topic_configs = parse_key_values(configs, "--config")

    admin = Admin(bootstrap, config_file, timeout_s)
    if action == "create":
        assert topic is not None
        _create(admin, topic, partitions, replication_factor, topic_configs, if_not_exists)
    elif action == "list":
        _list(admin, exclude_internal)
    elif action == "describe":
        _describe(admin, topic, exclude_internal, if_exists, reports[0] if reports else None, topics_with_overrides)
    elif action == "alter":
        assert topic is not None and partitions is not None
        _alter(admin, topic, partitions, if_exists)
    else:
        assert topic is not None
        _delete(admin, topic, if_exists)


def _create(admin: Admin, topic: str, partitions: int | None, replication_factor: int | None,
            configs: dict[str, str], if_not_exists: bool) -> None:
    admin.metadata()  # fail fast, with the right message, if no broker answers
    # -1 asks the broker to apply its num.partitions / default.replication.factor.
    new = NewTopic(topic, num_partitions=partitions or -1, replication_factor=replication_factor or -1,
                   config=configs)
    try:
        admin.wait(admin.client.create_topics([new], request_timeout=admin.timeout_s), topic)
    except CliError:
        if if_not_exists and admin.existing_topic(topic) is not None:
            return
        raise
    click.echo(f"Created topic {topic}.")


def _list(admin: Admin, exclude_internal: bool) -> None:
    for name in sorted(admin.metadata().topics):
        if exclude_internal and is_internal(name):
            continue
        click.echo(name)


def _describe(admin: Admin, topic: str | None, exclude_internal: bool, if_exists: bool,
              report: str | None, overrides_only: bool) -> None:
    """kafka-topics --describe: a topic line, then one line per partition (or only the
    partitions the report asks for, without the topic line)."""
    if topic:
        meta = admin.existing_topic(topic)
        if meta is None:
            if if_exists:
                return
            raise CliError(f"Topic '{topic}' does not exist.")
        metas = {topic: meta}
    else:
        metas = {name: m for name, m in sorted(admin.metadata().topics.items())
                 if not (exclude_internal and is_internal(name))}
    if not metas:
        return
    # The live brokers: the ones Metadata lists (Kafka's tool asks DescribeCluster, the same list).
    live = set(admin.metadata().brokers)
    names = list(metas)
    topic_ids = _topic_ids(admin, names)
    configs = _topic_configs(admin, names)
    for name, meta in metas.items():
        entries = configs.get(name, {})
        overrides = ",".join(
            f"{e.name}={'<sensitive>' if e.is_sensitive else e.value}"
            for e in sorted(entries.values(), key=lambda e: e.name)
            if not e.is_default and e.source != ConfigSource.DEFAULT_CONFIG.value
        )
        min_isr_entry = entries.get("min.insync.replicas")
        min_isr = int(min_isr_entry.value) if min_isr_entry is not None and min_isr_entry.value else None
        parts = sorted(meta.partitions.values(), key=lambda p: p.id)
        if report is None and (not overrides_only or overrides):
            rf = len(parts[0].replicas) if parts else 0
            topic_id = topic_ids.get(name)
            click.echo(
                f"Topic: {name}" + (f"\tTopicId: {topic_id}" if topic_id else "")
                + f"\tPartitionCount: {len(parts)}\tReplicationFactor: {rf}\tConfigs: {overrides}"
            )
        if overrides_only:
            continue
        for p in parts:
            if report is not None and not _reported(report, p, min_isr, live):
                continue
            leader = "none" if p.leader < 0 else str(p.leader)
            offline = [r for r in p.replicas if r not in live]
            click.echo(
                f"\tTopic: {name}\tPartition: {p.id}\tLeader: {leader}"
                f"\tReplicas: {_ids(p.replicas)}\tIsr: {_ids(p.isrs)}"
                + (f"\tOffline: {_ids(offline)}" if offline else "")
            )


def _reported(report: str, p: Any, min_isr: int | None, live: set[int]) -> bool:
    """Kafka's TopicCommand partition tests (PartitionDescription)."""
    has_leader = p.leader >= 0
    if report == "under-replicated-partitions":
        return len(p.isrs) < len(p.replicas)
    if report == "under-min-isr-partitions":
        return not has_leader or (min_isr is not None and len(p.isrs) < min_isr)
    if report == "at-min-isr-partitions":
        return min_isr is not None and len(p.isrs) == min_isr
    return not has_leader or p.leader not in live  # unavailable-partitions


def _topic_ids(admin: Admin, names: list[str]) -> dict[str, str]:
    """Best effort: a broker that cannot describe topics by id leaves the id out, as Kafka's
    tool does for the zero id."""
    out: dict[str, str] = {}
    try:
        futures = admin.client.describe_topics(TopicCollection(names), request_timeout=admin.timeout_s)
    except KafkaException:
        return out
    for name, fut in futures.items():
        try:
            uuid = fut.result(timeout=admin.timeout_s + 5).topic_id
        except (KafkaException, TimeoutError):
            continue
        if uuid is not None and (uuid.get_most_significant_bits() or uuid.get_least_significant_bits()):
            out[name] = _topic_id(uuid)
    return out


def _topic_configs(admin: Admin, names: list[str]) -> dict[str, dict[str, Any]]:
    """Every config entry of each topic (DescribeConfigs), by topic then config name."""
    out: dict[str, dict[str, Any]] = {}
    resources = [ConfigResource(ConfigResource.Type.TOPIC, name) for name in names]
    try:
        futures = admin.client.describe_configs(resources, request_timeout=admin.timeout_s)
    except KafkaException:
        return out
    for res, fut in futures.items():
        try:
            out[res.name] = fut.result(timeout=admin.timeout_s + 5)
        except KafkaException as exc:
            # A broker without DescribeConfigs still has topics worth describing.
            if is_code(exc, KafkaError._UNSUPPORTED_FEATURE, KafkaError.UNSUPPORTED_VERSION):
                continue
            raise admin.fail(exc, res.name) from exc
        except TimeoutError:
            continue
    return out


def _alter(admin: Admin, topic: str, partitions: int, if_exists: bool) -> None:
    meta = admin.existing_topic(topic)
    if meta is None:
        if if_exists:
            return
        raise CliError(f"Topic '{topic}' does not exist.")
    current = len(meta.partitions)
    if partitions <= current:
        raise CliError(f"Topic '{topic}' already has {current} partitions; the count can only be increased.")
    futures = admin.client.create_partitions([NewPartitions(topic, partitions)], request_timeout=admin.timeout_s)
    admin.wait(futures, topic)
    click.echo(f"Increased the partitions of topic {topic} from {current} to {partitions}.")


def _delete(admin: Admin, topic: str, if_exists: bool) -> None:
    if admin.existing_topic(topic) is None:
        if if_exists:
            return
        raise CliError(f"Topic '{topic}' does not exist.")
    try:
        admin.wait(admin.client.delete_topics([topic], request_timeout=admin.timeout_s), topic)
    except CliError:
        # Lost a race with another deleter: with --if-exists that is still success.
        if if_exists and admin.existing_topic(topic) is None:
            return
        raise
    click.echo(f"Deleted topic {topic}.")
