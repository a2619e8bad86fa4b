"""The gateway's static views, authenticator and authorizer, without a broker."""

from __future__ import annotations

import asyncio
import logging

import pytest

from kaflet.gateway.authenticator import GatewayAuthenticator, gateway_login_module, is_gateway_listener
from kaflet.gateway.authorizer import GatewayAuthorizer
from kaflet.gateway.model import ACCESS_DENY_READ, ACCESS_READ, ACCESS_WRITE, GatewayUser
from kaflet.gateway.sessions import GatewayPrincipal, SessionCounter
from kaflet.gateway.static import StaticAcls, StaticConfigError, StaticUsers, parse_acl, parse_user
from kaflet.security.acl import AclOperation, ResourceType
from kaflet.security.authorizer import Action, create_authorizer
from kaflet.security.principal import ANONYMOUS, KafkaPrincipal
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


# -- authorization ----------------------------------------------------------------------------


class MovingAcls:
    """An AclView whose rows and version the test changes, as a commit would."""

    def __init__(self) -> None:
        self.rows: dict[tuple[str, str], int] = {}
        self.version = 1
        self.lookups = 0

    def access(self, topic: str, user: str) -> int | None:
        self.lookups += 1
        return self.rows.get((topic, user))


def authorizer(acls: MovingAcls, users: StaticUsers | None = None, super_users: str = "") -> GatewayAuthorizer:
    az = create_authorizer("com.didichuxing.datachannel.kafka.security.authorizer.DidiAuthorizer",
                           {"super.users": super_users})
    assert isinstance(az, GatewayAuthorizer)
    view = users or StaticUsers()
    az.attach(lambda: view, lambda: acls)
    return az


def allowed(az: GatewayAuthorizer, principal: KafkaPrincipal, op: AclOperation, rt: ResourceType, name: str) -> bool:
    return az.authorize(principal, "127.0.0.1", [Action(op, rt, name)])[0]


def test_default_matrix_for_normal_users() -> None:
    az = authorizer(MovingAcls())
    user = GatewayPrincipal("User", "app_1")
    A, R = AclOperation, ResourceType
    for op, rt in ((A.DESCRIBE, R.TOPIC), (A.DESCRIBE, R.TRANSACTIONAL_ID), (A.WRITE, R.TRANSACTIONAL_ID),
                   (A.IDEMPOTENT_WRITE, R.CLUSTER), (A.READ, R.GROUP), (A.DESCRIBE, R.GROUP)):
        assert allowed(az, user, op, rt, "x"), (op, rt)
    for op, rt in ((A.CREATE, R.TOPIC), (A.DELETE, R.TOPIC), (A.ALTER_CONFIGS, R.TOPIC), (A.DESCRIBE_CONFIGS, R.TOPIC),
                   (A.ALTER, R.CLUSTER), (A.DESCRIBE, R.CLUSTER), (A.DELETE, R.GROUP), (A.READ, R.TOPIC),
                   (A.WRITE, R.TOPIC), (A.ALL, R.TOPIC)):
        assert not allowed(az, user, op, rt, "x"), (op, rt)


def test_super_users_from_config_view_and_built_ins() -> None:
    az = authorizer(MovingAcls(), StaticUsers.from_config("ops:pw:true,app_1:pw:false"), super_users="User:boss")
    for principal in (KafkaPrincipal.user("boss"), GatewayPrincipal("User", "ops"), KafkaPrincipal.user("admin"),
                      ANONYMOUS):
        assert allowed(az, principal, AclOperation.CREATE, ResourceType.TOPIC, "t"), principal
    assert not allowed(az, GatewayPrincipal("User", "app_1"), AclOperation.CREATE, ResourceType.TOPIC, "t")


def test_topic_lookup_order_and_deny_rows() -> None:
    acls = MovingAcls()
    az = authorizer(acls)

    def can(user: str, op: AclOperation, topic: str) -> bool:
        return allowed(az, KafkaPrincipal.user(user), op, ResourceType.TOPIC, topic)

    acls.rows = {("t1", "a"): ACCESS_READ, ("*", "a"): ACCESS_WRITE, ("t2", "*"): ACCESS_READ | ACCESS_WRITE,
                 ("t3", "b"): ACCESS_DENY_READ, ("t3", "*"): ACCESS_READ}
    assert can("a", AclOperation.READ, "t1")
    assert can("a", AclOperation.WRITE, "t1")  # (t1, a) lacks Write: (*, a) grants it
    assert can("a", AclOperation.WRITE, "t9")
    assert not can("a", AclOperation.READ, "t9")
    assert can("c", AclOperation.WRITE, "t2")  # (t2, *) for everyone
    assert not can("b", AclOperation.READ, "t3")  # a deny row ends the lookup before (t3, *)
    assert can("c", AclOperation.READ, "t3")


def test_connection_decisions_are_cached_until_the_version_moves(caplog: pytest.LogCaptureFixture) -> None:
    acls = MovingAcls()
    az = authorizer(acls)
    conn = GatewayPrincipal("User", "app_1")
    acls.rows = {("t", "app_1"): ACCESS_WRITE}
    assert allowed(az, conn, AclOperation.WRITE, ResourceType.TOPIC, "t")
    looked = acls.lookups
    acls.rows = {}  # fetched, but not committed: the version has not moved
    assert allowed(az, conn, AclOperation.WRITE, ResourceType.TOPIC, "t")
    assert acls.lookups == looked
    acls.version = 2  # the commit
    with caplog.at_level(logging.INFO, logger="kaflet.gateway.denials"):
        assert not allowed(az, conn, AclOperation.WRITE, ResourceType.TOPIC, "t")
    assert any("User = app_1 from 127.0.0.1 is denied Operation = Write on resource = Topic:t" in r.getMessage()
               for r in caplog.records)
    # Another connection of the same user has its own cache.
    other = GatewayPrincipal("User", "app_1")
    acls.rows = {("t", "app_1"): ACCESS_WRITE}
    acls.version = 3
    assert allowed(az, other, AclOperation.WRITE, ResourceType.TOPIC, "t")
    assert other.decisions is not conn.decisions and other == conn
