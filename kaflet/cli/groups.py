"""`kaflet groups`: list, describe, reset offsets of and delete consumer groups
(like kafka-consumer-groups.sh). A group of KIP-848's protocol is described with its coordinator's
ConsumerGroupDescribe too: its epochs and each member's epoch and target assignment."""

from __future__ import annotations

import datetime as dt
from typing import Any

import click
from confluent_kafka import ConsumerGroupTopicPartitions, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import OffsetSpec

from kaflet.cli.common import (
    Admin,
    CliError,
    bootstrap_option,
    config_file_option,
    describe_kafka_error,
    is_code,
    raw_connect,
    timeout_option,
    unreachable_message,
)
from kaflet.protocol import codec
from kaflet.protocol.api_keys import ApiKey
from kaflet.protocol.errors import error_name

_ACTIONS = ("list", "describe", "reset-offsets", "delete")


def _describe_group(admin: Admin, group: str) -> Any:
    return admin.result(admin.client.describe_consumer_groups([group], request_timeout=admin.timeout_s)[group],
                        what=f"Consumer group '{group}'")


def _committed(admin: Admin, group: str) -> dict[tuple[str, int], TopicPartition]:
    fut = admin.client.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)],
                                                   request_timeout=admin.timeout_s)[group]
    res = admin.result(fut, what=f"Consumer group '{group}'")
    return {(tp.topic, tp.partition): tp for tp in res.topic_partitions or [] if tp.offset >= 0}


def _offsets(admin: Admin, parts: list[tuple[str, int]], spec: OffsetSpec) -> dict[tuple[str, int], int]:
    if not parts:
        return {}
    futures = admin.client.list_offsets({TopicPartition(t, p): spec for t, p in parts}, request_timeout=admin.timeout_s)
    return {(tp.topic, tp.partition): admin.result(f, what=f"Topic '{tp.topic}'").offset for tp, f in futures.items()}


def _table(headers: list[str], rows: list[list[str]]) -> None:
    """Left-aligned columns, as kafka-consumer-groups.sh prints them."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    for line in [headers, *rows]:
        click.echo("  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip())


@click.command("groups")
@bootstrap_option()
@click.option("--list", "list_", is_flag=True, help="List all consumer groups.")
@click.option("--describe", is_flag=True, help="Describe a group: offsets and lag per partition.")
@click.option("--reset-offsets", is_flag=True, help="Reset an inactive group's committed offsets.")
@click.option("--delete", is_flag=True, help="Delete an empty group and its offsets.")
@click.option("--group", metavar="GROUP", help="The group to act on.")
@click.option("--members", is_flag=True, help="With --describe: list the members instead.")
@click.option("--offsets", "show_offsets", is_flag=True, help="With --describe: offsets and lag (the default).")
@click.option("--state", "show_state", is_flag=True, help="With --describe: the group's state.")
@click.option("--topic", metavar="TOPIC[:P,P]", help="With --reset-offsets: the topic (optionally its partitions).")
@click.option("--to-earliest", is_flag=True, help="Reset to the earliest offset.")
@click.option("--to-latest", is_flag=True, help="Reset to the latest offset.")
@click.option("--to-offset", type=int, metavar="N", help="Reset to offset N (clamped to the log).")
@click.option("--to-datetime", metavar="YYYY-MM-DDTHH:mm:SS[.sss][+hh:mm]",
              help="Reset to the first offset at or after this time (local time without a zone).")
@click.option("--shift-by", type=int, metavar="N", help="Move the committed offsets by N (may be negative).")
@click.option("--dry-run", is_flag=True, help="With --reset-offsets: only show the new offsets (the default).")
@click.option("--execute", is_flag=True, help="With --reset-offsets: commit the new offsets.")
@config_file_option()
@timeout_option()
def groups(bootstrap: str, list_: bool, describe: bool, reset_offsets: bool, delete: bool, group: str | None,
           members: bool, show_offsets: bool, show_state: bool, topic: str | None, to_earliest: bool,
           to_latest: bool, to_offset: int | None, to_datetime: str | None, shift_by: int | None,
           dry_run: bool, execute: bool, config_file: str | None, timeout_s: float) -> None:
    """List, describe, reset the offsets of, or delete consumer groups."""
    chosen = [n for n, on in zip(_ACTIONS, (list_, describe, reset_offsets, delete), strict=True) if on]
    if len(chosen) != 1:
        raise click.UsageError("Exactly one of --list, --describe, --reset-offsets or --delete is required.")
    action = chosen[0]
    if action != "list" and not group:
        raise click.UsageError(f"--group is required with --{action}.")
    if action != "describe" and (members or show_offsets or show_state):
        raise click.UsageError("--members, --offsets and --state are only valid with --describe.")
    if sum((members, show_offsets, show_state)) > 1:
        raise click.UsageError("Choose one of --members, --offsets and --state.")
    specs = [to_earliest, to_latest, to_offset is not None, to_datetime is not None, shift_by is not None]
    if action == "reset-offsets":
        if sum(specs) != 1:
            raise click.UsageError("--reset-offsets needs exactly one of --to-earliest, --to-latest, --to-offset, "
                                   "--to-datetime or --shift-by.")
        if not topic:
            raise click.UsageError("--topic is required with --reset-offsets.")
        if dry_run and execute:
            raise click.UsageError("Choose one of --dry-run and --execute.")
    elif any(specs) or topic or dry_run or execute:
        raise click.UsageError("--topic, --to-*, --shift-by, --dry-run and --execute go with --reset-offsets.")

    admin = Admin(bootstrap, config_file, timeout_s)
    admin.metadata()  # fail fast, with the right message, if no broker answers
    if action == "list":
        _list(admin)
    elif action == "describe":
        assert group is not None
        _describe(admin, group, "members" if members else "state" if show_state else "offsets")
    elif action == "delete":
        assert group is not None
        _delete(admin, group)
    else:
        assert group is not None and topic is not None
        _reset(admin, group, topic, to_earliest, to_latest, to_offset, to_datetime, shift_by, execute)


def _list(admin: Admin) -> None:
    res = admin.result(admin.client.list_consumer_groups(request_timeout=admin.timeout_s))
    for g in sorted(res.valid, key=lambda g: g.group_id):
        click.echo(g.group_id)


def _state(desc: Any) -> str:
    return {"STABLE": "Stable", "EMPTY": "Empty", "DEAD": "Dead", "PREPARING_REBALANCING": "PreparingRebalance",
            "COMPLETING_REBALANCING": "CompletingRebalance"}.get(desc.state.name, desc.state.name.title())


def _consumer_protocol(admin: Admin, desc: Any, group: str) -> Any | None:
    """ConsumerGroupDescribe's answer for a group of the consumer protocol (None for a classic one)."""
    if getattr(getattr(desc, "type", None), "name", "") != "CONSUMER":
        return None
    c = desc.coordinator
    R = codec.request_class(ApiKey.CONSUMER_GROUP_DESCRIBE)
    with raw_connect(c.host, c.port, admin.conf, admin.timeout_s, admin.bootstrap) as conn:
        described = conn.request(ApiKey.CONSUMER_GROUP_DESCRIBE, 0,
                                 R(group_ids=[group], include_authorized_operations=False)).groups[0]
    if described.error_code:
        raise CliError(f"Describing consumer group '{group}' failed: {error_name(described.error_code)}"
                       f"{': ' + described.error_message if described.error_message else ''}")
    return described


def _listing(assignment: Any) -> str:
    parts = sorted((tp.topic_name, p) for tp in assignment.topic_partitions for p in tp.partitions)
    return ",".join(f"{t}({p})" for t, p in parts) or "-"


def _describe_consumer_protocol(group: str, desc: Any, modern: Any, what: str) -> None:
    """--state and --members of a consumer-protocol group: protocol, epochs, assignments."""
    if what == "state":
        _table(["GROUP", "COORDINATOR (ID)", "PROTOCOL", "ASSIGNOR", "STATE", "GROUP-EPOCH", "ASSIGNMENT-EPOCH",
                "#MEMBERS"],
               [[group, f"{desc.coordinator.host}:{desc.coordinator.port} ({desc.coordinator.id})", "consumer",
                 modern.assignor_name, modern.group_state, str(modern.group_epoch), str(modern.assignment_epoch),
                 str(len(modern.members))]])
        return
    if not modern.members:
        click.echo(f"Consumer group '{group}' has no active members.\n")
    rows = [[group, m.member_id, m.client_host, m.client_id, str(m.member_epoch),
             str(sum(len(tp.partitions) for tp in m.assignment.topic_partitions)), _listing(m.assignment),
             _listing(m.target_assignment)] for m in sorted(modern.members, key=lambda m: m.member_id)]
    _table(["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "MEMBER-EPOCH", "#PARTITIONS", "ASSIGNMENT",
            "TARGET-ASSIGNMENT"], rows)


def _describe(admin: Admin, group: str, what: str) -> None:
    desc = _describe_group(admin, group)
    committed = _committed(admin, group) if what == "offsets" else {}
    state = _state(desc)
    if state == "Dead" and not committed:
        raise CliError(f"Consumer group '{group}' does not exist.")
    if what in ("state", "members"):
        modern = _consumer_protocol(admin, desc, group)
        if modern is not None:
            _describe_consumer_protocol(group, desc, modern, what)
            return
    if what == "state":
        _table(["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"],
               [[group, f"{desc.coordinator.host}:{desc.coordinator.port} ({desc.coordinator.id})",
                 desc.partition_assignor or "", state, str(len(desc.members))]])
        return
    if not desc.members:
        click.echo(f"Consumer group '{group}' has no active members.\n")
    if what == "members":
        rows = []
        for m in sorted(desc.members, key=lambda m: m.member_id):
            parts = m.assignment.topic_partitions if m.assignment else []
            listing = ",".join(f"{tp.topic}({tp.partition})" for tp in sorted(parts, key=lambda t: (t.topic, t.partition)))
            rows.append([group, m.member_id, m.host, m.client_id, str(len(parts)), listing or "-"])
        _table(["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "ASSIGNMENT"], rows)
        return
    owner: dict[tuple[str, int], Any] = {}
    for m in desc.members:
        for tp in m.assignment.topic_partitions if m.assignment else []:
            owner[(tp.topic, tp.partition)] = m
    parts = sorted(set(committed) | set(owner))
    ends = _offsets(admin, parts, OffsetSpec.latest())
    rows = []
    for tp in parts:
        cur = committed[tp].offset if tp in committed else None
        end = ends.get(tp)
        lag = str(max(end - cur, 0)) if cur is not None and end is not None and end >= 0 else "-"
        m = owner.get(tp)
        rows.append([group, tp[0], str(tp[1]), "-" if cur is None else str(cur), "-" if end is None else str(end),
                     lag, m.member_id if m else "-", m.host if m else "-", m.client_id if m else "-"])
    _table(["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST",
            "CLIENT-ID"], rows)


def _delete(admin: Admin, group: str) -> None:
    fut = admin.client.delete_consumer_groups([group], request_timeout=admin.timeout_s)[group]
    try:
        fut.result(timeout=admin.timeout_s + 5)
    except KafkaException as exc:
        if is_code(exc, KafkaError.NON_EMPTY_GROUP):
            raise CliError(f"Deletion of group '{group}' failed: the group is not empty (it has active members) "
                           "(NON_EMPTY_GROUP).") from exc
        if is_code(exc, KafkaError.GROUP_ID_NOT_FOUND):
            raise CliError(f"Consumer group '{group}' does not exist (GROUP_ID_NOT_FOUND).") from exc
        raise admin.fail(exc, what=f"Deletion of group '{group}' failed") from exc
    except TimeoutError as exc:
        raise CliError(unreachable_message(admin.bootstrap, admin.timeout_s)) from exc
    click.echo(f"Deletion of requested consumer groups ('{group}') was successful.")


def _parse_datetime(text: str) -> int:
    try:
        when = dt.datetime.fromisoformat(text)
    except ValueError:
        raise click.BadParameter(f"expected YYYY-MM-DDTHH:mm:SS[.sss][+hh:mm], got {text!r}",
                                 param_hint="--to-datetime") from None
    if when.tzinfo is None:
        when = when.astimezone()  # local time, like the Kafka tool
    return int(when.timestamp() * 1000)


def _topic_partitions(admin: Admin, spec: str) -> list[tuple[str, int]]:
    name, _, plist = spec.partition(":")
    meta = admin.existing_topic(name)
    if meta is None:
        raise CliError(f"Topic '{name}' does not exist.")
    existing = sorted(meta.partitions)
    if not plist:
        return [(name, p) for p in existing]
    try:
        wanted = sorted({int(x) for x in plist.split(",") if x.strip()})
    except ValueError:
        raise click.BadParameter(f"expected TOPIC or TOPIC:P,P,..., got {spec!r}", param_hint="--topic") from None
    missing = [p for p in wanted if p not in existing]
    if missing:
        raise CliError(f"Topic '{name}' has no partition {missing[0]}.")
    return [(name, p) for p in wanted]


def _reset(admin: Admin, group: str, topic: str, to_earliest: bool, to_latest: bool, to_offset: int | None,
           to_datetime: str | None, shift_by: int | None, execute: bool) -> None:
    ts = _parse_datetime(to_datetime) if to_datetime is not None else None
    desc = _describe_group(admin, group)
    state = _state(desc)
    if state not in ("Empty", "Dead"):
        raise CliError(f"Assignments can only be reset if the group '{group}' is inactive, but the current state "
                       f"is {state}.")
    parts = _topic_partitions(admin, topic)
    earliest = _offsets(admin, parts, OffsetSpec.earliest())
    latest = _offsets(admin, parts, OffsetSpec.latest())
    committed = _committed(admin, group) if shift_by is not None else {}
    by_time = _offsets(admin, parts, OffsetSpec.for_timestamp(ts)) if ts is not None else {}
    new: dict[tuple[str, int], int] = {}
    for tp in parts:
        lo, hi = earliest[tp], latest[tp]
        if to_earliest:
            target = lo
        elif to_latest:
            target = hi
        elif to_offset is not None:
            target = to_offset
        elif ts is not None:
            target = by_time[tp] if by_time.get(tp, -1) >= 0 else hi  # nothing that late: the end
        else:
            assert shift_by is not None
            base = committed[tp].offset if tp in committed else hi
            target = base + shift_by
        new[tp] = min(max(target, lo), hi)  # out-of-range targets are clamped, as Kafka's tool does
    _table(["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"], [[group, t, str(p), str(new[(t, p)])] for t, p in parts])
    if not execute:
        return
    request = ConsumerGroupTopicPartitions(group, [TopicPartition(t, p, off) for (t, p), off in new.items()])
    fut = admin.client.alter_consumer_group_offsets([request], request_timeout=admin.timeout_s)[group]
    res = admin.result(fut, what=f"Resetting the offsets of group '{group}' failed")
    for tp in res.topic_partitions or []:
        if tp.error is not None:
            raise CliError(f"Resetting the offset of {tp.topic}-{tp.partition} failed: "
                           f"{describe_kafka_error(tp.error, bootstrap=admin.bootstrap)}")
