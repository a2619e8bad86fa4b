"""`kaflet gateway`: the Kafka-Gateway process (README.md, "Running a gateway")."""

from __future__ import annotations

import asyncio
import logging
import sys

import click

from kaflet.cli.common import parse_properties_file


@click.command("gateway")
@click.option("--manager-url", metavar="URL", help="The management service's gateway API, such as "
              "http://manager:8080/gateway (gateway.manager.url).")
@click.option("--listen", metavar="[SASL_SSL://]HOST:PORT", help="Where clients connect (gateway.listen; default "
              "0.0.0.0:9092, SASL_PLAINTEXT; SASL_SSL:// takes the ssl.* settings of --config).")
@click.option("--mode", type=click.Choice(["discovery", "proxy"]),
              help="discovery: clients are sent their cluster's brokers; proxy: every request goes "
              "through the gateway (gateway.mode).")
@click.option("--advertised-host", metavar="HOST", help="The gateway's name for clients, in proxy mode only "
              "(gateway.advertised.host).")
@click.option("--config-cache", metavar="FILE", help="Keep the last discovery settings here and start from it when "
              "the management service is down (gateway.config.cache).")
@click.option("--metrics-listener", metavar="http://HOST:PORT", help="Serve Prometheus series at /metrics here "
              "(metrics.listener; default: none).")
@click.option("--config", "config_file", type=click.Path(dir_okay=False), metavar="FILE",
              help="A properties file of gateway settings; the options above override it.")
@click.option("--log-level", default="INFO", show_default=True,
              type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False))
def gateway(manager_url: str | None, listen: str | None, mode: str | None, advertised_host: str | None,
            config_cache: str | None, metrics_listener: str | None, config_file: str | None, log_level: str) -> None:
    """Run the gateway: one address that sends each client to its cluster."""
    from kaflet.proxy.config import GatewayConfig, GatewayConfigError
    from kaflet.proxy.process import serve

    props = parse_properties_file(config_file) if config_file else {}
    for key, value in (("gateway.manager.url", manager_url), ("gateway.listen", listen), ("gateway.mode", mode),
                       ("gateway.advertised.host", advertised_host), ("gateway.config.cache", config_cache),
                       ("metrics.listener", metrics_listener)):
        if value is not None:
            props[key] = value
    try:
        config = GatewayConfig.from_properties(props)
    except GatewayConfigError as exc:
        click.echo(f"Error: {exc}", err=True)
        sys.exit(1)
    logging.basicConfig(level=getattr(logging, log_level.upper()), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s [%(name)s] %(message)s")
    # aiohttp's "Unclosed client session" and the like would be noise at exit.
    logging.getLogger("asyncio").setLevel(logging.CRITICAL)
    sys.exit(asyncio.run(serve(config)))
