"""A blocking client connection for the requests the client libraries cannot send.

`kaflet configs` sends DescribeConfigs with synonyms, anything on the cluster-wide broker
default and the ClientQuotas requests itself, `kaflet transactions` and
`kaflet reassign-partitions` their APIs, and the management service (kaflet/manager) the
quotas it writes. This opens that connection as the client properties (librdkafka's names:
`--command-config` as translated by `kaflet.cli.common.java_client_properties`, or a cluster's
settings in the manager) say: TLS with Python's ssl module for SSL and SASL_SSL, then
SaslHandshake v1 + SaslAuthenticate v2 with PLAIN or SCRAM-SHA-256/512 for SASL_PLAINTEXT and
SASL_SSL.

Responses go through the framer (kaflet/protocol/framing.py) with librdkafka's bound,
`receive.message.max.bytes`: a broker (or anything else) announcing more closes the connection
with a ConnectionError before anything is allocated for it.

Failures to connect are `RawConnectionError`s whose message is one finished sentence (the
CLI prints it as it is); `BrokerUnreachableError` says no connection could be opened.
"""

from __future__ import annotations

import os
import socket
import ssl
import tempfile
from collections.abc import Mapping
from typing import Any

from kaflet.protocol import codec
from kaflet.protocol.framing import FrameReader, FrameSizeError, size_prefix
from kaflet.protocol.header import encode_request_header, parse_response_header
from kaflet.security.sasl_client import (
    CLIENT_MECHANISMS,
    SaslClientError,
    SaslRejectedError,
    UnsupportedMechanismError,
    run_blocking,
    sasl_exchange,
)
from kaflet.security.tls import error_reason

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
_CLIENT_ID = b"kaflet-cli"
#: librdkafka's default receive.message.max.bytes: the largest response accepted.
DEFAULT_RECEIVE_MESSAGE_MAX_BYTES = 100000000


class RawConnectionError(Exception):
    """The connection could not be opened, secured or authenticated; the message is one sentence."""


class BrokerUnreachableError(RawConnectionError):
    """No connection to the broker could be opened; `reason` says why (the OS's words)."""

    def __init__(self, address: str, reason: str) -> None:
        super().__init__(f"cannot connect to {address}: {reason}")
        self.reason = reason


def _truthy(value: Any) -> bool:
    return str(value).strip().lower() in ("true", "1", "yes")


def security_protocol(conf: Mapping[str, Any]) -> str:
    protocol = str(conf.get("security.protocol", "PLAINTEXT")).strip().upper()
    if protocol not in PROTOCOLS:
        raise RawConnectionError(f"Invalid client configuration: security.protocol={protocol} "
                       f"(expected one of {', '.join(PROTOCOLS)}).")
    return protocol


def ssl_context(conf: Mapping[str, Any]) -> ssl.SSLContext:
    """A client TLS context from librdkafka-style settings (PEM files or inline PEM)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    # librdkafka verifies the broker's host name unless the algorithm is set to none or empty.
    algorithm = str(conf.get("ssl.endpoint.identification.algorithm", "https")).strip().lower()
    ctx.check_hostname = algorithm not in ("", "none")
    if "enable.ssl.certificate.verification" in conf and not _truthy(conf["enable.ssl.certificate.verification"]):
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    try:
        if conf.get("ssl.ca.location"):
            ctx.load_verify_locations(cafile=str(conf["ssl.ca.location"]))
        elif conf.get("ssl.ca.pem"):
            ctx.load_verify_locations(cadata=str(conf["ssl.ca.pem"]))
        else:
            ctx.load_default_certs(ssl.Purpose.SERVER_AUTH)
        password = conf.get("ssl.key.password")
        cert, key = conf.get("ssl.certificate.location"), conf.get("ssl.key.location")
        if cert or conf.get("ssl.certificate.pem"):
            _load_cert_chain(ctx, conf, cert, key, str(password) if password is not None else None)
    except (OSError, ssl.SSLError, ValueError) as exc:
        raise RawConnectionError(f"Invalid client configuration: cannot load the TLS settings: {error_reason(exc)}.") from exc
    return ctx


def _load_cert_chain(ctx: ssl.SSLContext, conf: Mapping[str, Any], cert: Any, key: Any, password: str | None) -> None:
    if cert:
        ctx.load_cert_chain(str(cert), str(key) if key else None, password)
        return
    # Inline PEM: the ssl module only reads files, so hand it a private temporary one.
    with tempfile.TemporaryDirectory(prefix="kaflet-tls-") as tmp:
        path = os.path.join(tmp, "client.pem")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(str(conf.get("ssl.key.pem", "")) + "\n" + str(conf["ssl.certificate.pem"]) + "\n")
        ctx.load_cert_chain(path, None, password)


def receive_message_max_bytes(conf: Mapping[str, Any]) -> int:
    """librdkafka's receive.message.max.bytes from the client properties (its default without)."""
    raw = conf.get("receive.message.max.bytes", DEFAULT_RECEIVE_MESSAGE_MAX_BYTES)
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise RawConnectionError(f"Invalid client configuration: receive.message.max.bytes={raw} "
                                 "(expected a number of bytes).") from None
    if not 1000 <= value <= 2147483647:  # librdkafka's range
        raise RawConnectionError(f"Invalid client configuration: receive.message.max.bytes={value} "
                                 "(expected 1000 .. 2147483647).")
    return value


class RawConnection:
    """One connection to one broker, ready for requests (TLS and SASL done)."""

    def __init__(self, sock: socket.socket, *, client_id: bytes = _CLIENT_ID,
                 max_response_bytes: int = DEFAULT_RECEIVE_MESSAGE_MAX_BYTES) -> None:
        self.sock = sock
        self.correlation = 0
        self._client_id = client_id
        # A response holds at least its correlation id.
        self._reader = FrameReader(max_response_bytes, min_size=4, eager=True)

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def request(self, api_key: int, version: int, request: Any) -> Any:
        """Send one request and decode its response; ConnectionError (the socket closed) when
        the peer closes or announces a response larger than the bound."""
        self.correlation += 1
        header = encode_request_header(api_key, version, self.correlation, self._client_id)
        body = bytes(request.encode(version=version))
        self.sock.sendall(size_prefix(len(header) + len(body)) + header + body)
        data = self._read_frame()
        correlation, offset = parse_response_header(data, api_key, version)
        if correlation != self.correlation:
            raise ConnectionError("the broker answered with a wrong correlation id")
        return codec.response_class(api_key).decode(data[offset:], version=version)

    def _read_frame(self) -> memoryview:
        reader = self._reader
        while True:
            try:
                frame = reader.next_frame()
            except FrameSizeError as exc:
                self.close()
                if exc.size < exc.min_size:
                    raise ConnectionError(f"the broker sent a response of invalid size {exc.size}") from None
                raise ConnectionError(f"the broker announced a response of {exc.size} bytes, more than "
                                      f"receive.message.max.bytes ({exc.max_size})") from None
            if frame is not None:
                return frame
            n = self.sock.recv_into(reader.buffer())
            if not n:
                raise ConnectionError("connection closed by the broker")
            reader.received(n)

    def authenticate(self, mechanism: str, username: str, password: str) -> None:
        """SaslHandshake v1, then SaslAuthenticate v2 rounds; errors are RawConnectionErrors."""
        try:
            run_blocking(sasl_exchange(mechanism, username, password), self.request)
        except (UnsupportedMechanismError, SaslRejectedError) as exc:
            raise RawConnectionError(f"{exc}.") from exc
        except SaslClientError as exc:
            raise RawConnectionError(f"SASL authentication failed: {exc}.") from exc


def connect(host: str, port: int, conf: Mapping[str, Any], timeout_s: float) -> RawConnection:
    """Open a connection to host:port secured as `conf` says (a confluent-kafka style config).

    Every failure is a RawConnectionError: an invalid config, an unreachable broker
    (BrokerUnreachableError), a TLS failure (with its reason), a SASL failure (with the
    broker's message).
    """
    protocol = security_protocol(conf)
    max_response_bytes = receive_message_max_bytes(conf)
    mechanism = username = password = ""
    if protocol.startswith("SASL_"):
        mechanism = str(conf.get("sasl.mechanism", conf.get("sasl.mechanisms", "GSSAPI"))).strip().upper()
        if mechanism not in CLIENT_MECHANISMS:
            raise RawConnectionError(f"SASL mechanism {mechanism} is not supported by `kaflet configs` for this request; "
                           "use PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512.")
        username, password = str(conf.get("sasl.username", "")), str(conf.get("sasl.password", ""))
        if not username:
            raise RawConnectionError("Invalid client configuration: SASL needs sasl.username and sasl.password "
                           "(or sasl.jaas.config).")
    ctx = ssl_context(conf) if protocol in ("SSL", "SASL_SSL") else None
    try:
        sock = socket.create_connection((host.strip("[]"), port), timeout=timeout_s)
    except OSError as exc:
        raise BrokerUnreachableError(f"{host}:{port}", error_reason(exc)) from exc
    try:
        if ctx is not None:
            try:
                sock = ctx.wrap_socket(sock, server_hostname=host.strip("[]"))
            except (ssl.SSLError, ssl.CertificateError) as exc:
                raise RawConnectionError(f"TLS handshake with {host}:{port} failed: {error_reason(exc)}.") from exc
            except OSError as exc:
                raise RawConnectionError(f"TLS handshake with {host}:{port} failed: {error_reason(exc)}.") from exc
        conn = RawConnection(sock, max_response_bytes=max_response_bytes)
        if mechanism:
            try:
                conn.authenticate(mechanism, username, password)
            except (OSError, ValueError) as exc:
                raise RawConnectionError(f"SASL authentication with {host}:{port} failed: {error_reason(exc)}.") from exc
        return conn
    except BaseException:
        sock.close()
        raise
