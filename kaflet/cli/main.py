"""The `kaflet` command: broker plus Kafka-style topic, produce and consume tools."""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys

import click

from kaflet.cli.acls import acls
from kaflet.cli.configs import configs
from kaflet.cli.consume import consume
from kaflet.cli.groups import groups
from kaflet.cli.produce import produce
from kaflet.cli.topics import topics

# Commands imported only when used: the broker pulls in the whole server, which the
# client tools should not pay for at start-up. name -> (module, attribute).
_LAZY_COMMANDS = {
    "broker": ("kaflet.cli.broker", "broker"),
    "dump-log": ("kaflet.cli.dump_log", "dump_log"),
    "dev-cluster": ("kaflet.cli.dev_cluster", "dev_cluster"),
    "leader-election": ("kaflet.cli.leader_election", "leader_election"),
    "log-dirs": ("kaflet.cli.log_dirs", "log_dirs"),
    "reassign-partitions": ("kaflet.cli.reassign_partitions", "reassign_partitions"),
    "transactions": ("kaflet.cli.transactions", "transactions"),
    # The management service is a separate application on top of the client tools.
    "manager": ("kaflet.manager.command", "manager"),
}


def _module_exists(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


class _KafletGroup(click.Group):
    """A click group that resolves some subcommands on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        lazy = [name for name, (module, _) in _LAZY_COMMANDS.items() if _module_exists(module)]
        return sorted({*super().list_commands(ctx), *lazy})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in _LAZY_COMMANDS and cmd_name not in self.commands:
            module, attr = _LAZY_COMMANDS[cmd_name]
            # A missing module just means "not written yet": leave the command out.
            # Any other import failure is a real bug and must surface.
            if not _module_exists(module):
                return None
            command = getattr(importlib.import_module(module), attr)
            self.add_command(command, cmd_name)
        return super().get_command(ctx, cmd_name)


@click.group("kaflet", cls=_KafletGroup, context_settings={"help_option_names": ["-h", "--help"]})
def kaflet() -> None:
    """kaflet: a Kafka-compatible broker and its command-line tools."""


kaflet.add_command(topics)
kaflet.add_command(produce)
kaflet.add_command(consume)
kaflet.add_command(groups)
kaflet.add_command(configs)
kaflet.add_command(acls)


def main() -> None:
    """Console-script entry point: never let a traceback reach the user.

    Set KAFLET_TRACEBACK=1 to see the stack of an unexpected error instead.
    """
    try:
        kaflet.main(prog_name="kaflet", standalone_mode=True)
    except SystemExit:
        raise
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception as exc:  # last-resort guard for the one-line error contract
        if os.environ.get("KAFLET_TRACEBACK"):
            raise  # developers debugging kaflet want the full stack
        click.echo(f"Error: unexpected {type(exc).__name__}: {' '.join(str(exc).split())}", err=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
