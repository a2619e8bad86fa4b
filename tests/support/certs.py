"""A throw-away CA with server and client certificates for TLS tests (made with `cryptography`)."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


@dataclass
class Pki:
    """Paths of the PEM files a test hands to the broker and to clients."""

    ca: Path                 # CA certificate (truststore for both sides)
    server_keystore: Path    # server key + certificate chain in one PEM file
    server_cert: Path
    server_key: Path
    server_key_encrypted: Path  # the same key, encrypted with `key_password`
    client_cert: Path
    client_key: Path
    client_subject: str      # the client certificate's subject in Java's RFC 2253 form
    key_password: str = "keypass"


def _name(*attrs: tuple[x509.ObjectIdentifier, str]) -> x509.Name:
    return x509.Name([x509.NameAttribute(oid, value) for oid, value in attrs])


def _cert(subject: x509.Name, key: ec.EllipticCurvePrivateKey, issuer: x509.Name, issuer_key: ec.EllipticCurvePrivateKey,
          *, ca: bool = False, san: list[x509.GeneralName] | None = None) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    builder = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer).public_key(key.public_key())
               .serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=2))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if san:
        builder = builder.add_extension(x509.SubjectAlternativeName(san), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _key_pem(key: ec.EllipticCurvePrivateKey, password: str | None = None) -> bytes:
    enc: serialization.KeySerializationEncryption = (
        serialization.BestAvailableEncryption(password.encode()) if password else serialization.NoEncryption())
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, enc)


def make_pki(directory: Path) -> Pki:
    """Write a CA, a server certificate for 127.0.0.1/localhost and a client certificate."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name((NameOID.COMMON_NAME, "kaflet test CA"))
    ca = _cert(ca_name, ca_key, ca_name, ca_key, ca=True)
    server_key = ec.generate_private_key(ec.SECP256R1())
    server = _cert(_name((NameOID.COMMON_NAME, "localhost")), server_key, ca_name, ca_key,
                   san=[x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
    client_key = ec.generate_private_key(ec.SECP256R1())
    client_name = _name((NameOID.COUNTRY_NAME, "US"), (NameOID.ORGANIZATION_NAME, "Kaflet, Inc"),
                        (NameOID.ORGANIZATIONAL_UNIT_NAME, "tests"), (NameOID.COMMON_NAME, "client-app"))
    client = _cert(client_name, client_key, ca_name, ca_key)
    pki = Pki(
        ca=directory / "ca.pem", server_keystore=directory / "server-keystore.pem",
        server_cert=directory / "server.pem", server_key=directory / "server.key",
        server_key_encrypted=directory / "server-enc.key",
        client_cert=directory / "client.pem", client_key=directory / "client.key",
        client_subject="CN=client-app,OU=tests,O=Kaflet\\, Inc,C=US",
    )
    pki.ca.write_bytes(_pem(ca))
    pki.server_cert.write_bytes(_pem(server) + _pem(ca))
    pki.server_key.write_bytes(_key_pem(server_key))
    pki.server_key_encrypted.write_bytes(_key_pem(server_key, pki.key_password))
    pki.server_keystore.write_bytes(_key_pem(server_key) + _pem(server) + _pem(ca))
    pki.client_cert.write_bytes(_pem(client))
    pki.client_key.write_bytes(_key_pem(client_key))
    return pki
