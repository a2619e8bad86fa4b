"""The broker configuration the security tests share: every security protocol on one broker."""

from __future__ import annotations

from tests.support.certs import Pki

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
        'password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";')
SCRAM_USERS = {"SCRAM-SHA-256": ("scram256", "s256-secret"), "SCRAM-SHA-512": ("scram512", "s512-secret")}
CREDENTIALS = {"PLAIN": ("alice", "alice-secret"), **SCRAM_USERS}


def secured_overrides(pki: Pki, extra_listeners: dict[str, str] | None = None) -> dict[str, str]:
    """PLAINTEXT, SASL_PLAINTEXT, SSL, SASL_SSL and MTLS (TLS with a required client certificate)
    listeners on port 0, PLAIN users from `JAAS` on both SASL listeners, and `extra_listeners`
    (name -> security protocol) beside them."""
    listeners = {"PLAINTEXT": "PLAINTEXT", "SASL_PLAINTEXT": "SASL_PLAINTEXT", "SSL": "SSL", "SASL_SSL": "SASL_SSL",
                 "MTLS": "SSL", **(extra_listeners or {})}
    return {
        "listeners": ",".join(f"{name}://127.0.0.1:0" for name in listeners),
        "listener.security.protocol.map": ",".join(f"{name}:{proto}" for name, proto in listeners.items()),
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        "listener.name.sasl_ssl.plain.sasl.jaas.config": JAAS,
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(pki.server_keystore),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(pki.ca),
        "listener.name.mtls.ssl.client.auth": "required",
    }
