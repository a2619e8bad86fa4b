"""Kafka principals ("User:alice"), as the authorizer will see them."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class KafkaPrincipal:
    """A principal type and name; str() gives Kafka's `Type:name` form."""

    principal_type: str
    name: str

    def __str__(self) -> str:
        return f"{self.principal_type}:{self.name}"

    @classmethod
    def user(cls, name: str) -> KafkaPrincipal:
        return cls(USER_TYPE, name)


USER_TYPE = "User"

#: The principal of PLAINTEXT connections and of TLS connections without a client certificate.
ANONYMOUS = KafkaPrincipal(USER_TYPE, "ANONYMOUS")
