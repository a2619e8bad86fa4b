"""SCRAM credentials of users for `kaflet configs --entity-type users` (like kafka-configs.sh).

Goes through AlterUserScramCredentials / DescribeUserScramCredentials (KIP-554), so the password
never reaches the broker: the client salts and hashes it.
"""

from __future__ import annotations

from typing import Any

import click
from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)

from kaflet.cli.common import Admin, CliError, unreachable_message

MECHANISMS = {"SCRAM-SHA-256": ScramMechanism.SCRAM_SHA_256, "SCRAM-SHA-512": ScramMechanism.SCRAM_SHA_512}
DEFAULT_ITERATIONS = 4096  # kafka-configs.sh's default


def parse_scram_value(mechanism: str, value: str) -> tuple[int, str]:
    """`iterations=8192,password=secret` (brackets already removed) -> (iterations, password)."""
    fields: dict[str, str] = {}
    for item in value.split(","):
        key, sep, val = item.partition("=")
        if not sep or key.strip() not in ("iterations", "password"):
            raise click.BadParameter(f"{mechanism} expects [iterations=N,password=P] or [password=P], got {key!r}",
                                     param_hint="--add-config")
        fields[key.strip()] = val
    if not fields.get("password"):
        raise click.BadParameter(f"{mechanism} needs a non-empty password=...", param_hint="--add-config")
    try:
        iterations = int(fields.get("iterations", DEFAULT_ITERATIONS))
    except ValueError:
        raise click.BadParameter(f"{mechanism}: iterations must be an integer", param_hint="--add-config") from None
    return iterations, fields["password"]


def alter_users(bootstrap: str, config_file: str | None, timeout_s: float, user: str, add: dict[str, str],
                delete: list[str]) -> None:
    """Upsert and delete SCRAM credentials of one user."""
    unknown = [k for k in [*add, *delete] if k not in MECHANISMS]
    if unknown:
        raise click.UsageError(f"Only SCRAM-SHA-256 and SCRAM-SHA-512 credentials can be altered for users in "
                               f"this kaflet version, not: {', '.join(unknown)}.")
    alterations: list[Any] = []
    for mech, value in add.items():
        iterations, password = parse_scram_value(mech, value)
        alterations.append(UserScramCredentialUpsertion(user, ScramCredentialInfo(MECHANISMS[mech], iterations),
                                                        password.encode("utf-8")))
    alterations += [UserScramCredentialDeletion(user, MECHANISMS[mech]) for mech in delete]
    admin = Admin(bootstrap, config_file, timeout_s)
    for future in admin.client.alter_user_scram_credentials(alterations, request_timeout=timeout_s).values():
        admin.result(future)
    click.echo(f"Completed updating config for user {user}.")


def describe_users(bootstrap: str, config_file: str | None, timeout_s: float, user: str | None) -> None:
    """Print the SCRAM mechanisms (and iterations) of one user, or of every user that has some."""
    admin = Admin(bootstrap, config_file, timeout_s)
    if user:
        futures = admin.client.describe_user_scram_credentials([user], request_timeout=timeout_s)
        try:
            # One future per user asked for (a single one only when listing every user).
            future = futures[user] if isinstance(futures, dict) else futures
            found = {user: future.result(timeout=timeout_s + 5)}
        except KafkaException as exc:
            if "does not exist" not in str(exc):
                raise admin.fail(exc) from exc
            found = {}
        except TimeoutError as exc:
            raise CliError(unreachable_message(bootstrap, timeout_s)) from exc
    else:
        found = admin.result(admin.client.describe_user_scram_credentials(request_timeout=timeout_s))
    if user and not found:
        click.echo(f"SCRAM credential configs for user-principal '{user}' are ")
    for name in sorted(found):
        infos = ", ".join(f"{i.mechanism.name.replace('_', '-')}=iterations={i.iterations}"
                          for i in found[name].scram_credential_infos)
        click.echo(f"SCRAM credential configs for user-principal '{name}' are {infos}")
