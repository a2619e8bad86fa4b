"""Server TLS contexts from Kafka's ssl.* configs in PEM form, per listener.

Each key may be overridden per listener as `listener.name.<listener in lower case>.<key>`, as
Kafka allows. Any unusable value stops the broker with one line naming the key.
"""

from __future__ import annotations

import os
import re
import ssl
import tempfile
from collections.abc import Callable

#: Looks a config up for a listener (listener override first); None when unset.
ConfigLookup = Callable[[str], str | None]

_PROTOCOLS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3,
              "TLSv1.1": ssl.TLSVersion.TLSv1_1, "TLSv1": ssl.TLSVersion.TLSv1}
_PEM_BLOCK = re.compile(r"-----BEGIN ([A-Z0-9 ]+)-----(.*?)-----END \1-----", re.S)

SSL_CONFIG_KEYS = (
    "ssl.keystore.type", "ssl.keystore.location", "ssl.keystore.password", "ssl.keystore.certificate.chain",
    "ssl.keystore.key", "ssl.key.password", "ssl.truststore.type", "ssl.truststore.location",
    "ssl.truststore.password", "ssl.truststore.certificates", "ssl.client.auth", "ssl.enabled.protocols",
    "ssl.protocol", "ssl.cipher.suites", "ssl.principal.mapping.rules", "ssl.endpoint.identification.algorithm",
)


class TlsConfigError(ValueError):
    """A TLS setting cannot be used; the message names the key."""


def normalize_pem(text: str) -> str:
    """Re-wrap PEM blocks so inline values written on one line (as Kafka accepts) load."""
    blocks = []
    for label, body in _PEM_BLOCK.findall(text):
        b64 = "".join(body.split())
        lines = [b64[i : i + 64] for i in range(0, len(b64), 64)]
        # An encrypted legacy key carries headers ("Proc-Type: ...") that must keep their lines.
        if ":" in body:
            lines = [ln.strip() for ln in body.strip().splitlines() if ln.strip()]
        blocks.append(f"-----BEGIN {label}-----\n" + "\n".join(lines) + f"\n-----END {label}-----\n")
    return "".join(blocks)


def _check_pem_type(get: ConfigLookup, key: str) -> None:
    kind = (get(key) or "PEM").strip().upper()
    if kind != "PEM":
        raise TlsConfigError(f"{key}={kind} is not supported: kaflet reads PEM key and trust stores only "
                             f"(set {key}=PEM)")


def _load_keystore(ctx: ssl.SSLContext, get: ConfigLookup) -> None:
    _check_pem_type(get, "ssl.keystore.type")
    location = get("ssl.keystore.location")
    chain = get("ssl.keystore.certificate.chain")
    key = get("ssl.keystore.key")
    password = get("ssl.key.password") or None
    if location:
        try:
            with open(location, encoding="ascii") as f:
                text = f.read()
        except (OSError, UnicodeDecodeError) as exc:
            raise TlsConfigError(f"ssl.keystore.location={location}: cannot read it "
                                 f"({getattr(exc, 'strerror', None) or exc})") from None
        if "PRIVATE KEY" not in text or "CERTIFICATE" not in text:
            raise TlsConfigError(f"ssl.keystore.location={location}: a PEM keystore must hold the private key "
                                 "and the certificate chain")
        chain_pem, key_pem, source = text, text, "ssl.keystore.location"
    elif chain or key:
        if not (chain and key):
            raise TlsConfigError("ssl.keystore.certificate.chain and ssl.keystore.key must be set together")
        chain_pem, key_pem, source = normalize_pem(chain), normalize_pem(key), "ssl.keystore.certificate.chain/ssl.keystore.key"
    else:
        raise TlsConfigError("a TLS listener needs ssl.keystore.location or ssl.keystore.certificate.chain "
                             "and ssl.keystore.key")
    # load_cert_chain only reads files, so inline PEM goes through a private temporary file.
    with tempfile.TemporaryDirectory(prefix="kaflet-tls-") as tmp:
        cert_path = os.path.join(tmp, "chain.pem")
        key_path = os.path.join(tmp, "key.pem")
        for path, content in ((cert_path, chain_pem), (key_path, key_pem)):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w", encoding="ascii") as f:
                f.write(content)
        try:
            ctx.load_cert_chain(cert_path, key_path, password=password)
        except ssl.SSLError as exc:
            hint = "wrong ssl.key.password, or the key does not match the certificate" \
                if "PEM" in str(exc) or "KEY" in str(exc).upper() else exc.reason or str(exc)
            raise TlsConfigError(f"{source}: cannot load the key and certificate chain ({hint})") from None


def _load_truststore(ctx: ssl.SSLContext, get: ConfigLookup) -> bool:
    _check_pem_type(get, "ssl.truststore.type")
    location = get("ssl.truststore.location")
    inline = get("ssl.truststore.certificates")
    try:
        if location:
            if not os.path.isfile(location):
                raise TlsConfigError(f"ssl.truststore.location={location}: no such file")
            ctx.load_verify_locations(cafile=location)
            return True
        if inline:
            ctx.load_verify_locations(cadata=normalize_pem(inline))
            return True
    except ssl.SSLError as exc:
        key = "ssl.truststore.location" if location else "ssl.truststore.certificates"
        raise TlsConfigError(f"{key}: cannot load the trusted certificates ({exc.reason or exc})") from None
    return False


def _set_protocols(ctx: ssl.SSLContext, get: ConfigLookup) -> None:
    enabled = [p.strip() for p in (get("ssl.enabled.protocols") or "TLSv1.2,TLSv1.3").split(",") if p.strip()]
    versions = []
    for p in enabled:
        if p not in _PROTOCOLS:
            raise TlsConfigError(f"ssl.enabled.protocols: unknown protocol {p!r} (use TLSv1.2, TLSv1.3)")
        versions.append(_PROTOCOLS[p])
    if not versions:
        raise TlsConfigError("ssl.enabled.protocols is empty")
    proto = (get("ssl.protocol") or "TLSv1.3").strip()
    if proto not in _PROTOCOLS and proto not in ("TLS", "SSL"):
        raise TlsConfigError(f"ssl.protocol: unknown protocol {proto!r}")
    try:
        ctx.minimum_version = min(versions)
        ctx.maximum_version = max(versions)
    except (ValueError, ssl.SSLError) as exc:
        raise TlsConfigError(f"ssl.enabled.protocols: {exc}") from None


def _set_ciphers(ctx: ssl.SSLContext, get: ConfigLookup) -> None:
    suites = [s.strip() for s in (get("ssl.cipher.suites") or "").split(",") if s.strip()]
    # TLS 1.3 suites (TLS_AES_...) cannot be restricted through Python's ssl module; the others can.
    tls12 = [s for s in suites if not (s.startswith("TLS_") and "_WITH_" not in s)]
    if tls12:
        try:
            ctx.set_ciphers(":".join(tls12))
        except ssl.SSLError:
            raise TlsConfigError(f"ssl.cipher.suites: none of {', '.join(tls12)} is a cipher suite OpenSSL "
                                 "knows (use OpenSSL names, e.g. ECDHE-RSA-AES256-GCM-SHA384)") from None


def server_context(get: ConfigLookup) -> ssl.SSLContext:
    """An SSLContext for a TLS listener; raises TlsConfigError naming the offending key."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _set_protocols(ctx, get)
    _load_keystore(ctx, get)
    auth = (get("ssl.client.auth") or "none").strip().lower()
    if auth not in ("required", "requested", "none"):
        raise TlsConfigError(f"ssl.client.auth={auth}: must be required, requested or none")
    if auth != "none":
        if not _load_truststore(ctx, get):
            # Java falls back to the JVM's CA certificates; the system's are the equivalent.
            ctx.load_default_certs(ssl.Purpose.CLIENT_AUTH)
        ctx.verify_mode = ssl.CERT_REQUIRED if auth == "required" else ssl.CERT_OPTIONAL
    else:
        _load_truststore(ctx, get)  # still validate it, so a typo is reported at start-up
        ctx.verify_mode = ssl.CERT_NONE
    _set_ciphers(ctx, get)
    rules = (get("ssl.principal.mapping.rules") or "DEFAULT").strip()
    if rules != "DEFAULT":
        raise TlsConfigError(f"ssl.principal.mapping.rules={rules}: only DEFAULT is supported in this kaflet version")
    return ctx


def client_context(get: ConfigLookup) -> ssl.SSLContext:
    """An SSLContext for connecting to another broker's TLS listener, as Kafka's client side of
    the inter-broker listener uses the same ssl.* configs: the truststore verifies the other
    broker (the system CAs without one, as Java falls back to the JVM's), the keystore, when
    configured, is presented to listeners that ask for client authentication, and
    ssl.endpoint.identification.algorithm=https checks the host name. Raises TlsConfigError.
    """
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    _set_protocols(ctx, get)
    if get("ssl.keystore.location") or get("ssl.keystore.certificate.chain") or get("ssl.keystore.key"):
        _load_keystore(ctx, get)
    if not _load_truststore(ctx, get):
        ctx.load_default_certs(ssl.Purpose.SERVER_AUTH)
    raw = get("ssl.endpoint.identification.algorithm")
    algorithm = "https" if raw is None else raw.strip()  # Kafka's default; set empty to turn it off
    if algorithm.lower() not in ("", "https"):
        raise TlsConfigError(f"ssl.endpoint.identification.algorithm={algorithm}: use https (verify the host "
                             "name) or an empty value (do not)")
    ctx.check_hostname = algorithm.lower() == "https"
    ctx.verify_mode = ssl.CERT_REQUIRED
    _set_ciphers(ctx, get)
    return ctx


def error_reason(exc: BaseException) -> str:
    """A short reason for a failed connection or TLS handshake (OpenSSL's reason, the verify message)."""
    if isinstance(exc, ssl.SSLCertVerificationError) and exc.verify_message:
        return f"certificate verify failed: {exc.verify_message}"
    if isinstance(exc, ssl.SSLError) and exc.reason:
        return str(exc.reason)
    return str(getattr(exc, "strerror", None) or exc) or exc.__class__.__name__
