"""Inter-broker client settings from the broker config: Kafka's rules, one-line errors naming the key."""

from __future__ import annotations

import ssl

import pytest

from kaflet.server.config import BrokerConfig, ConfigError
from kaflet.server.inter_broker_security import inter_broker_settings
from tests.support.certs import Pki, make_pki

PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="broker" '
              'password="broker-secret" user_broker="broker-secret";')
SCRAM_JAAS = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="ib" password="ib-secret";'


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def _error(props: dict[str, str]) -> str:
    with pytest.raises(ConfigError) as info:
        inter_broker_settings(BrokerConfig(props))
    assert "\n" not in str(info.value)
    return str(info.value)


def test_default_is_the_plaintext_listener() -> None:
    s = inter_broker_settings(BrokerConfig({"request.timeout.ms": "12000"}))
    assert (s.listener, s.security.protocol, s.security.ssl_context) == ("PLAINTEXT", "PLAINTEXT", None)
    assert s.request_timeout_s == 12.0


def test_security_protocol_names_the_listener() -> None:
    s = inter_broker_settings(BrokerConfig({"listeners": "PLAINTEXT://:1,SASL_PLAINTEXT://:2",
                                            "security.inter.broker.protocol": "SASL_PLAINTEXT",
                                            "sasl.enabled.mechanisms": "PLAIN",
                                            "sasl.mechanism.inter.broker.protocol": "PLAIN",
                                            "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS}))
    assert (s.listener, s.security.protocol, s.security.sasl_mechanism) == ("SASL_PLAINTEXT", "SASL_PLAINTEXT", "PLAIN")
    assert (s.security.sasl_username, s.security.sasl_password) == ("broker", "broker-secret")
    assert "broker-secret" not in repr(s)


def test_both_listener_name_and_protocol_is_an_error() -> None:
    msg = _error({"inter.broker.listener.name": "PLAINTEXT", "security.inter.broker.protocol": "PLAINTEXT"})
    assert msg == "Only one of inter.broker.listener.name and security.inter.broker.protocol should be set."


def test_listener_name_must_be_mapped_and_advertised() -> None:
    msg = _error({"inter.broker.listener.name": "internal"})
    assert msg == ("Listener with name INTERNAL defined in inter.broker.listener.name not found in "
                   "listener.security.protocol.map.")
    msg = _error({"inter.broker.listener.name": "SSL"})  # mapped by default, but not a listener here
    assert msg.startswith("inter.broker.listener.name must be a listener name defined in advertised.listeners.")
    assert msg.endswith("are PLAINTEXT")
    msg = _error({"listeners": "SASL_PLAINTEXT://:1"})  # the default PLAINTEXT is not advertised
    assert "advertised.listeners" in msg and "SASL_PLAINTEXT" in msg


def test_invalid_security_protocol() -> None:
    msg = _error({"security.inter.broker.protocol": "KERBEROS"})
    assert "security.inter.broker.protocol" in msg and "KERBEROS" in msg


def test_gssapi_default_with_sasl_is_a_startup_error() -> None:
    msg = _error({"listeners": "INTERNAL://:1", "listener.security.protocol.map": "INTERNAL:SASL_PLAINTEXT",
                  "inter.broker.listener.name": "INTERNAL", "sasl.enabled.mechanisms": "PLAIN"})
    assert msg.startswith("sasl.mechanism.inter.broker.protocol=GSSAPI (Kafka's default) is not supported")
    assert "PLAIN, SCRAM-SHA-256, SCRAM-SHA-512" in msg


def test_mechanism_must_be_enabled_on_the_listener() -> None:
    msg = _error({"listeners": "INTERNAL://:1", "listener.security.protocol.map": "INTERNAL:SASL_PLAINTEXT",
                  "inter.broker.listener.name": "INTERNAL", "sasl.enabled.mechanisms": "PLAIN",
                  "listener.name.internal.sasl.enabled.mechanisms": "SCRAM-SHA-256",
                  "sasl.mechanism.inter.broker.protocol": "PLAIN"})
    assert msg.startswith("sasl.mechanism.inter.broker.protocol must be included in sasl.enabled.mechanisms")


def _sasl(mechanism: str, **extra: str) -> dict[str, str]:
    return {"listeners": "INTERNAL://:1", "listener.security.protocol.map": "INTERNAL:SASL_PLAINTEXT",
            "inter.broker.listener.name": "INTERNAL", "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
            "sasl.mechanism.inter.broker.protocol": mechanism, **extra}


def test_scram_credentials_from_the_listener_jaas_config() -> None:
    s = inter_broker_settings(BrokerConfig(_sasl(
        "SCRAM-SHA-512", **{"listener.name.internal.scram-sha-512.sasl.jaas.config": SCRAM_JAAS})))
    assert (s.security.sasl_mechanism, s.security.sasl_username, s.security.sasl_password) == \
        ("SCRAM-SHA-512", "ib", "ib-secret")
    # The unprefixed sasl.jaas.config is used when it configures the mechanism's login module...
    s = inter_broker_settings(BrokerConfig(_sasl("SCRAM-SHA-512", **{"sasl.jaas.config": SCRAM_JAAS})))
    assert s.security.sasl_username == "ib"
    # ...and skipped when it is another mechanism's.
    msg = _error(_sasl("SCRAM-SHA-512", **{"sasl.jaas.config": PLAIN_JAAS}))
    assert msg.startswith("inter-broker SASL SCRAM-SHA-512 on listener INTERNAL needs "
                          "listener.name.internal.scram-sha-512.sasl.jaas.config")


def test_jaas_errors_name_the_key() -> None:
    msg = _error(_sasl("PLAIN", **{"listener.name.internal.plain.sasl.jaas.config": SCRAM_JAAS}))
    assert msg.startswith("listener.name.internal.plain.sasl.jaas.config: expected "
                          "org.apache.kafka.common.security.plain.PlainLoginModule")
    msg = _error(_sasl("PLAIN", **{"listener.name.internal.plain.sasl.jaas.config":
                                   'org.apache.kafka.common.security.plain.PlainLoginModule required user_a="b";'}))
    assert "needs the username and password options" in msg
    msg = _error(_sasl("PLAIN", **{"listener.name.internal.plain.sasl.jaas.config": "broken"}))
    assert msg.startswith("listener.name.internal.plain.sasl.jaas.config")


def test_ssl_client_context(pki: Pki) -> None:
    base = {"listeners": "SSL://:1", "security.inter.broker.protocol": "SSL",
            "ssl.keystore.type": "PEM", "ssl.keystore.location": str(pki.server_keystore),
            "ssl.truststore.type": "PEM", "ssl.truststore.location": str(pki.ca)}
    s = inter_broker_settings(BrokerConfig(base))
    ctx = s.security.ssl_context
    assert isinstance(ctx, ssl.SSLContext)
    assert ctx.verify_mode == ssl.CERT_REQUIRED and ctx.check_hostname
    assert ctx.minimum_version == ssl.TLSVersion.TLSv1_2 and ctx.maximum_version == ssl.TLSVersion.TLSv1_3
    off = inter_broker_settings(BrokerConfig({**base, "ssl.endpoint.identification.algorithm": ""}))
    assert off.security.ssl_context is not None and not off.security.ssl_context.check_hostname
    # Listener overrides apply, as on the server side.
    msg = _error({**base, "listener.name.ssl.ssl.truststore.location": "/nonexistent/ca.pem"})
    assert msg == "inter-broker listener SSL: ssl.truststore.location=/nonexistent/ca.pem: no such file"
    msg = _error({**base, "ssl.endpoint.identification.algorithm": "ldaps"})
    assert "ssl.endpoint.identification.algorithm=ldaps" in msg


def test_sasl_ssl(pki: Pki) -> None:
    s = inter_broker_settings(BrokerConfig(
        {"listeners": "SASL_SSL://:1", "security.inter.broker.protocol": "SASL_SSL",
         "ssl.truststore.type": "PEM", "ssl.truststore.location": str(pki.ca),
         "sasl.enabled.mechanisms": "SCRAM-SHA-256", "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-256",
         "listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config": SCRAM_JAAS}))
    assert s.security.protocol == "SASL_SSL" and s.security.ssl_context is not None
    assert s.security.sasl_mechanism == "SCRAM-SHA-256"
