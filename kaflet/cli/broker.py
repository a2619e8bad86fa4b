"""`kaflet broker`: start a broker, like kafka-server-start.sh."""

from __future__ import annotations

import sys

import click

from kaflet.server.config import BrokerConfig, ConfigError


@click.command("broker")
@click.argument("config_file", required=False, type=click.Path(dir_okay=False))
@click.option("--override", "overrides", multiple=True, metavar="KEY=VALUE",
              help="Set a server.properties key, overriding the file (repeatable).")
@click.option("--log-level", default="INFO", show_default=True,
              type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False))
def broker(config_file: str | None, overrides: tuple[str, ...], log_level: str) -> None:
    """Start a broker from a Kafka server.properties file (optional) and overrides.

    With no file: listener PLAINTEXT://127.0.0.1:9092 and data in ./data.
    """
    from kaflet.server.main import exit_process, run, setup_logging

    try:
        config = BrokerConfig.load(config_file, overrides)
    except ConfigError as exc:
        click.echo(f"Error: {exc}", err=True)
        sys.exit(1)
    setup_logging(log_level)
    exit_process(run(config))
