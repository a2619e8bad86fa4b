"""The gateway's static views and authenticator, without a broker."""

from __future__ import annotations

import asyncio

import pytest

from kaflet.gateway.authenticator import GatewayAuthenticator, gateway_login_module, is_gateway_listener
from kaflet.gateway.model import ACCESS_DENY_READ, ACCESS_READ, ACCESS_WRITE, GatewayUser
from kaflet.gateway.sessions import GatewayPrincipal, SessionCounter
from kaflet.gateway.static import StaticAcls, StaticConfigError, StaticUsers, parse_acl, parse_user
from kaflet.security.sasl import SaslAuthenticationError

DIDI_JAAS = ('com.didichuxing.datachannel.kafka.security.sasl.plain.PlainLoginModule required '
             'username="admin" password="admin-secret";')


def config(values: dict[str, str]):  # type: ignore[no-untyped-def]
    return lambda listener, key: values.get(f"listener.name.{listener.lower()}.{key}", values.get(key))


def authenticator(users: StaticUsers, limit: int = 2, cluster_id: int = 7) -> GatewayAuthenticator:
    get = config({"sasl.enabled.mechanisms": "PLAIN,DIDI", "listener.name.sasl.plain.sasl.jaas.config": DIDI_JAAS})
    return GatewayAuthenticator(get, ["SASL"], lambda: users, cluster_id, SessionCounter(limit))


def login(auth: GatewayAuthenticator, mechanism: str, user: str, password: str) -> GatewayPrincipal:
    server = auth.create_server("SASL", mechanism)
    assert server is not None
    asyncio.run(server.evaluate(b"\0" + user.encode() + b"\0" + password.encode()))
    principal = auth.principal(server)
    assert isinstance(principal, GatewayPrincipal)
    return principal


# -- static defaults --------------------------------------------------------------------------


def test_static_user_and_acl_strings() -> None:
    assert parse_user("kafka:12345:false") == GatewayUser("kafka", "12345", False)
    assert parse_user(" ops:pw:TRUE ") == GatewayUser("ops", "pw", True)
    assert parse_acl("*:kafka:Read:Allow") == ("*", "kafka", ACCESS_READ)
    assert parse_acl("t:u:2:1") == ("t", "u", ACCESS_WRITE)
    assert parse_acl("t:u:Read:Deny") == ("t", "u", ACCESS_DENY_READ)
    for bad in ("kafka:12345", "kafka::false", "kafka:pw:yes"):
        with pytest.raises(StaticConfigError):
            parse_user(bad)
    for bad in ("t:u:Read", "t:u:Alter:Allow", "t:u:Read:Maybe", ":u:Read:Allow"):
        with pytest.raises(StaticConfigError):
            parse_acl(bad)


def test_static_views_have_the_built_in_users_and_merge_acl_bits() -> None:
    users = StaticUsers.from_config("kafka:12345:false,kafka:67890:false", [GatewayUser("admin", "secret", True)])
    assert users.user("kafka") == GatewayUser("kafka", "67890", False)  # the later entry wins
    assert users.user("admin") == GatewayUser("admin", "secret", True)
    anonymous = users.user("ANONYMOUS")
    assert anonymous is not None and anonymous.super_user
    acls = StaticAcls.from_config("t:kafka:Read:Allow,t:kafka:Write:Allow")
    assert acls.access("t", "kafka") == ACCESS_READ | ACCESS_WRITE
    assert acls.access("t", "other") is None


# -- authentication ---------------------------------------------------------------------------


def test_listener_selection_by_login_module_or_didi() -> None:
    assert is_gateway_listener(config({"listener.name.a.plain.sasl.jaas.config": DIDI_JAAS}), "A")
    assert is_gateway_listener(config({"sasl.enabled.mechanisms": "DIDI"}), "A")
    kafka = 'org.apache.kafka.common.security.plain.PlainLoginModule required user_a="b";'
    assert not is_gateway_listener(config({"listener.name.a.plain.sasl.jaas.config": kafka,
                                           "sasl.enabled.mechanisms": "PLAIN"}), "A")
    module = gateway_login_module(config({"sasl.jaas.config": DIDI_JAAS}), "A")
    assert module is not None and module.options["username"] == "admin"


def test_login_as_cluster_dot_app_and_refusals() -> None:
    auth = authenticator(StaticUsers.from_config("app_1:pw1:false"))
    for mechanism in ("PLAIN", "DIDI"):
        principal = login(auth, mechanism, "7.app_1", "pw1")
        assert str(principal) == "User:app_1"
    refused = {
        ("7.app_1", "wrong"): "Invalid username or password",
        ("7.nobody", "pw1"): "Invalid username or password",
        ("8.app_1", "pw1"): "cluster id 8 is not this cluster's (7)",
        ("app_1", "pw1"): "<clusterId>.<appId>",
        ("7.ANONYMOUS", "x"): "Invalid username or password",
        ("7.admin", ""): "password not specified",
    }
    for (user, password), message in refused.items():
        with pytest.raises(SaslAuthenticationError, match=message.replace("(", r"\(").replace(")", r"\)")):
            login(auth, "PLAIN", user, password)
    # The brokers' own login (the JAAS username) needs no cluster id prefix; it is a super user.
    assert str(login(auth, "PLAIN", "admin", "admin-secret")) == "User:admin"


def test_session_limit_counts_live_sessions_and_releases_them() -> None:
    auth = authenticator(StaticUsers.from_config("app_1:pw1:false,app_2:pw2:false"), limit=2)
    servers = []
    for _ in range(2):
        server = auth.create_server("SASL", "PLAIN")
        assert server is not None
        asyncio.run(server.evaluate(b"\x007.app_1\x00pw1"))
        servers.append(server)
    with pytest.raises(SaslAuthenticationError, match="max.sessions.per.user"):
        login(auth, "PLAIN", "7.app_1", "pw1")
    login(auth, "PLAIN", "7.app_2", "pw2")  # the limit is per user
    assert auth.sessions.refused == 1
    servers[0].dispose()
    servers[0].dispose()  # a second dispose releases nothing more
    assert auth.sessions.live("app_1") == 1
    login(auth, "PLAIN", "7.app_1", "pw1")
    assert auth.sessions.live("app_1") == 2
    # A failed password check holds no slot.
    with pytest.raises(SaslAuthenticationError):
        login(auth, "PLAIN", "7.app_2", "nope")
    assert auth.sessions.live("app_2") == 1
