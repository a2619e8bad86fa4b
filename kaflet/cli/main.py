"""The `kaflet` command: broker plus Kafka-style topic, produce and consume tools."""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from typing import NamedTuple

import click

from kaflet.cli.acls import acls
from kaflet.cli.configs import configs
from kaflet.cli.consume import consume
from kaflet.cli.groups import groups
from kaflet.cli.produce import produce
from kaflet.cli.topics import topics


class _Lazy(NamedTuple):
    """A subcommand imported only when it runs."""

    module: str
    attr: str
    #: Its one-line help, shown by `kaflet --help` without importing the module (a unit test
    #: checks it against the command's own).
    summary: str
    #: The `kaflet[extra]` whose packages the command needs beyond the base install.
    extra: str | None = None


# Commands imported only when used: the broker pulls in the whole server, which the client tools
# should not pay for at start-up, and the manager needs packages a plain `pip install kaflet`
# does not bring.
_LAZY_COMMANDS = {
    "broker": _Lazy("kaflet.cli.broker", "broker",
                    "Start a broker from a Kafka server.properties file (optional) and overrides."),
    "dump-log": _Lazy("kaflet.cli.dump_log", "dump_log",
                      "Print the batches, records and index entries of segment files (like kafka-dump-log.sh)."),
    "dev-cluster": _Lazy("kaflet.cli.dev_cluster", "dev_cluster",
                         "Run a local cluster: ZooKeeper and N brokers, until Ctrl-C or SIGTERM."),
    "gateway": _Lazy("kaflet.cli.gateway", "gateway",
                     "Run the gateway: one address that sends each client to its cluster."),
    "leader-election": _Lazy("kaflet.cli.leader_election", "leader_election",
                             "Elect partition leaders (preferred or unclean), like kafka-leader-election.sh."),
    "log-dirs": _Lazy("kaflet.cli.log_dirs", "log_dirs",
                      "Describe the brokers' log directories, like kafka-log-dirs.sh."),
    "reassign-partitions": _Lazy("kaflet.cli.reassign_partitions", "reassign_partitions",
                                 "Move partition replicas between brokers, like kafka-reassign-partitions.sh."),
    "top": _Lazy("kaflet.cli.top", "top",
                 "Watch brokers, topic rates, under-replicated partitions and lagging groups live (q quits)."),
    "transactions": _Lazy("kaflet.cli.transactions", "transactions",
                          "Analyze the transactional state of producers and recover from hanging transactions."),
    # The management service is a separate application on top of the client tools.
    "manager": _Lazy("kaflet.manager.command", "manager",
                     "Run the management service and web console (applications, permissions, quotas, "
                     "and the gateway API the brokers pull from).", extra="manager"),
}


def _module_exists(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


def _missing_extra(name: str, summary: str, extra: str, missing: str) -> click.Command:
    """Stands in for a command whose extra is not installed: any invocation says so in one line."""

    def explain() -> None:
        click.echo(f"Error: `kaflet {name}` needs the {extra!r} extra (no module named {missing!r}): "
                   f"pip install 'kaflet[{extra}]'", err=True)
        sys.exit(2)

    # No options of its own and every argument accepted, so `--help` or the real command's flags
    # get the same one line rather than a usage error about flags it does not know.
    return click.Command(name, callback=explain, help=summary, add_help_option=False,
                         context_settings={"ignore_unknown_options": True, "allow_extra_args": True})


class _KafletGroup(click.Group):
    """A click group that resolves some subcommands on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        lazy = [name for name, spec in _LAZY_COMMANDS.items() if _module_exists(spec.module)]
        return sorted({*super().list_commands(ctx), *lazy})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in _LAZY_COMMANDS and cmd_name not in self.commands:
            spec = _LAZY_COMMANDS[cmd_name]
            # A missing module just means "not written yet": leave the command out.
            # Any other import failure is a real bug and must surface.
            if not _module_exists(spec.module):
                return None
            try:
                command = getattr(importlib.import_module(spec.module), spec.attr)
            except ModuleNotFoundError as exc:
                # Only a package from outside kaflet, for a command that has an extra, is the
                # extra not being installed; a kaflet module missing is a bug.
                own = exc.name is None or exc.name.split(".")[0] == "kaflet"
                if spec.extra is None or own or os.environ.get("KAFLET_TRACEBACK"):
                    raise
                command = _missing_extra(cmd_name, spec.summary, spec.extra, str(exc.name))
            self.add_command(command, cmd_name)
        return super().get_command(ctx, cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # The lazy commands' summaries come from the table: importing them all would make
        # `kaflet --help` load the server and the manager (and fail without the manager's extra).
        listed: dict[str, click.Command] = {}
        for name in self.list_commands(ctx):
            command = self.commands.get(name)
            if command is None and name in _LAZY_COMMANDS:
                # A bare command with the summary as help, for click's own shortening of it.
                command = click.Command(name, help=_LAZY_COMMANDS[name].summary)
            if command is not None and not command.hidden:
                listed[name] = command
        if not listed:
            return
        limit = formatter.width - 6 - max(len(name) for name in listed)
        rows = [(name, command.get_short_help_str(limit)) for name, command in listed.items()]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


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
