"""SCRAM-SHA-256 / SCRAM-SHA-512 (RFC 5802, RFC 7677): credentials and the server exchange.

Credentials are stored as Kafka stores them in /config/users/<user> (kafka-facts 1.6):
`salt=<b64>,stored_key=<b64>,server_key=<b64>,iterations=<n>`, standard Base64. The server
never sees or keeps a password: it holds only StoredKey and ServerKey.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import re
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from kaflet.security.sasl import SaslAuthenticationError, SaslServer, invalid_credentials

MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384


@dataclass(frozen=True, slots=True)
class ScramMechanism:
    """A SCRAM variant: its SASL name, the type byte of the admin APIs and its hash."""

    name: str
    type_id: int
    hash_name: str
    min_iterations: int = MIN_ITERATIONS

    def hash(self, data: bytes) -> bytes:
        return hashlib.new(self.hash_name, data).digest()

    def hmac(self, key: bytes, data: bytes) -> bytes:
        return hmac.new(key, data, self.hash_name).digest()

    def salted_password(self, password: str, salt: bytes, iterations: int) -> bytes:
        """Hi(Normalize(password), salt, i) of RFC 5802 (PBKDF2 with this hash)."""
        return hashlib.pbkdf2_hmac(self.hash_name, password.encode("utf-8"), salt, iterations)


SCRAM_SHA_256 = ScramMechanism("SCRAM-SHA-256", 1, "sha256")
SCRAM_SHA_512 = ScramMechanism("SCRAM-SHA-512", 2, "sha512")
MECHANISMS: dict[str, ScramMechanism] = {m.name: m for m in (SCRAM_SHA_256, SCRAM_SHA_512)}
BY_TYPE: dict[int, ScramMechanism] = {m.type_id: m for m in MECHANISMS.values()}


@dataclass(frozen=True, slots=True)
class ScramCredential:
    """What the server stores for one user and mechanism."""

    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def to_config(self) -> str:
        b64 = base64.b64encode
        return (f"salt={b64(self.salt).decode()},stored_key={b64(self.stored_key).decode()},"
                f"server_key={b64(self.server_key).decode()},iterations={self.iterations}")

    @classmethod
    def from_config(cls, value: str) -> ScramCredential:
        """Parse the stored form; exactly the four keys are required (as Kafka reads it)."""
        fields: dict[str, str] = {}
        for item in value.split(","):
            key, sep, val = item.partition("=")
            if not sep:
                raise ValueError("invalid SCRAM credential: expected key=value pairs")
            fields[key.strip()] = val.strip()
        if set(fields) != {"salt", "stored_key", "server_key", "iterations"}:
            raise ValueError("invalid SCRAM credential: expected salt, stored_key, server_key, iterations")
        try:
            return cls(base64.b64decode(fields["salt"], validate=True),
                       base64.b64decode(fields["stored_key"], validate=True),
                       base64.b64decode(fields["server_key"], validate=True),
                       int(fields["iterations"]))
        except (binascii.Error, ValueError):
            raise ValueError("invalid SCRAM credential: bad Base64 or iteration count") from None


def credential_from_salted_password(mech: ScramMechanism, salt: bytes, salted_password: bytes,
                                    iterations: int) -> ScramCredential:
    """The stored credential derived from SaltedPassword (what AlterUserScramCredentials sends)."""
    client_key = mech.hmac(salted_password, b"Client Key")
    server_key = mech.hmac(salted_password, b"Server Key")
    return ScramCredential(salt, mech.hash(client_key), server_key, iterations)


def credential_from_password(mech: ScramMechanism, password: str, iterations: int,
                             salt: bytes | None = None) -> ScramCredential:
    """A new credential for a password (random 32-byte salt unless given)."""
    salt = salt if salt is not None else os.urandom(32)
    return credential_from_salted_password(mech, salt, mech.salted_password(password, salt, iterations), iterations)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def decode_saslname(name: str) -> str:
    """RFC 5802 saslname: `=2C` is ',' and `=3D` is '='; any other '=' is malformed."""
    if re.search(r"=(?!2C|3D)", name):
        raise ValueError("invalid escape in user name")
    return name.replace("=2C", ",").replace("=3D", "=")


_CLIENT_FIRST = re.compile(
    r"^(?P<gs2>(?P<flag>[ny]),(?:a=(?P<authzid>[^,]*))?,)"
    r"(?P<bare>n=(?P<user>[^,]*),r=(?P<nonce>[\x21-\x2b\x2d-\x7e]+)(?P<ext>(?:,[^,]*)*))$"
)
_CLIENT_FINAL = re.compile(r"^(?P<without_proof>c=(?P<cb>[^,]*),r=(?P<nonce>[^,]*)(?:,[^,]*)*?),p=(?P<proof>[^,]*)$")

#: Looks up a user's credential for a mechanism; None when the user has none.
CredentialLookup = Callable[[str, ScramMechanism], Awaitable[ScramCredential | None]]

# Unknown users are carried through the exchange with a made-up credential, so an attacker cannot
# tell them from known users by when or how the exchange fails.
_FAKE_SECRET = os.urandom(32)


class ScramSaslServer(SaslServer):
    """The server side of one SCRAM exchange: client-first, client-final, done."""

    def __init__(self, mech: ScramMechanism, lookup: CredentialLookup,
                 server_nonce: Callable[[], str] | None = None) -> None:
        super().__init__()
        # Tests pass a fixed nonce to replay RFC 7677's exchange; otherwise 192 random bits.
        self._server_nonce = server_nonce or (lambda: secrets.token_urlsafe(24))
        self.mech = mech
        self.mechanism = mech.name
        self._lookup = lookup
        self._state = "first"
        self._credential: ScramCredential | None = None
        self._known = False
        self._user = ""
        self._nonce = ""
        self._gs2 = ""
        self._auth_prefix = ""

    async def evaluate(self, token: bytes) -> bytes:
        try:
            text = token.decode("utf-8")
        except UnicodeDecodeError:
            raise invalid_credentials(self.mechanism) from None
        if self._state == "first":
            return await self._client_first(text)
        if self._state == "final":
            return self._client_final(text)
        raise invalid_credentials(self.mechanism)

    async def _client_first(self, text: str) -> bytes:
        self._state = "failed"
        m = _CLIENT_FIRST.match(text)
        if m is None:
            raise invalid_credentials(self.mechanism)
        try:
            user = decode_saslname(m.group("user"))
        except ValueError:
            raise invalid_credentials(self.mechanism) from None
        authzid = m.group("authzid")
        if authzid and authzid != user:
            raise SaslAuthenticationError(
                "Authentication failed: Client requested an authorization id that is different from username")
        for ext in (m.group("ext") or "").split(",")[1:]:
            # Kafka's only extension is tokenauth (delegation tokens), which kaflet does not issue.
            if ext.startswith("tokenauth=") and ext.split("=", 1)[1].lower() == "true":
                raise SaslAuthenticationError("Authentication failed: delegation tokens are not supported")
        if not user:
            raise invalid_credentials(self.mechanism)
        cred = await self._lookup(user, self.mech)
        self._known = cred is not None
        if cred is None:
            fake = hmac.new(_FAKE_SECRET, user.encode(), "sha256").digest()
            cred = ScramCredential(fake[:16], os.urandom(len(self.mech.hash(b""))), fake, MIN_ITERATIONS)
        self._credential = cred
        self._user = user
        self._gs2 = m.group("gs2")
        self._nonce = m.group("nonce") + self._server_nonce()
        server_first = f"r={self._nonce},s={_b64(cred.salt)},i={cred.iterations}"
        self._auth_prefix = f"{m.group('bare')},{server_first},"
        self._state = "final"
        return server_first.encode()

    def _client_final(self, text: str) -> bytes:
        self._state = "failed"
        m = _CLIENT_FINAL.match(text)
        cred = self._credential
        if m is None or cred is None:
            raise invalid_credentials(self.mechanism)
        try:
            channel_binding = base64.b64decode(m.group("cb"), validate=True)
            proof = base64.b64decode(m.group("proof"), validate=True)
        except binascii.Error:
            raise invalid_credentials(self.mechanism) from None
        if channel_binding != self._gs2.encode() or m.group("nonce") != self._nonce:
            raise invalid_credentials(self.mechanism)
        auth_message = (self._auth_prefix + m.group("without_proof")).encode()
        client_signature = self.mech.hmac(cred.stored_key, auth_message)
        if len(proof) != len(client_signature):
            raise invalid_credentials(self.mechanism)
        client_key = bytes(a ^ b for a, b in zip(proof, client_signature, strict=True))
        if not (hmac.compare_digest(self.mech.hash(client_key), cred.stored_key) and self._known):
            raise invalid_credentials(self.mechanism)
        server_signature = self.mech.hmac(cred.server_key, auth_message)
        self.authorization_id = self._user
        self.complete = True
        self._state = "done"
        return f"v={_b64(server_signature)}".encode()


def encode_saslname(name: str) -> str:
    """The inverse of `decode_saslname`: ',' is `=2C` and '=' is `=3D`."""
    return name.replace("=", "=3D").replace(",", "=2C")


class ScramClient:
    """The client side of one SCRAM exchange (RFC 5802 section 3), for the command-line tools.

    `first()` gives client-first; `final(server_first)` checks the server's nonce and salt and
    gives client-final with the proof; `verify(server_final)` checks the server signature.
    """

    def __init__(self, mech: ScramMechanism, user: str, password: str, nonce: str | None = None) -> None:
        self.mech = mech
        self._password = password
        self._nonce = nonce or secrets.token_urlsafe(24)
        self._first_bare = f"n={encode_saslname(user)},r={self._nonce}"
        self._server_signature = b""

    def first(self) -> bytes:
        return f"n,,{self._first_bare}".encode()

    def final(self, server_first: bytes) -> bytes:
        text = server_first.decode("utf-8", "replace")
        fields: dict[str, str] = {}
        for item in text.split(","):
            key, sep, value = item.partition("=")
            if sep and len(key) == 1:
                fields.setdefault(key, value)
        if "e" in fields:
            raise SaslAuthenticationError(f"Authentication failed: {fields['e']}")
        nonce, salt_b64, iterations = fields.get("r", ""), fields.get("s"), fields.get("i", "")
        if not nonce.startswith(self._nonce) or len(nonce) == len(self._nonce) or salt_b64 is None:
            raise SaslAuthenticationError("Authentication failed: invalid server-first SCRAM message")
        try:
            salt = base64.b64decode(salt_b64, validate=True)
            rounds = int(iterations)
        except (binascii.Error, ValueError):
            raise SaslAuthenticationError("Authentication failed: invalid server-first SCRAM message") from None
        if rounds < self.mech.min_iterations:
            raise SaslAuthenticationError(f"Authentication failed: the server asked for {rounds} iterations, "
                                          f"fewer than the minimum {self.mech.min_iterations}")
        salted = self.mech.salted_password(self._password, salt, rounds)
        client_key = self.mech.hmac(salted, b"Client Key")
        without_proof = f"c={_b64(b'n,,')},r={nonce}"
        auth_message = f"{self._first_bare},{text},{without_proof}".encode()
        signature = self.mech.hmac(self.mech.hash(client_key), auth_message)
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        self._server_signature = self.mech.hmac(self.mech.hmac(salted, b"Server Key"), auth_message)
        return f"{without_proof},p={_b64(proof)}".encode()

    def verify(self, server_final: bytes) -> None:
        """Raise SaslAuthenticationError unless the server proved it knows the credential."""
        text = server_final.decode("utf-8", "replace")
        if text.startswith("e="):
            raise SaslAuthenticationError(f"Authentication failed: {text[2:]}")
        if not self._server_signature or not text.startswith("v="):
            raise SaslAuthenticationError("Authentication failed: invalid server-final SCRAM message")
        try:
            signature = base64.b64decode(text[2:].split(",")[0], validate=True)
        except binascii.Error:
            signature = b""
        if not hmac.compare_digest(signature, self._server_signature):
            raise SaslAuthenticationError("Authentication failed: the server's SCRAM signature is invalid")
