"""`kaflet configs`: describe and alter topic, broker, user and client configs (like kafka-configs.sh)."""

from __future__ import annotations

from typing import Any

import click
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource, ResourceType

from kaflet.cli.common import (
    Admin,
    CliError,
    bootstrap_option,
    config_file_option,
    raw_connect,
    raw_connection_errors,
    timeout_option,
    unreachable_message,
)

_DESCRIBE_CONFIGS, _INCREMENTAL_ALTER_CONFIGS = 32, 44
_BROKER = 4

# (name, value, source, sensitive, [(synonym source, synonym name, synonym value)])
Entry = tuple[str, "str | None", int, bool, list[tuple[int, str, "str | None"]]]


def parse_add_config(text: str) -> dict[str, str]:
    """`k=v,k2=[a,b]` -> {k: v, k2: "a,b"}: commas inside [...] belong to a list value."""
    items, depth, cur = [], 0, ""
    for ch in text:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth = max(depth - 1, 0)
        if ch == "," and depth == 0:
            items.append(cur)
            cur = ""
        else:
            cur += ch
    items.append(cur)
    out: dict[str, str] = {}
    for item in (i.strip() for i in items):
        if not item:
            continue
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"expected key=value, got {item!r}", param_hint="--add-config")
        value = value.strip()
        if value.startswith("[") and value.endswith("]"):
            value = value[1:-1]
        out[key.strip()] = value
    return out


def _source_name(source: int) -> str:
    try:
        return ConfigSource(source).name
    except ValueError:
        return "UNKNOWN"


class _Configs(Admin):
    """The shared admin helper plus DescribeConfigs/IncrementalAlterConfigs over kaflet's own connection."""

    def describe(self, rtype: ResourceType, name: str) -> list[Entry]:
        """DescribeConfigs with synonyms, over our own connection: the client libraries keep one
        synonym per name, and the same name often appears at two levels (static and default)."""
        from kaflet.protocol import codec
        from kaflet.protocol.errors import ErrorCode

        address = None
        if rtype == ResourceType.BROKER and name:
            broker = self.metadata().brokers.get(int(name))
            if broker is None or broker.host is None:
                raise CliError(f"Broker {name} is not in the cluster.")
            address = (broker.host, broker.port)
        req_cls = codec.request_class(_DESCRIBE_CONFIGS)
        req = req_cls(resources=[req_cls.DescribeConfigsResource(resource_type=int(rtype.value), resource_name=name,
                                                                 configuration_keys=None)], include_synonyms=True)
        result = self._raw(_DESCRIBE_CONFIGS, 1, req, address).results[0]
        if result.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION and rtype == ResourceType.TOPIC:
            raise CliError(f"Topic '{name}' does not exist.")
        if result.error_code:
            try:
                code = ErrorCode(result.error_code).name
            except ValueError:
                code = f"error {result.error_code}"
            raise CliError(f"{result.error_message or 'DescribeConfigs failed'} ({code}).")
        return [(c.name, c.value, c.config_source, c.is_sensitive, [(y.source, y.name, y.value) for y in c.synonyms])
                for c in sorted(result.configs, key=lambda c: c.name)]

    def alter(self, rtype: ResourceType, name: str, add: dict[str, str], delete: list[str]) -> None:
        ops = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in add.items()]
        ops += [ConfigEntry(k, None, incremental_operation=AlterConfigOpType.DELETE) for k in delete]
        res = ConfigResource(rtype, name, incremental_configs=ops)
        futures = self.client.incremental_alter_configs([res], request_timeout=self.timeout_s)
        self.result(futures[res], name if rtype == ResourceType.TOPIC else None)

    # The cluster-wide broker default is the BROKER resource with an empty name, which the
    # client libraries refuse to send; it goes over our own connection instead (plain for
    # PLAINTEXT, TLS and/or SASL from --command-config otherwise: kaflet.network.raw_connection).

    def _raw(self, api_key: int, version: int, request: Any, address: tuple[str, int] | None = None) -> Any:
        from kaflet.network.raw_connection import security_protocol

        if address is None:
            with raw_connection_errors(self.bootstrap, self.timeout_s):
                plaintext = security_protocol(self.conf) == "PLAINTEXT"
            if plaintext:
                self.metadata()  # the usual "is the broker up?" probe, with the usual error
            host, _, port = self.bootstrap.split(",")[0].strip().rpartition(":")
        else:
            host, port = address[0], str(address[1])
        try:
            port_no = int(port)
        except ValueError as exc:
            raise CliError(unreachable_message(self.bootstrap, self.timeout_s, str(exc))) from exc
        # TLS and SASL as --command-config says; its errors are already worded.
        with raw_connect(host, port_no, self.conf, self.timeout_s, self.bootstrap) as conn:
            try:
                return conn.request(api_key, version, request)
            except (OSError, ValueError) as exc:
                raise CliError(unreachable_message(self.bootstrap, self.timeout_s, str(exc))) from exc

    def describe_default(self) -> list[Entry]:
        return self.describe(ResourceType.BROKER, "")

    def alter_default(self, add: dict[str, str], delete: list[str]) -> None:
        from kaflet.protocol import codec

        req_cls = codec.request_class(_INCREMENTAL_ALTER_CONFIGS)
        res_cls = req_cls.AlterConfigsResource
        configs = [res_cls.AlterableConfig(name=k, config_operation=0, value=v) for k, v in add.items()]
        configs += [res_cls.AlterableConfig(name=k, config_operation=1, value=None) for k in delete]
        req = req_cls(resources=[res_cls(resource_type=_BROKER, resource_name="", configs=configs)], validate_only=False)
        result = self._raw(_INCREMENTAL_ALTER_CONFIGS, 0, req).responses[0]
        if result.error_code:
            raise CliError(f"{result.error_message or 'IncrementalAlterConfigs failed'} (error {result.error_code}).")


def _print_entries(title: str, entries: list[Entry], only_source: int | None) -> None:
    click.echo(title)
    for name, value, source, sensitive, synonyms in entries:
        if only_source is not None and source != only_source:
            continue
        syns = ", ".join(f"{_source_name(s)}:{n}={v}" for s, n, v in synonyms)
        click.echo(f"  {name}={value} sensitive={str(sensitive).lower()} synonyms={{{syns}}}")


@click.command("configs")
@bootstrap_option()
@click.option("--entity-type", type=click.Choice(["topics", "brokers", "users", "clients"]), required=True,
              help="Kind of entity whose configs to describe or alter.")
@click.option("--entity-name", metavar="NAME", help="Topic name, broker id, user or client id.")
@click.option("--entity-default", is_flag=True, help="The default entity (brokers, users or clients).")
@click.option("--describe", is_flag=True, help="Show the entity's configs.")
@click.option("--alter", is_flag=True, help="Change the entity's configs.")
@click.option("--all", "all_", is_flag=True, help="With --describe: every config, not only dynamic ones.")
@click.option("--add-config", "add_configs", multiple=True, metavar="K=V,K2=[A,B]",
              help="Configs to set, comma separated; list values go in square brackets.")
@click.option("--delete-config", "delete_configs", multiple=True, metavar="K,K2",
              help="Configs to remove (back to their defaults), comma separated.")
@config_file_option()
@timeout_option()
def configs(bootstrap: str, entity_type: str, entity_name: str | None, entity_default: bool, describe: bool,
            alter: bool, all_: bool, add_configs: tuple[str, ...], delete_configs: tuple[str, ...],
            config_file: str | None, timeout_s: float) -> None:
    """Describe or alter topic, broker, user and client configs."""
    if describe == alter:
        raise click.UsageError("Exactly one of --describe or --alter is required.")
    if entity_default and entity_type == "topics":
        raise click.UsageError("--entity-default is only valid with --entity-type brokers, users or clients.")
    if entity_default and entity_name:
        raise click.UsageError("Give --entity-name or --entity-default, not both.")
    if entity_type == "brokers" and entity_name is not None and not entity_name.strip().isdigit():
        raise click.UsageError(f"The entity name for brokers must be a broker id, got {entity_name!r}.")
    if describe and (add_configs or delete_configs):
        raise click.UsageError("--add-config and --delete-config are only valid with --alter.")
    if all_ and not describe:
        raise click.UsageError("--all is only valid with --describe.")
    add: dict[str, str] = {}
    for text in add_configs:
        add.update(parse_add_config(text))
    delete = [k.strip() for text in delete_configs for k in text.split(",") if k.strip()]
    if alter:
        if not entity_name and not entity_default:
            raise click.UsageError("--alter needs --entity-name (or --entity-default).")
        if not add and not delete:
            raise click.UsageError("--alter needs --add-config or --delete-config.")
        both = sorted(set(add) & set(delete))
        if both:
            raise click.UsageError(f"Configs can not be added and deleted at once: {', '.join(both)}.")

    if entity_type in ("users", "clients"):
        _users_or_clients(bootstrap, config_file, timeout_s, entity_type, entity_name, entity_default, alter, add, delete)
        return
    admin = _Configs(bootstrap, config_file, timeout_s)
    if entity_type == "topics":
        rtype = ResourceType.TOPIC
        if alter:
            assert entity_name is not None
            admin.alter(rtype, entity_name, add, delete)
            click.echo(f"Completed updating config for topic {entity_name}.")
            return
        names = [entity_name] if entity_name else sorted(admin.metadata().topics)
        for name in names:
            title = f"{'All' if all_ else 'Dynamic'} configs for topic {name} are:"
            _print_entries(title, admin.describe(rtype, name), None if all_ else ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
        return
    rtype = ResourceType.BROKER
    if entity_default:
        if alter:
            admin.alter_default(add, delete)
            click.echo("Completed updating default config for brokers in the cluster.")
        else:
            _print_entries("Default configs for brokers in the cluster are:", admin.describe_default(), None)
        return
    if alter:
        assert entity_name is not None
        admin.alter(rtype, entity_name.strip(), add, delete)
        click.echo(f"Completed updating config for broker {entity_name.strip()}.")
        return
    ids = [entity_name.strip()] if entity_name else [str(b) for b in sorted(admin.metadata().brokers)]
    for broker_id in ids:
        title = f"{'All' if all_ else 'Dynamic'} configs for broker {broker_id} are:"
        _print_entries(title, admin.describe(rtype, broker_id),
                       None if all_ else ConfigSource.DYNAMIC_BROKER_CONFIG.value)


def _users_or_clients(bootstrap: str, config_file: str | None, timeout_s: float, entity_type: str,
                      entity_name: str | None, entity_default: bool, alter: bool, add: dict[str, str],
                      delete: list[str]) -> None:
    """Quotas (ClientQuotas APIs) and, for users, SCRAM credentials (SCRAM-SHA-256=[iterations=N,
    password=P], through the KIP-554 APIs): each key goes to its own API, as in kafka-configs.sh."""
    from kaflet.cli import quotas, users

    admin = _Configs(bootstrap, config_file, timeout_s)
    raw = admin._raw

    if alter:
        quota_add, quota_delete, scram_add, scram_delete = quotas.split_keys(entity_type, add, delete)
        if (scram_add or scram_delete) and entity_default:
            raise click.UsageError("SCRAM credentials can only be set for a named user, not the default.")
        if quota_add or quota_delete:
            quotas.alter(raw, entity_type, None if entity_default else entity_name, quota_add, quota_delete)
        if scram_add or scram_delete:
            assert entity_name is not None
            users.alter_users(bootstrap, config_file, timeout_s, entity_name, scram_add, scram_delete)
        elif entity_type == "users":
            click.echo(f"Completed updating config for user {entity_name if entity_name else '<default>'}.")
        if entity_type == "clients":
            click.echo(f"Completed updating config for client {entity_name if entity_name else '<default>'}.")
        return
    found = quotas.describe(raw, entity_type, entity_name, entity_default)
    quotas.print_quotas(found, entity_type, entity_name, entity_default)
    if entity_type == "users" and not entity_default:
        users.describe_users(bootstrap, config_file, timeout_s, entity_name)
