"""Shared plumbing for the client-side commands: configs, errors, quiet clients."""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, ClusterMetadata, TopicMetadata

if TYPE_CHECKING:
    from kaflet.network.raw_connection import RawConnection

DEFAULT_TIMEOUT_S = 10.0

# librdkafka writes its own log lines to stderr unless given a logger; the user
# should only ever see our one-line error, so route its logs into a dead end.
_SILENT_LOGGER = logging.getLogger("kaflet.cli.librdkafka")
_SILENT_LOGGER.addHandler(logging.NullHandler())
_SILENT_LOGGER.propagate = False

# Error codes that mean "no broker answered", whatever the precise cause.
_UNREACHABLE = {
    KafkaError._TRANSPORT,
    KafkaError._TIMED_OUT,
    KafkaError._ALL_BROKERS_DOWN,
    KafkaError._RESOLVE,
    KafkaError._WAIT_COORD,
}


class CliError(click.ClickException):
    """A failure reported as a single `Error: ...` line on stderr (exit code 1)."""

    def __init__(self, message: str) -> None:
        # A multi-line message would break the one-line contract, so flatten it.
        super().__init__(" ".join(message.split()))


def parse_properties_file(path: str | Path) -> dict[str, str]:
    """Parse a Java-style properties file (key=value or key:value, # and ! comments)."""
    props: dict[str, str] = {}
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise CliError(f"Cannot read config file {path}: {exc.strerror or exc}.") from exc
    pending = ""
    for raw in text.splitlines():
        line = pending + raw.strip() if pending else raw.strip()
        pending = ""
        if not line or line[0] in "#!":
            continue
        # A trailing backslash continues the logical line (Java semantics).
        if line.endswith("\\") and not line.endswith("\\\\"):
            pending = line[:-1]
            continue
        key, sep, value = _split_property(line)
        if not sep:
            raise CliError(f"Invalid line in config file {path}: {raw.strip()!r} (expected key=value).")
        props[key.strip()] = value.strip()
    return props


def _split_property(line: str) -> tuple[str, str, str]:
    """Split at the first unescaped '=' or ':'."""
    for i, ch in enumerate(line):
        if ch in "=:" and (i == 0 or line[i - 1] != "\\"):
            return line[:i], ch, line[i + 1 :]
    return line, "", ""


def parse_key_values(items: Iterable[str], option: str) -> dict[str, str]:
    """Turn repeated `k=v` option values into a dict; malformed ones are usage errors."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"expected key=value, got {item!r}", param_hint=option)
        out[key.strip()] = value
    return out


def client_config(
    bootstrap: str,
    config_file: str | None = None,
    overrides: dict[str, str] | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> dict[str, Any]:
    """Build a confluent-kafka config: quiet logging, bounded timeouts, user settings last."""
    conf: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "logger": _SILENT_LOGGER,
        # Errors are reported by our own code; swallow the async callback copies.
        "error_cb": lambda _err: None,
        "socket.timeout.ms": max(int(timeout_s * 1000), 1000),
    }
    if config_file:
        conf.update(java_client_properties(parse_properties_file(config_file)))
    if overrides:
        conf.update(overrides)
    conf["bootstrap.servers"] = bootstrap
    return conf


def java_client_properties(props: dict[str, str]) -> dict[str, str]:
    """Accept a Java client's --command-config as well as librdkafka's.

    Kafka's tools take `sasl.jaas.config` and PEM `ssl.truststore.*`/`ssl.keystore.*` settings;
    librdkafka names the same things `sasl.username`/`sasl.password`, `ssl.ca.location`,
    `ssl.certificate.location`/`ssl.key.location` and rejects the Java names, so translate them.
    """
    out = dict(props)
    jaas = out.pop("sasl.jaas.config", None)
    if jaas is not None:
        m_user = re.search(r'\busername\s*=\s*(?:"((?:\\.|[^"\\])*)"|([^\s;"]+))', jaas)
        m_pass = re.search(r'\bpassword\s*=\s*(?:"((?:\\.|[^"\\])*)"|([^\s;"]+))', jaas)
        if m_user is None or m_pass is None:
            raise CliError("sasl.jaas.config in the client config needs username=\"...\" and password=\"...\".")
        out.setdefault("sasl.username", re.sub(r"\\(.)", r"\1", m_user.group(1) or m_user.group(2) or ""))
        out.setdefault("sasl.password", re.sub(r"\\(.)", r"\1", m_pass.group(1) or m_pass.group(2) or ""))
    truststore_type = out.pop("ssl.truststore.type", "PEM").strip().upper()
    if truststore_type != "PEM":
        raise CliError(f"ssl.truststore.type={truststore_type} is not supported by the command-line tools; "
                       "use a PEM file (ssl.truststore.type=PEM) or ssl.ca.location.")
    if "ssl.truststore.location" in out:
        out.setdefault("ssl.ca.location", out.pop("ssl.truststore.location"))
    if "ssl.truststore.certificates" in out:
        out.setdefault("ssl.ca.pem", out.pop("ssl.truststore.certificates"))
    # librdkafka reads a PKCS#12 keystore itself (ssl.keystore.location); only PEM needs translating.
    if out.pop("ssl.keystore.type", "PEM").strip().upper() == "PEM":
        if "ssl.keystore.location" in out:
            # A PEM keystore holds the key and the certificate chain in one file.
            path = out.pop("ssl.keystore.location")
            out.setdefault("ssl.certificate.location", path)
            out.setdefault("ssl.key.location", path)
        if "ssl.keystore.certificate.chain" in out:
            out.setdefault("ssl.certificate.pem", out.pop("ssl.keystore.certificate.chain"))
        if "ssl.keystore.key" in out:
            out.setdefault("ssl.key.pem", out.pop("ssl.keystore.key"))
    return out


def unreachable_message(bootstrap: str, timeout_s: float, detail: str = "") -> str:
    """Sentence used whenever no broker answered in time."""
    msg = f"Could not reach a broker at {bootstrap} within {timeout_s:g} s; is it running?"
    return f"{msg} ({detail})" if detail else msg


@contextlib.contextmanager
def raw_connection_errors(bootstrap: str, timeout_s: float) -> Iterator[None]:
    """The failures of kaflet.network.raw_connection as one-line CliErrors."""
    # Imported here: the protocol codec it needs costs every other command start-up time.
    from kaflet.network.raw_connection import BrokerUnreachableError, RawConnectionError

    try:
        yield
    except BrokerUnreachableError as exc:
        raise CliError(unreachable_message(bootstrap, timeout_s, exc.reason)) from exc
    except RawConnectionError as exc:
        raise CliError(str(exc)) from exc


def raw_connect(host: str, port: int, conf: Mapping[str, Any], timeout_s: float, bootstrap: str) -> RawConnection:
    """kaflet's own connection to host:port, secured as `conf` says; failures are CliErrors."""
    from kaflet.network.raw_connection import connect

    with raw_connection_errors(bootstrap, timeout_s):
        return connect(host, port, conf, timeout_s)


def describe_kafka_error(err: KafkaError | KafkaException | BaseException, *, topic: str | None = None,
                         bootstrap: str = "", timeout_s: float = DEFAULT_TIMEOUT_S) -> str:
    """Turn a confluent-kafka error into a short human sentence."""
    if isinstance(err, KafkaException) and err.args and isinstance(err.args[0], KafkaError):
        err = err.args[0]
    if not isinstance(err, KafkaError):
        return str(err) or err.__class__.__name__
    code = err.code()
    if code in _UNREACHABLE:
        return unreachable_message(bootstrap, timeout_s)
    if code == KafkaError.UNKNOWN_TOPIC_OR_PART and topic:
        return f"Topic '{topic}' does not exist."
    if code == KafkaError.TOPIC_ALREADY_EXISTS and topic:
        return f"Topic '{topic}' already exists."
    text = err.str().rstrip(".")
    if text.startswith("Broker: "):
        text = text[len("Broker: ") :]
    prefix = f"Topic '{topic}': " if topic else ""
    return f"{prefix}{text} ({err.name()})."


class Admin:
    """An AdminClient plus what the tools need to word its failures as one-line errors."""

    def __init__(self, bootstrap: str, config_file: str | None, timeout_s: float) -> None:
        self.conf = client_config(bootstrap, config_file, timeout_s=timeout_s)
        # The admin client is a producer-type handle whose metadata requests would otherwise
        # ask the broker to auto-create the topic a tool is asking about.
        self.conf["allow.auto.create.topics"] = False
        self.bootstrap = bootstrap
        self.timeout_s = timeout_s
        try:
            self.client = AdminClient(self.conf)
        except (KafkaException, ValueError, TypeError) as exc:
            raise CliError(f"Invalid client configuration: {describe_kafka_error(exc)}") from exc

    def fail(self, exc: BaseException, topic: str | None = None, what: str = "") -> CliError:
        """The CliError for a failed call, prefixed with `what` unless no broker answered."""
        msg = describe_kafka_error(exc, topic=topic, bootstrap=self.bootstrap, timeout_s=self.timeout_s)
        return CliError(f"{what}: {msg}" if what and "Could not reach" not in msg else msg)

    def metadata(self, topic: str | None = None) -> ClusterMetadata:
        """Cluster metadata; doubles as the "is a broker up?" probe, with the usual error."""
        try:
            return self.client.list_topics(topic=topic, timeout=self.timeout_s)
        except KafkaException as exc:
            raise self.fail(exc, topic) from exc

    def existing_topic(self, topic: str) -> TopicMetadata | None:
        """Metadata of `topic`, or None when the broker says it does not exist."""
        meta = self.metadata(topic).topics.get(topic)
        if meta is None or (meta.error is not None and meta.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART):
            return None
        if meta.error is not None and meta.error.code() != KafkaError.LEADER_NOT_AVAILABLE:
            raise CliError(describe_kafka_error(meta.error, topic=topic))
        return meta

    def result(self, future: Any, topic: str | None = None, what: str = "") -> Any:
        """Wait for an admin future; a failure becomes a CliError."""
        try:
            # Guard the future too: librdkafka's own request timeout is the real bound.
            return future.result(timeout=self.timeout_s + 5)
        except KafkaException as exc:
            raise self.fail(exc, topic, what) from exc
        except TimeoutError as exc:
            raise CliError(unreachable_message(self.bootstrap, self.timeout_s)) from exc

    def wait(self, futures: dict[Any, Any], topic: str | None = None) -> dict[Any, Any]:
        """Resolve a dict of admin futures; the first failure becomes a CliError naming its topic."""
        return {key: self.result(fut, topic or (key if isinstance(key, str) else getattr(key, "name", None)))
                for key, fut in futures.items()}


def is_code(exc: BaseException, *codes: int) -> bool:
    """True when `exc` wraps a KafkaError with one of `codes`."""
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        return exc.args[0].code() in codes
    return False


def config_file_option(*names: str) -> Any:
    """The `--command-config FILE` option (plus tool-specific aliases)."""
    return click.option(
        *(names or ("--command-config",)),
        "config_file",
        type=click.Path(exists=True, dir_okay=False),
        help="Client properties file (key=value lines) passed to the Kafka client.",
    )


def bootstrap_option(*extra: str) -> Any:
    """The required `--bootstrap-server HOST:PORT` option."""
    return click.option(
        "--bootstrap-server",
        *extra,
        "bootstrap",
        required=True,
        metavar="HOST:PORT",
        help="Broker(s) to connect to, comma separated.",
    )


def timeout_option() -> Any:
    """How long to wait for the broker before giving up."""
    return click.option(
        "--timeout",
        "timeout_s",
        type=click.FloatRange(min=0.1),
        default=DEFAULT_TIMEOUT_S,
        show_default=True,
        metavar="SECONDS",
        help="Give up when the broker does not answer within this many seconds.",
    )
