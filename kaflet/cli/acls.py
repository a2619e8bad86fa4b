"""`kaflet acls`: add, list and remove ACLs (like kafka-acls.sh)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, cast

import click
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    ResourcePatternType,
    ResourceType,
)

from kaflet.cli.common import Admin, CliError, bootstrap_option, config_file_option, timeout_option

CLUSTER_NAME = "kafka-cluster"

# kafka-acls.sh's operation names (case-insensitive, with or without the underscore).
_OPERATIONS = {op.name.replace("_", "").lower(): op for op in AclOperation
               if op not in (AclOperation.UNKNOWN, AclOperation.ANY)}
_PATTERN_TYPES = {"literal": ResourcePatternType.LITERAL, "prefixed": ResourcePatternType.PREFIXED,
                  "match": ResourcePatternType.MATCH, "any": ResourcePatternType.ANY}
# How Kafka prints resource types (ResourceType.toString); librdkafka calls the cluster BROKER.
_TYPE_NAMES = {ResourceType.TOPIC: "TOPIC", ResourceType.GROUP: "GROUP", ResourceType.BROKER: "CLUSTER",
               ResourceType.TRANSACTIONAL_ID: "TRANSACTIONAL_ID"}

Resource = tuple[ResourceType, str]


def _operation(name: str) -> AclOperation:
    op = _OPERATIONS.get(name.replace("_", "").replace("-", "").lower())
    if op is None:
        names = ", ".join(o.name.title().replace("_", "") for o in _OPERATIONS.values())
        raise click.BadParameter(f"{name!r} is not an ACL operation (one of {names})", param_hint="--operation")
    return op


def _principal(value: str, option: str) -> str:
    kind, sep, name = value.partition(":")
    if not sep or not kind or not name:
        raise click.BadParameter(f"expected Type:name (e.g. User:alice), got {value!r}", param_hint=option)
    return value


@click.command("acls")
@bootstrap_option()
@click.option("--add", is_flag=True, help="Add ACLs.")
@click.option("--remove", is_flag=True, help="Remove ACLs.")
@click.option("--list", "list_", is_flag=True, help="List ACLs (of the given resources, or all).")
@click.option("--allow-principal", multiple=True, metavar="TYPE:NAME", help="Principal to allow (repeatable).")
@click.option("--deny-principal", multiple=True, metavar="TYPE:NAME", help="Principal to deny (repeatable).")
@click.option("--principal", "principals", multiple=True, metavar="TYPE:NAME",
              help="With --list: only ACLs of this principal.")
@click.option("--allow-host", multiple=True, metavar="IP", help="Host the allow ACLs apply to (default: *).")
@click.option("--deny-host", multiple=True, metavar="IP", help="Host the deny ACLs apply to (default: *).")
@click.option("--operation", "operations", multiple=True, metavar="OP",
              help="Read, Write, Create, Delete, Alter, Describe, ClusterAction, DescribeConfigs, AlterConfigs, "
                   "IdempotentWrite or All (default: All; repeatable).")
@click.option("--topic", "topics", multiple=True, metavar="NAME", help="Topic resource (repeatable; * for all).")
@click.option("--group", "groups", multiple=True, metavar="NAME", help="Consumer group resource (repeatable).")
@click.option("--cluster", is_flag=True, help="The cluster resource.")
@click.option("--transactional-id", "transactional_ids", multiple=True, metavar="ID",
              help="Transactional id resource (repeatable).")
@click.option("--resource-pattern-type", "pattern_type", type=click.Choice(sorted(_PATTERN_TYPES), case_sensitive=False),
              default="literal", show_default=True,
              help="How resource names match: literal or prefixed (add); also match or any (list, remove).")
@click.option("--producer", is_flag=True, help="Shortcut: Write, Describe and Create on the topics.")
@click.option("--consumer", is_flag=True, help="Shortcut: Read and Describe on the topics, Read on the group.")
@click.option("--idempotent", is_flag=True, help="With --producer: also IdempotentWrite on the cluster.")
@click.option("--force", is_flag=True, help="Do not ask for confirmation before removing.")
@config_file_option()
@timeout_option()
def acls(bootstrap: str, add: bool, remove: bool, list_: bool, allow_principal: tuple[str, ...],
         deny_principal: tuple[str, ...], principals: tuple[str, ...], allow_host: tuple[str, ...],
         deny_host: tuple[str, ...], operations: tuple[str, ...], topics: tuple[str, ...], groups: tuple[str, ...],
         cluster: bool, transactional_ids: tuple[str, ...], pattern_type: str, producer: bool, consumer: bool,
         idempotent: bool, force: bool, config_file: str | None, timeout_s: float) -> None:
    """Add, list or remove ACLs."""
    chosen = [n for n, on in (("add", add), ("remove", remove), ("list", list_)) if on]
    if len(chosen) != 1:
        raise click.UsageError("Exactly one of --add, --remove or --list is required.")
    action = chosen[0]
    ptype = _PATTERN_TYPES[pattern_type.lower()]
    if action == "add" and ptype not in (ResourcePatternType.LITERAL, ResourcePatternType.PREFIXED):
        raise click.UsageError("--add needs --resource-pattern-type literal or prefixed.")
    for p in allow_principal:
        _principal(p, "--allow-principal")
    for p in deny_principal:
        _principal(p, "--deny-principal")
    for p in principals:
        _principal(p, "--principal")
    if (producer or consumer) and action == "list":
        raise click.UsageError("--producer and --consumer are only valid with --add or --remove.")
    if (producer or consumer) and operations:
        raise click.UsageError("--operation cannot be combined with --producer or --consumer.")
    if producer and consumer:
        raise click.UsageError("Use either --producer or --consumer, not both.")
    if producer and not topics and not transactional_ids:
        raise click.UsageError("--producer needs --topic (and may take --transactional-id).")
    if consumer and (not topics or not groups):
        raise click.UsageError("--consumer needs --topic and --group.")
    if idempotent and not producer:
        raise click.UsageError("--idempotent is only valid with --producer.")
    if action == "add" and not allow_principal and not deny_principal:
        raise click.UsageError("--add needs --allow-principal or --deny-principal.")
    if action == "list" and (allow_principal or deny_principal):
        raise click.UsageError("With --list, use --principal to filter by principal.")

    resources: list[Resource] = ([(ResourceType.TOPIC, t) for t in topics] + [(ResourceType.GROUP, g) for g in groups]
                                 + [(ResourceType.TRANSACTIONAL_ID, x) for x in transactional_ids]
                                 + ([(ResourceType.BROKER, CLUSTER_NAME)] if cluster else []))
    if action != "list" and not resources:
        raise click.UsageError("Name a resource: --topic, --group, --cluster or --transactional-id.")

    if producer or consumer:
        plan = _shortcut_plan(topics, groups, transactional_ids, producer, idempotent)
    else:
        ops = [_operation(o) for o in operations] or [AclOperation.ALL if action == "add" else AclOperation.ANY]
        plan = {r: ops for r in resources}

    admin = _admin(bootstrap, config_file, timeout_s)
    if action == "add":
        _add(admin, plan, ptype, allow_principal, deny_principal, allow_host, deny_host)
    elif action == "remove":
        _remove(admin, plan, ptype, allow_principal, deny_principal, allow_host, deny_host, force)
    else:
        _check_listable(admin)
        _list(admin, resources, ptype if resources else ResourcePatternType.ANY, principals)


def _shortcut_plan(topics: Iterable[str], groups: Iterable[str], transactional_ids: Iterable[str], producer: bool,
                   idempotent: bool) -> dict[Resource, list[AclOperation]]:
    """kafka-acls.sh's --producer / --consumer: the operations each client kind needs."""
    plan: dict[Resource, list[AclOperation]] = {}
    if producer:
        for t in topics:
            plan[(ResourceType.TOPIC, t)] = [AclOperation.WRITE, AclOperation.DESCRIBE, AclOperation.CREATE]
        for x in transactional_ids:
            plan[(ResourceType.TRANSACTIONAL_ID, x)] = [AclOperation.WRITE, AclOperation.DESCRIBE]
        if idempotent:
            plan[(ResourceType.BROKER, CLUSTER_NAME)] = [AclOperation.IDEMPOTENT_WRITE]
    else:
        for t in topics:
            plan[(ResourceType.TOPIC, t)] = [AclOperation.READ, AclOperation.DESCRIBE]
        for g in groups:
            plan[(ResourceType.GROUP, g)] = [AclOperation.READ]
    return plan


def _admin(bootstrap: str, config_file: str | None, timeout_s: float) -> Admin:
    admin = Admin(bootstrap, config_file, timeout_s)
    admin.metadata()  # fail fast, with the right message, if no broker answers
    return admin


def _entries(allow_principal: Iterable[str], deny_principal: Iterable[str], allow_host: Iterable[str],
             deny_host: Iterable[str]) -> list[tuple[str, str, AclPermissionType]]:
    out = [(p, h, AclPermissionType.ALLOW) for p in allow_principal for h in (list(allow_host) or ["*"])]
    out += [(p, h, AclPermissionType.DENY) for p in deny_principal for h in (list(deny_host) or ["*"])]
    return out


def _pattern_text(restype: ResourceType, name: str, ptype: ResourcePatternType) -> str:
    return f"ResourcePattern(resourceType={_TYPE_NAMES.get(restype, restype.name)}, name={name}, " \
           f"patternType={ptype.name})"


def _entry_text(b: AclBinding) -> str:
    op, perm = _granted(b)
    return f"\t(principal={b.principal}, host={b.host}, operation={op.name}, permissionType={perm.name})"


def _filter(restype: ResourceType, name: str | None, ptype: ResourcePatternType, principal: str | None,
            host: str | None, op: AclOperation, perm: AclPermissionType) -> AclBindingFilter:
    """An ACL filter; None matches any name, principal or host."""
    # confluent-kafka annotates these three as str, though its documentation and code take None
    # for "any": the library's annotation is wrong.
    return AclBindingFilter(restype, name, ptype, principal, host, op, perm)  # type: ignore[arg-type]


def _granted(b: AclBinding) -> tuple[AclOperation, AclPermissionType]:
    """A binding's operation and permission type. AclBinding turns str and int arguments into
    these enums when it is made, but annotates its attributes with the arguments' union."""
    return cast(AclOperation, b.operation), cast(AclPermissionType, b.permission_type)


def _add(admin: Admin, plan: dict[Resource, list[AclOperation]], ptype: ResourcePatternType,
         allow_principal: Iterable[str], deny_principal: Iterable[str], allow_host: Iterable[str],
         deny_host: Iterable[str]) -> None:
    entries = _entries(allow_principal, deny_principal, allow_host, deny_host)
    for (restype, name), ops in plan.items():
        bindings = [AclBinding(restype, name, ptype, p, h, op, perm) for p, h, perm in entries for op in ops]
        click.echo(f"Adding ACLs for resource `{_pattern_text(restype, name, ptype)}`: ")
        for b in bindings:
            click.echo(_entry_text(b))
        click.echo()
        futures = admin.client.create_acls(bindings, request_timeout=admin.timeout_s)
        for fut in futures.values():
            admin.result(fut)
        _list(admin, [(restype, name)], ptype, ())


def _remove(admin: Admin, plan: dict[Resource, list[AclOperation]], ptype: ResourcePatternType,
            allow_principal: Iterable[str], deny_principal: Iterable[str], allow_host: Iterable[str],
            deny_host: Iterable[str], force: bool) -> None:
    entries: list[tuple[str | None, str | None, AclPermissionType]] = list(
        _entries(allow_principal, deny_principal, allow_host, deny_host))
    if not entries:
        entries = [(None, None, AclPermissionType.ANY)]  # every ACL of the resource
    for (restype, name), ops in plan.items():
        what = _pattern_text(restype, name, ptype)
        if not force and not click.confirm(f"Are you sure you want to remove ACLs: {what}?", default=False):
            continue
        filters = [_filter(restype, name, ptype, p, h, op, perm) for p, h, perm in entries for op in ops]
        futures = admin.client.delete_acls(filters, request_timeout=admin.timeout_s)
        removed = 0
        for fut in futures.values():
            removed += len(admin.result(fut))
        click.echo(f"Removed {removed} ACL{'s' if removed != 1 else ''} from resource `{what}`.")
        _list(admin, [(restype, name)], ptype, ())


def _check_listable(admin: Admin) -> None:
    """Say why a listing would be empty when the broker refused it.

    librdkafka drops DescribeAcls' top-level error code (a refusal and a broker without an
    authorizer both come back as an empty list), so ask the broker in ways whose errors do arrive:
    the cluster's authorized operations, and its authorizer.class.name.
    """
    try:
        cluster = admin.result(admin.client.describe_cluster(include_authorized_operations=True,
                                                             request_timeout=admin.timeout_s))
    except CliError:
        return  # an old broker without DescribeCluster: list what we get
    # None means none: librdkafka reports an empty set of authorized operations as None.
    ops = set(cluster.authorized_operations or [])
    if AclOperation.DESCRIBE not in ops:
        raise CliError("Cluster authorization failed: listing ACLs needs Describe on the cluster "
                       "(CLUSTER_AUTHORIZATION_FAILED).")
    if AclOperation.DESCRIBE_CONFIGS not in ops:
        return  # only an authorizer withholds it
    from confluent_kafka.admin import ConfigResource

    res = ConfigResource(ConfigResource.Type.BROKER, str(cluster.controller.id if cluster.controller else ""))
    try:
        configs = admin.result(admin.client.describe_configs([res], request_timeout=admin.timeout_s)[res])
    except CliError:
        return
    entry = configs.get("authorizer.class.name")
    if entry is not None and not entry.value:
        raise CliError("No Authorizer is configured on the broker (SECURITY_DISABLED).")


def _list(admin: Admin, resources: list[Resource], ptype: ResourcePatternType, principals: Iterable[str]) -> None:
    filters = [_filter(r, n, ptype, None, None, AclOperation.ANY, AclPermissionType.ANY) for r, n in resources] or \
              [_filter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                       AclPermissionType.ANY)]
    wanted = set(principals)
    grouped: dict[tuple[Any, str, Any], list[AclBinding]] = {}
    for f in filters:
        for b in admin.result(admin.client.describe_acls(f, request_timeout=admin.timeout_s)):
            if wanted and b.principal not in wanted:
                continue
            grouped.setdefault((b.restype, b.name, b.resource_pattern_type), []).append(b)
    for (restype, name, rptype), bindings in sorted(grouped.items(), key=lambda kv: (kv[0][0].value, kv[0][1],
                                                                                     kv[0][2].value)):
        click.echo(f"Current ACLs for resource `{_pattern_text(restype, name, rptype)}`: ")
        for b in sorted(bindings, key=lambda b: (b.principal, b.host, *(e.value for e in _granted(b)))):
            click.echo(_entry_text(b))
        click.echo()
