"""Secrets handling: account password hashes (argon2), application passwords encrypted at rest
(Fernet), CSRF tokens and the login rate limiter."""

from __future__ import annotations

import hashlib
import hmac
import secrets
import string
import threading
import time
from collections import deque
from collections.abc import Callable

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError
from cryptography.fernet import Fernet, InvalidToken

_hasher = PasswordHasher()
_ALPHABET = string.ascii_letters + string.digits
#: A hash to verify against when the user does not exist, so both cases take as long.
_DUMMY_HASH = _hasher.hash("no such account")


def hash_password(password: str) -> str:
    """An argon2id hash of an account password."""
    return _hasher.hash(password)


def verify_password(password_hash: str | None, password: str) -> bool:
    """Whether ``password`` matches; a missing account costs the same time as a wrong password."""
    try:
        return _hasher.verify(password_hash or _DUMMY_HASH, password) and password_hash is not None
    except (VerificationError, InvalidHashError):
        return False


def generate_password(length: int = 24) -> str:
    """A random password of letters and digits (safe in a JAAS string and a shell)."""
    return "".join(secrets.choice(_ALPHABET) for _ in range(length))


class SecretBox:
    """Encrypts the secrets the manager must give back (application passwords served to brokers)."""

    def __init__(self, key: str) -> None:
        self._fernet = Fernet(key.encode())

    def encrypt(self, plain: str) -> str:
        return self._fernet.encrypt(plain.encode()).decode()

    def decrypt(self, token: str) -> str:
        """The plain text; ValueError when the token was not made with this key."""
        try:
            return self._fernet.decrypt(token.encode()).decode()
        except InvalidToken:
            raise ValueError("stored secret cannot be decrypted with the configured encryption_key") from None


#: The text the key check of the database is made of (models.KeyCheck).
KEY_CHECK_TEXT = "kaflet manager key check"


def secret_key_hmac(secret_key: str) -> str:
    """An HMAC-SHA256 of :data:`KEY_CHECK_TEXT` under ``secret_key``: equal for equal keys, and
    no help in finding the key."""
    return hmac.new(secret_key.encode(), KEY_CHECK_TEXT.encode(), hashlib.sha256).hexdigest()


def new_csrf_token() -> str:
    return secrets.token_urlsafe(32)


def csrf_matches(expected: str | None, given: str | None) -> bool:
    """Constant-time comparison of the session's CSRF token with the one a request carries."""
    return bool(expected) and bool(given) and hmac.compare_digest(str(expected), str(given))


class LoginLimiter:
    """At most ``max_failures`` failed logins per key (user name, client address) per window.

    A success does not reset the address's count, so guessing across many user names from one
    address is limited too.
    """

    def __init__(self, max_failures: int, window_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.max_failures = max_failures
        self.window_s = window_s
        self.clock = clock
        self._failures: dict[str, deque[float]] = {}
        self._lock = threading.Lock()

    def _recent(self, key: str, now: float) -> deque[float]:
        q = self._failures.setdefault(key, deque())
        while q and q[0] <= now - self.window_s:
            q.popleft()
        return q

    def retry_after(self, *keys: str) -> float:
        """Seconds until a login under ``keys`` may be tried again (0: now)."""
        now = self.clock()
        with self._lock:
            wait = 0.0
            for key in keys:
                q = self._recent(key, now)
                if len(q) >= self.max_failures:
                    wait = max(wait, q[0] + self.window_s - now)
            return wait

    def failed(self, *keys: str) -> None:
        now = self.clock()
        with self._lock:
            for key in keys:
                self._recent(key, now).append(now)
            if len(self._failures) > 100_000:  # a flood of distinct names must not grow memory forever
                for k in [k for k, q in self._failures.items() if not q or q[-1] <= now - self.window_s]:
                    del self._failures[k]

    def succeeded(self, username_key: str) -> None:
        with self._lock:
            self._failures.pop(username_key, None)
