"""SASL mechanisms, JAAS parsing and certificate principals, without sockets."""

from __future__ import annotations

import asyncio
import base64
import datetime
import hashlib
import hmac
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from kaflet.security import scram
from kaflet.security.authenticator import AuthenticatorConfigError, KafkaAuthenticator
from kaflet.security.jaas import JaasError, parse_jaas_config, single_module
from kaflet.security.plain import PlainSaslServer, jaas_users, parse_plain_token, static_password_check
from kaflet.security.sasl import SaslAuthenticationError
from kaflet.security.session import SaslSession, SaslState
from kaflet.security.tls import TlsConfigError, normalize_pem, server_context
from kaflet.security.x500 import subject_rfc2253
from tests.support.certs import make_pki

# RFC 7677, section 3: user "user", password "pencil".
RFC7677 = {
    "client_first": "n,,n=user,r=rOprNGfwEbeRWgbNEkqO",
    "server_nonce": "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0",
    "server_first": "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096",
    "client_final": "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                    "p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=",
    "server_final": "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=",
}


def _lookup(creds: dict[tuple[str, str], scram.ScramCredential]) -> scram.CredentialLookup:
    async def lookup(user: str, mech: scram.ScramMechanism) -> scram.ScramCredential | None:
        return creds.get((user, mech.name))

    return lookup


def test_scram_sha256_rfc7677_vector() -> None:
    cred = scram.credential_from_password(scram.SCRAM_SHA_256, "pencil", 4096,
                                          salt=base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ=="))
    server = scram.ScramSaslServer(scram.SCRAM_SHA_256, _lookup({("user", "SCRAM-SHA-256"): cred}),
                                   server_nonce=lambda: RFC7677["server_nonce"])

    async def run() -> None:
        assert await server.evaluate(RFC7677["client_first"].encode()) == RFC7677["server_first"].encode()
        assert await server.evaluate(RFC7677["client_final"].encode()) == RFC7677["server_final"].encode()

    asyncio.run(run())
    assert server.complete and server.authorization_id == "user"


def test_scram_client_rfc7677_vector() -> None:
    client = scram.ScramClient(scram.SCRAM_SHA_256, "user", "pencil", nonce="rOprNGfwEbeRWgbNEkqO")
    assert client.first() == RFC7677["client_first"].encode()
    assert client.final(RFC7677["server_first"].encode()) == RFC7677["client_final"].encode()
    client.verify(RFC7677["server_final"].encode())


def _run_client(client: scram.ScramClient, server: scram.ScramSaslServer) -> None:
    async def run() -> None:
        server_first = await server.evaluate(client.first())
        client.verify(await server.evaluate(client.final(server_first)))

    asyncio.run(run())


@pytest.mark.parametrize("mech", [scram.SCRAM_SHA_256, scram.SCRAM_SHA_512])
def test_scram_client_against_server(mech: scram.ScramMechanism) -> None:
    user = "bob,=admin"  # needs saslname escaping both ways
    creds = {(user, mech.name): scram.credential_from_password(mech, "bob-secret", 8192)}
    server = scram.ScramSaslServer(mech, _lookup(creds))
    _run_client(scram.ScramClient(mech, user, "bob-secret"), server)
    assert server.complete and server.authorization_id == user
    with pytest.raises(SaslAuthenticationError, match="invalid credentials"):
        _run_client(scram.ScramClient(mech, user, "wrong"), scram.ScramSaslServer(mech, _lookup(creds)))
    with pytest.raises(SaslAuthenticationError, match="invalid credentials"):
        _run_client(scram.ScramClient(mech, "nobody", "x"), scram.ScramSaslServer(mech, _lookup(creds)))


def test_scram_client_rejects_a_bad_server() -> None:
    mech = scram.SCRAM_SHA_256
    creds = {("u", mech.name): scram.credential_from_password(mech, "pw", 4096)}

    async def exchange() -> tuple[scram.ScramClient, bytes]:
        client = scram.ScramClient(mech, "u", "pw")
        server = scram.ScramSaslServer(mech, _lookup(creds))
        server_first = await server.evaluate(client.first())
        return client, await server.evaluate(client.final(server_first))

    client, server_final = asyncio.run(exchange())
    client.verify(server_final)
    forged = b"v=" + base64.b64encode(bytes(len(mech.hash(b""))))
    with pytest.raises(SaslAuthenticationError, match="signature"):
        client.verify(forged)
    with pytest.raises(SaslAuthenticationError):
        client.verify(b"e=other-error")
    fresh = scram.ScramClient(mech, "u", "pw", nonce="abc")
    with pytest.raises(SaslAuthenticationError, match="server-first"):
        fresh.final(b"r=xyzdef,s=AAAA,i=4096")  # the server's nonce must extend ours
    with pytest.raises(SaslAuthenticationError, match="iterations"):
        fresh.final(b"r=abcdef,s=AAAA,i=1")
    with pytest.raises(SaslAuthenticationError, match="server-final"):
        scram.ScramClient(mech, "u", "pw").verify(b"v=AAAA")  # before any server-first


def test_scram_credential_string_round_trip() -> None:
    cred = scram.credential_from_password(scram.SCRAM_SHA_512, "secret", 8192)
    text = cred.to_config()
    assert text.startswith("salt=") and text.endswith(",iterations=8192")
    assert scram.ScramCredential.from_config(text) == cred
    with pytest.raises(ValueError):
        scram.ScramCredential.from_config("salt=AA==,stored_key=AA==,iterations=4096")


def _client_exchange(mech: scram.ScramMechanism, user: str, password: str, server: scram.ScramSaslServer) -> bytes:
    """A SCRAM client (RFC 5802 section 3) run against `server`; returns the server-final message."""

    async def run() -> bytes:
        client_first_bare = f"n={user},r=clientnonce123"
        server_first = (await server.evaluate(f"n,,{client_first_bare}".encode())).decode()
        fields = dict(item.split("=", 1) for item in server_first.split(","))
        salted = mech.salted_password(password, base64.b64decode(fields["s"]), int(fields["i"]))
        client_key = mech.hmac(salted, b"Client Key")
        without_proof = f"c=biws,r={fields['r']}"
        auth_message = f"{client_first_bare},{server_first},{without_proof}".encode()
        signature = mech.hmac(mech.hash(client_key), auth_message)
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        final = await server.evaluate(f"{without_proof},p={base64.b64encode(proof).decode()}".encode())
        expected = mech.hmac(mech.hmac(salted, b"Server Key"), auth_message)
        assert final == b"v=" + base64.b64encode(expected)
        return final

    return asyncio.run(run())


@pytest.mark.parametrize("mech", [scram.SCRAM_SHA_256, scram.SCRAM_SHA_512])
def test_scram_exchange_and_wrong_password(mech: scram.ScramMechanism) -> None:
    creds = {("alice", mech.name): scram.credential_from_password(mech, "alice-secret", 4096)}
    ok = scram.ScramSaslServer(mech, _lookup(creds))
    _client_exchange(mech, "alice", "alice-secret", ok)
    assert ok.complete and ok.authorization_id == "alice"
    with pytest.raises(SaslAuthenticationError, match=f"invalid credentials with SASL mechanism {mech.name}"):
        _client_exchange(mech, "alice", "wrong", scram.ScramSaslServer(mech, _lookup(creds)))
    # An unknown user goes through the whole exchange and fails the same way, at the same step.
    with pytest.raises(SaslAuthenticationError, match="invalid credentials"):
        _client_exchange(mech, "mallory", "x", scram.ScramSaslServer(mech, _lookup(creds)))


@pytest.mark.parametrize("token", [b"", b"\xff\xfe", b"garbage", b"p=tls-unique,,n=a,r=b", b"n,,n=a=ZZ,r=x",
                                   b"n,a=bob,n=alice,r=abc"])
def test_scram_rejects_malformed_client_first(token: bytes) -> None:
    server = scram.ScramSaslServer(scram.SCRAM_SHA_256, _lookup({}))
    with pytest.raises(SaslAuthenticationError):
        asyncio.run(server.evaluate(token))
    assert not server.complete


def test_scram_saslname_escapes() -> None:
    assert scram.decode_saslname("a=2Cb=3Dc") == "a,b=c"
    with pytest.raises(ValueError):
        scram.decode_saslname("a=41")


def test_plain_token_parsing() -> None:
    assert parse_plain_token(b"\x00alice\x00secret") == ("", "alice", "secret")
    assert parse_plain_token(b"alice\x00alice\x00pw") == ("alice", "alice", "pw")
    for bad in (b"alice", b"a\x00b", b"a\x00b\x00c\x00d", b"\xff\x00a\x00b"):
        with pytest.raises(ValueError):
            parse_plain_token(bad)


def test_plain_server() -> None:
    check = static_password_check({"alice": "alice-secret"})

    async def attempt(token: bytes) -> PlainSaslServer:
        server = PlainSaslServer(check)
        await server.evaluate(token)
        return server

    server = asyncio.run(attempt(b"\x00alice\x00alice-secret"))
    assert server.complete and server.authorization_id == "alice"
    for token, message in ((b"\x00alice\x00nope", "Invalid username or password"),
                           (b"\x00bob\x00alice-secret", "Invalid username or password"),
                           (b"\x00\x00pw", "username not specified"),
                           (b"\x00alice\x00", "password not specified"),
                           (b"bob\x00alice\x00alice-secret", "authorization id"),
                           (b"junk", "invalid credentials with SASL mechanism PLAIN")):
        with pytest.raises(SaslAuthenticationError, match=message) as info:
            asyncio.run(attempt(token))
        assert "alice-secret" not in str(info.value)


def test_jaas_parsing() -> None:
    text = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
            'password="admin-secret" user_admin="admin-secret" user_alice="al\\"ice;=x";')
    module = single_module(text)
    assert module.class_name == "org.apache.kafka.common.security.plain.PlainLoginModule"
    assert module.flag == "required"
    assert jaas_users(module) == {"admin": "admin-secret", "alice": 'al"ice;=x'}
    two = parse_jaas_config("a.B required x=1; c.D optional;")
    assert [m.class_name for m in two] == ["a.B", "c.D"] and two[0].options == {"x": "1"}
    for bad in ("", "a.B required x=1", "a.B maybe;", 'a.B required x="open;', "a.B required x=;",
                "a.B required; c.D required;"):
        with pytest.raises(JaasError):
            single_module(bad)


def test_authenticator_config() -> None:
    jaas = 'org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="pw";'
    conf = {"sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512,GSSAPI", "listener.name.sasl.plain.sasl.jaas.config": jaas}

    def get(listener: str, key: str) -> str | None:
        return conf.get(f"listener.name.{listener.lower()}.{key}", conf.get(key))

    auth = KafkaAuthenticator(get, ["SASL"], _lookup({}))
    assert auth.enabled_mechanisms("SASL") == ["PLAIN", "SCRAM-SHA-512"]
    assert auth.create_server("SASL", "GSSAPI") is None
    assert auth.create_server("SASL", "SCRAM-SHA-256") is None
    session = SaslSession(auth, "SASL", 0, 1024)
    session.on_api_versions()
    assert session.handshake("PLAIN", 1) and session.state is SaslState.AUTHENTICATE
    asyncio.run(session.authenticate(b"\x00alice\x00pw"))
    assert session.complete and str(session.principal) == "User:alice"
    with pytest.raises(AuthenticatorConfigError, match="GSSAPI"):
        KafkaAuthenticator(lambda _l, _k: None, ["SASL"], _lookup({}))
    with pytest.raises(AuthenticatorConfigError, match="plain.sasl.jaas.config"):
        KafkaAuthenticator(lambda _l, k: "PLAIN" if k == "sasl.enabled.mechanisms" else None, ["SASL"], _lookup({}))


def test_principal_from_certificate(tmp_path: Path) -> None:
    pki = make_pki(tmp_path)
    cert = x509.load_pem_x509_certificate(pki.client_cert.read_bytes())
    der = cert.public_bytes(serialization.Encoding.DER)
    assert subject_rfc2253(der) == pki.client_subject == "CN=client-app,OU=tests,O=Kaflet\\, Inc,C=US"


def test_principal_with_attributes_java_writes_as_oids() -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.DOMAIN_COMPONENT, "example"),
                      x509.NameAttribute(NameOID.EMAIL_ADDRESS, "a@b.c"),
                      x509.NameAttribute(NameOID.COMMON_NAME, "#lead")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(1).not_valid_before(now).not_valid_after(now + datetime.timedelta(days=1))
            .sign(key, hashes.SHA256()))
    dn = subject_rfc2253(cert.public_bytes(serialization.Encoding.DER))
    # emailAddress is not one of Java's RFC 2253 keywords: OID and the hex of its DER (IA5String "a@b.c").
    assert dn == "CN=\\#lead,1.2.840.113549.1.9.1=#16056140622e63,DC=example"


def test_tls_context_errors_name_the_key(tmp_path: Path) -> None:
    pki = make_pki(tmp_path)
    ok = {"ssl.keystore.location": str(pki.server_keystore)}
    assert server_context(ok.get) is not None
    inline = {"ssl.keystore.certificate.chain": " ".join(pki.server_cert.read_text().splitlines()),
              "ssl.keystore.key": pki.server_key_encrypted.read_text(), "ssl.key.password": pki.key_password,
              "ssl.truststore.certificates": pki.ca.read_text(), "ssl.client.auth": "required"}
    assert server_context(inline.get) is not None
    cases = [
        ({"ssl.keystore.location": str(tmp_path / "missing.pem")}, "ssl.keystore.location"),
        ({"ssl.keystore.location": str(pki.ca)}, "ssl.keystore.location"),
        ({**inline, "ssl.key.password": "wrong"}, "ssl.keystore.certificate.chain/ssl.keystore.key"),
        ({**ok, "ssl.keystore.type": "JKS"}, "ssl.keystore.type"),
        ({**ok, "ssl.client.auth": "maybe"}, "ssl.client.auth"),
        ({**ok, "ssl.enabled.protocols": "TLSv9"}, "ssl.enabled.protocols"),
        ({**ok, "ssl.truststore.location": str(tmp_path / "nope.pem")}, "ssl.truststore.location"),
        ({}, "ssl.keystore.location"),
    ]
    for conf, key in cases:
        with pytest.raises(TlsConfigError, match=key.replace(".", r"\.")):
            server_context(conf.get)
    assert normalize_pem(" ".join(pki.ca.read_text().splitlines())).strip() == pki.ca.read_text().strip()


def test_hmac_helpers_match_hashlib() -> None:
    mech = scram.SCRAM_SHA_512
    assert mech.hmac(b"k", b"d") == hmac.new(b"k", b"d", hashlib.sha512).digest()
