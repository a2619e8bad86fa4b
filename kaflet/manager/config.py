"""The manager's settings: a TOML file, command-line overrides, and secrets kept in the data dir.

``manager.toml`` (every key optional)::

    host = "127.0.0.1"
    port = 8080
    data_dir = "manager-data"
    database_url = "postgresql://user:pw@db/kaflet"   # SQLite or PostgreSQL; default: SQLite in data_dir
    secret_key = "..."        # signs session cookies
    encryption_key = "..."    # Fernet key: application passwords at rest
    cookie_secure = false     # true behind HTTPS: the session cookie is then sent only over TLS
    session_max_age_s = 28800
    login_max_failures = 5    # per user name and per client address ...
    login_window_s = 300      # ... within this window, then HTTP 429
    max_body_bytes = 1048576

    [gateway]
    token = "..."                            # brokers send it (gateway.url = http://gw:<token>@host:8080/gateway)
    allowed_addresses = ["127.0.0.1/32", "::1/128"]   # or from these networks without a token

Keys not given in the file are generated on first start and kept in ``<data_dir>/secrets.toml``
(mode 0600), so sessions and stored passwords survive restarts.
"""

from __future__ import annotations

import ipaddress
import os
import secrets
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography.fernet import Fernet
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8080
SECRETS_FILE = "secrets.toml"
DEFAULT_ALLOWED = ("127.0.0.1/32", "::1/128")

_KEYS = {"host", "port", "data_dir", "database_url", "secret_key", "encryption_key", "cookie_secure",
         "session_max_age_s", "login_max_failures", "login_window_s", "max_body_bytes", "gateway",
         "cluster_sample_interval_s"}
_GATEWAY_KEYS = {"token", "allowed_addresses"}


class ConfigError(ValueError):
    """A setting is missing, unknown or of the wrong type; the message names it."""


@dataclass
class GatewaySettings:
    """Who may call /gateway/api/v1: a shared token, or an address in an allowed network."""

    token: str | None = None
    allowed_networks: list[ipaddress.IPv4Network | ipaddress.IPv6Network] = field(
        default_factory=lambda: [ipaddress.ip_network(n) for n in DEFAULT_ALLOWED])


@dataclass
class ManagerConfig:
    """Everything `kaflet manager` runs with."""

    data_dir: Path
    database_url: str
    secret_key: str
    encryption_key: str
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    cookie_secure: bool = False
    session_max_age_s: int = 8 * 3600
    login_max_failures: int = 5
    login_window_s: int = 300
    max_body_bytes: int = 1024 * 1024
    #: How often each registered cluster is sampled for the console's cluster pages (seconds).
    cluster_sample_interval_s: float = 30.0
    gateway: GatewaySettings = field(default_factory=GatewaySettings)


def sqlite_url(data_dir: Path) -> str:
    """The default database: SQLite in the data dir."""
    return f"sqlite:///{(data_dir / 'manager.db').resolve()}"


def _typed(raw: dict[str, Any], key: str, kind: type, default: Any) -> Any:
    if key not in raw:
        return default
    value = raw[key]
    if kind is int and (isinstance(value, bool) or not isinstance(value, int)):
        raise ConfigError(f"{key} must be an integer, not {value!r}")
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if kind is not int and not isinstance(value, kind):
        raise ConfigError(f"{key} must be a {kind.__name__}, not {value!r}")
    return value


def _gateway(raw: Any) -> GatewaySettings:
    if raw is None:
        return GatewaySettings()
    if not isinstance(raw, dict):
        raise ConfigError("[gateway] must be a table")
    unknown = set(raw) - _GATEWAY_KEYS
    if unknown:
        raise ConfigError(f"unknown key(s) in [gateway]: {', '.join(sorted(unknown))}")
    token = _typed(raw, "token", str, None)
    if token is not None and len(token) < 16:
        raise ConfigError("gateway.token must be at least 16 characters")
    settings = GatewaySettings(token=token)
    if "allowed_addresses" in raw:
        nets = raw["allowed_addresses"]
        if not isinstance(nets, list) or not all(isinstance(n, str) for n in nets):
            raise ConfigError("gateway.allowed_addresses must be a list of addresses or networks")
        try:
            settings.allowed_networks = [ipaddress.ip_network(n, strict=False) for n in nets]
        except ValueError as exc:
            raise ConfigError(f"gateway.allowed_addresses: {exc}") from None
    return settings


def _load_or_create_secrets(data_dir: Path) -> dict[str, str]:
    path = data_dir / SECRETS_FILE
    if not path.exists():
        generated = {"secret_key": secrets.token_urlsafe(48), "encryption_key": Fernet.generate_key().decode()}
        # Written whole under a temporary name, then linked into place: of processes starting
        # together on one data dir exactly one link succeeds, and nobody reads a half-written file.
        temp = data_dir / f".{SECRETS_FILE}.{os.getpid()}.{secrets.token_hex(4)}"
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with os.fdopen(fd, "w") as f:
                f.write("# Generated by `kaflet manager` on first start. Keep it: it decrypts the stored\n"
                        "# application passwords and signs the session cookies. Every manager process\n"
                        "# serving the same database needs these same keys.\n")
                for key, value in generated.items():
                    f.write(f'{key} = "{value}"\n')
            try:
                os.link(temp, path)
                return generated
            except FileExistsError:
                pass  # another process was first: use its keys
        finally:
            temp.unlink(missing_ok=True)
    try:
        with path.open("rb") as f:
            stored = tomllib.load(f)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from None
    return {k: str(v) for k, v in stored.items()}


def load_config(path: Path | None = None, *, data_dir: Path | None = None, database_url: str | None = None,
                host: str | None = None, port: int | None = None) -> ManagerConfig:
    """The settings of ``path`` (TOML; none: defaults) with the command line's overrides."""
    raw: dict[str, Any] = {}
    if path is not None:
        try:
            with open(path, "rb") as f:
                raw = tomllib.load(f)
        except OSError as exc:
            raise ConfigError(f"cannot read {path}: {exc.strerror}") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{path} is not valid TOML: {exc}") from None
    unknown = set(raw) - _KEYS
    if unknown:
        raise ConfigError(f"unknown key(s): {', '.join(sorted(unknown))}")
    ddir = Path(data_dir or _typed(raw, "data_dir", str, "manager-data"))
    ddir.mkdir(parents=True, exist_ok=True)
    stored: dict[str, str] = {}
    if "secret_key" not in raw or "encryption_key" not in raw:
        stored = _load_or_create_secrets(ddir)
    encryption_key = _typed(raw, "encryption_key", str, None) or stored["encryption_key"]
    try:
        Fernet(encryption_key.encode())
    except ValueError:
        raise ConfigError("encryption_key is not a Fernet key (32 url-safe base64-encoded bytes)") from None
    config = ManagerConfig(
        data_dir=ddir,
        database_url=database_url or _typed(raw, "database_url", str, None) or sqlite_url(ddir),
        secret_key=_typed(raw, "secret_key", str, None) or stored["secret_key"],
        encryption_key=encryption_key,
        host=host or _typed(raw, "host", str, DEFAULT_HOST),
        port=port if port is not None else _typed(raw, "port", int, DEFAULT_PORT),
        cookie_secure=_typed(raw, "cookie_secure", bool, False),
        session_max_age_s=_typed(raw, "session_max_age_s", int, 8 * 3600),
        login_max_failures=_typed(raw, "login_max_failures", int, 5),
        login_window_s=_typed(raw, "login_window_s", int, 300),
        max_body_bytes=_typed(raw, "max_body_bytes", int, 1024 * 1024),
        cluster_sample_interval_s=_typed(raw, "cluster_sample_interval_s", float, 30.0),
        gateway=_gateway(raw.get("gateway")),
    )
    try:
        backend = make_url(config.database_url).get_backend_name()
    except ArgumentError:
        raise ConfigError(f"database_url {config.database_url!r} is not a database URL") from None
    if backend not in ("sqlite", "postgresql", "postgres"):  # postgres://: see db.normalize_url
        # The change-log lock, the start-up lock and the connection reports' upsert exist for these two.
        raise ConfigError(f"database_url: kaflet manager runs on SQLite or PostgreSQL, not {backend}")
    if len(config.secret_key) < 32:
        raise ConfigError("secret_key must be at least 32 characters")
    for key in ("session_max_age_s", "login_max_failures", "login_window_s", "max_body_bytes",
                "cluster_sample_interval_s"):
        if getattr(config, key) <= 0:
            raise ConfigError(f"{key} must be positive")
    return config
