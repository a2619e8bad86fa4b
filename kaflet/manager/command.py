"""`kaflet manager`: migrate the database, create the first admin, serve the console and API."""

from __future__ import annotations

import logging
import socket
import sys
from pathlib import Path

import click

from kaflet.manager.config import ConfigError, load_config


@click.command("manager")
@click.option("--config", "config_path", type=click.Path(dir_okay=False, path_type=Path),
              help="manager.toml with the service's settings.")
@click.option("--database-url", help="SQLAlchemy URL, e.g. postgresql://user:pw@host/db (default: SQLite in the data dir).")
@click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path),
              help="Where the SQLite database and generated secrets live (default: ./manager-data).")
@click.option("--host", help="Address to listen on (default 127.0.0.1).")
@click.option("--port", type=click.IntRange(0, 65535), help="Port to listen on (default 8080; 0: any free port).")
def manager(config_path: Path | None, database_url: str | None, data_dir: Path | None, host: str | None,
            port: int | None) -> None:
    """Run the management service and web console (applications, permissions, quotas, and the
    gateway API the brokers pull from)."""
    import uvicorn
    from sqlalchemy.exc import SQLAlchemyError

    from kaflet.manager.db import Database, head_revision, migrate, startup_lock
    from kaflet.manager.security import SecretBox
    from kaflet.manager.services import KeysDiffer, ensure_initial_admin, ensure_key_check
    from kaflet.manager.web import create_app

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        config = load_config(config_path, data_dir=data_dir, database_url=database_url, host=host, port=port)
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None
    db = Database(config.database_url)
    try:
        # One process at a time (several may start together on one database): the second finds
        # the schema migrated, the keys recorded and the admin created.
        with startup_lock(db.engine):
            before = migrate(db.engine)
            with db.session() as s:
                warning = ensure_key_check(s, config.secret_key, SecretBox(config.encryption_key))
                password = ensure_initial_admin(s)
    except KeysDiffer as exc:
        raise click.ClickException(str(exc)) from None
    except SQLAlchemyError as exc:
        raise click.ClickException(f"database {db.engine.url.render_as_string(hide_password=True)}: "
                                   f"{str(exc).splitlines()[0]}") from None
    if warning is not None:
        logging.getLogger("kaflet.manager").warning("%s", warning)
    head = head_revision()
    state = "created" if before is None else "up to date" if before == head else f"upgraded from {before} to {head}"
    click.echo(f"kaflet manager: database {db.engine.url.render_as_string(hide_password=True)} ({state})")
    if password is not None:
        click.echo(f"Initial admin account: user 'admin', password '{password}' (shown once; change it after logging in)")
    family = socket.AF_INET6 if ":" in config.host else socket.AF_INET
    try:
        sock = listening_socket(config.host, config.port)
    except OSError as exc:
        raise click.ClickException(f"cannot listen on {config.host}:{config.port}: {exc.strerror}") from None
    bound = sock.getsockname()[1]
    shown = f"[{config.host}]" if family == socket.AF_INET6 else config.host
    click.echo(f"kaflet manager listening on http://{shown}:{bound} (gateway.url = http://{shown}:{bound}/gateway)")
    sys.stdout.flush()
    server = uvicorn.Server(uvicorn.Config(create_app(config, db), log_level="info", access_log=True,
                                           proxy_headers=False, server_header=False))
    server.run(sockets=[sock])


def listening_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host``:``port`` (0: any free port) for uvicorn to listen on."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP, not the default 0: asyncio turns TCP_NODELAY on only for sockets whose proto
    # says TCP, and accepted connections inherit it. Without it Nagle held each response's body
    # (written after its headers) until the client's delayed ACK: ~40 ms per keep-alive request.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock
