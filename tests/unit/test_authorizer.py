"""The ACL authorizer's matching rules, filters, storage in the metadata tree and change notifications."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from kaflet.metadata.embedded import EmbeddedTree
from kaflet.security.acl import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclError,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
    binding_from_wire,
    filter_from_wire,
    parse_change,
)
from kaflet.security.authorizer import (
    AclAuthorizer,
    Action,
    AuthorizerConfigError,
    create_authorizer,
    parse_super_users,
)
from kaflet.security.principal import KafkaPrincipal

ALICE = KafkaPrincipal.user("alice")
BOB = KafkaPrincipal.user("bob")
HOST = "10.0.0.1"
Op = AclOperation
Rt = ResourceType
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
LIT, PRE = PatternType.LITERAL, PatternType.PREFIXED


def acl(rt: ResourceType, name: str, principal: str, op: AclOperation, perm: AclPermissionType = ALLOW,
        host: str = "*", pt: PatternType = LIT) -> AclBinding:
    return AclBinding(ResourcePattern(rt, name, pt), AccessControlEntry(principal, host, op, perm))


def authorizer(*bindings: AclBinding, **kwargs: object) -> AclAuthorizer:
    """An authorizer whose cache holds the bindings (no tree needed for decisions)."""
    a = AclAuthorizer(**kwargs)  # type: ignore[arg-type]
    grouped: dict[ResourcePattern, set[AccessControlEntry]] = {}
    for b in bindings:
        grouped.setdefault(b.pattern, set()).add(b.entry)
    for pattern, entries in grouped.items():
        a._set_entries(pattern, frozenset(entries))
    return a


def allowed(a: AclAuthorizer, principal: KafkaPrincipal, op: AclOperation, rt: ResourceType, name: str,
            host: str = HOST) -> bool:
    return a.authorize(principal, host, [Action(op, rt, name)])[0]


def test_literal_acl_grants_only_its_resource_principal_and_operation() -> None:
    a = authorizer(acl(Rt.TOPIC, "t", "User:alice", Op.WRITE))
    assert allowed(a, ALICE, Op.WRITE, Rt.TOPIC, "t")
    assert not allowed(a, ALICE, Op.READ, Rt.TOPIC, "t")
    assert not allowed(a, ALICE, Op.WRITE, Rt.TOPIC, "t2")
    assert not allowed(a, BOB, Op.WRITE, Rt.TOPIC, "t")
    assert not allowed(a, ALICE, Op.WRITE, Rt.GROUP, "t")


def test_prefixed_acl_matches_names_starting_with_the_prefix() -> None:
    a = authorizer(acl(Rt.TOPIC, "orders-", "User:alice", Op.READ, pt=PRE))
    assert allowed(a, ALICE, Op.READ, Rt.TOPIC, "orders-eu")
    assert allowed(a, ALICE, Op.READ, Rt.TOPIC, "orders-")
    assert not allowed(a, ALICE, Op.READ, Rt.TOPIC, "orders")
    assert not allowed(a, ALICE, Op.READ, Rt.TOPIC, "x-orders-eu")


def test_many_prefixes_use_the_per_prefix_lookup() -> None:
    bindings = [acl(Rt.TOPIC, f"p{i}-", "User:alice", Op.READ, pt=PRE) for i in range(50)]
    a = authorizer(*bindings)
    assert allowed(a, ALICE, Op.READ, Rt.TOPIC, "p7-x")  # name shorter than the number of prefixes
    assert not allowed(a, ALICE, Op.READ, Rt.TOPIC, "q7-x")


def test_wildcard_resource_and_wildcard_principal() -> None:
    a = authorizer(acl(Rt.TOPIC, "*", "User:alice", Op.READ), acl(Rt.GROUP, "g", "User:*", Op.READ))
    assert allowed(a, ALICE, Op.READ, Rt.TOPIC, "anything")
    assert not allowed(a, BOB, Op.READ, Rt.TOPIC, "anything")
    assert allowed(a, BOB, Op.READ, Rt.GROUP, "g")


def test_deny_wins_over_allow_from_any_pattern() -> None:
    a = authorizer(acl(Rt.TOPIC, "*", "User:alice", Op.ALL),
                   acl(Rt.TOPIC, "secret-", "User:alice", Op.READ, DENY, pt=PRE))
    assert allowed(a, ALICE, Op.READ, Rt.TOPIC, "public")
    assert not allowed(a, ALICE, Op.READ, Rt.TOPIC, "secret-x")
    # A deny of Read does not deny what Read would imply (Describe).
    assert allowed(a, ALICE, Op.DESCRIBE, Rt.TOPIC, "secret-x")
    b = authorizer(acl(Rt.TOPIC, "t", "User:alice", Op.READ), acl(Rt.TOPIC, "t", "User:*", Op.ALL, DENY))
    assert not allowed(b, ALICE, Op.READ, Rt.TOPIC, "t")


def test_implied_operations() -> None:
    for op in (Op.READ, Op.WRITE, Op.DELETE, Op.ALTER):
        a = authorizer(acl(Rt.TOPIC, "t", "User:alice", op))
        assert allowed(a, ALICE, Op.DESCRIBE, Rt.TOPIC, "t"), op
        assert allowed(a, ALICE, op, Rt.TOPIC, "t")
    a = authorizer(acl(Rt.TOPIC, "t", "User:alice", Op.ALTER_CONFIGS))
    assert allowed(a, ALICE, Op.DESCRIBE_CONFIGS, Rt.TOPIC, "t")
    assert not allowed(a, ALICE, Op.DESCRIBE, Rt.TOPIC, "t")
    a = authorizer(acl(Rt.TOPIC, "t", "User:alice", Op.DESCRIBE))
    assert not allowed(a, ALICE, Op.READ, Rt.TOPIC, "t")  # implication only goes one way
    a = authorizer(acl(Rt.CLUSTER, "kafka-cluster", "User:alice", Op.ALL))
    for op in (Op.CREATE, Op.ALTER, Op.CLUSTER_ACTION, Op.IDEMPOTENT_WRITE, Op.DESCRIBE_CONFIGS):
        assert allowed(a, ALICE, op, Rt.CLUSTER, "kafka-cluster")


def test_hosts() -> None:
    a = authorizer(acl(Rt.TOPIC, "t", "User:alice", Op.READ, host="10.0.0.1"),
                   acl(Rt.TOPIC, "t", "User:alice", Op.READ, DENY, host="::1"))
    assert allowed(a, ALICE, Op.READ, Rt.TOPIC, "t", host="10.0.0.1")
    assert not allowed(a, ALICE, Op.READ, Rt.TOPIC, "t", host="10.0.0.2")
    b = authorizer(acl(Rt.TOPIC, "t", "User:alice", Op.READ),
                   acl(Rt.TOPIC, "t", "User:alice", Op.READ, DENY, host="0:0:0:0:0:0:0:1"))
    assert allowed(b, ALICE, Op.READ, Rt.TOPIC, "t", host="10.0.0.1")
    assert not allowed(b, ALICE, Op.READ, Rt.TOPIC, "t", host="::1")  # the same address, spelt differently


def test_super_users_pass_even_deny_acls() -> None:
    a = authorizer(acl(Rt.TOPIC, "t", "User:*", Op.ALL, DENY), super_users={"User:admin"})
    assert allowed(a, KafkaPrincipal.user("admin"), Op.READ, Rt.TOPIC, "t")
    assert allowed(a, KafkaPrincipal.user("admin"), Op.ALTER, Rt.CLUSTER, "kafka-cluster")
    assert not allowed(a, ALICE, Op.READ, Rt.TOPIC, "t")


def test_allow_everyone_if_no_acl_found() -> None:
    closed = authorizer(acl(Rt.TOPIC, "t", "User:bob", Op.READ))
    opened = authorizer(acl(Rt.TOPIC, "t", "User:bob", Op.READ), allow_everyone_if_no_acl_found=True)
    assert not allowed(closed, ALICE, Op.READ, Rt.TOPIC, "other")
    assert allowed(opened, ALICE, Op.READ, Rt.TOPIC, "other")
    # Once a resource has any ACL, only the ACLs decide.
    assert not allowed(opened, ALICE, Op.READ, Rt.TOPIC, "t")


def test_decision_cache_is_dropped_on_change() -> None:
    a = authorizer()
    assert not allowed(a, ALICE, Op.READ, Rt.TOPIC, "t")
    a._set_entries(ResourcePattern(Rt.TOPIC, "t"), frozenset({AccessControlEntry("User:alice", "*", Op.READ, ALLOW)}))
    assert allowed(a, ALICE, Op.READ, Rt.TOPIC, "t")


def test_authorize_by_resource_type() -> None:
    a = authorizer(acl(Rt.TOPIC, "t", "User:alice", Op.WRITE))
    assert a.authorize_by_resource_type(ALICE, HOST, Op.WRITE, Rt.TOPIC)
    assert not a.authorize_by_resource_type(BOB, HOST, Op.WRITE, Rt.TOPIC)
    denied = authorizer(acl(Rt.TOPIC, "t", "User:alice", Op.WRITE), acl(Rt.TOPIC, "t", "User:alice", Op.WRITE, DENY))
    assert not denied.authorize_by_resource_type(ALICE, HOST, Op.WRITE, Rt.TOPIC)
    by_prefix = authorizer(acl(Rt.TOPIC, "t", "User:alice", Op.WRITE),
                           acl(Rt.TOPIC, "", "User:alice", Op.WRITE, DENY, pt=PRE))
    assert not by_prefix.authorize_by_resource_type(ALICE, HOST, Op.WRITE, Rt.TOPIC)
    prefixed = authorizer(acl(Rt.TOPIC, "app-", "User:alice", Op.WRITE, pt=PRE))
    assert prefixed.authorize_by_resource_type(ALICE, HOST, Op.WRITE, Rt.TOPIC)


def test_filters_match_like_kafka() -> None:
    lit = ResourcePattern(Rt.TOPIC, "orders", LIT)
    wild = ResourcePattern(Rt.TOPIC, "*", LIT)
    pre = ResourcePattern(Rt.TOPIC, "ord", PRE)
    match = AclBindingFilter(Rt.TOPIC, "orders", PatternType.MATCH)
    assert match.matches_pattern(lit) and match.matches_pattern(wild) and match.matches_pattern(pre)
    anyf = AclBindingFilter(Rt.TOPIC, "orders", PatternType.ANY)
    assert anyf.matches_pattern(lit) and not anyf.matches_pattern(wild) and not anyf.matches_pattern(pre)
    assert AclBindingFilter(Rt.ANY, None, PatternType.PREFIXED).matches_pattern(pre)
    assert not AclBindingFilter(Rt.GROUP).matches_pattern(lit)
    entry = AccessControlEntry("User:alice", "*", Op.READ, ALLOW)
    assert AclBindingFilter(principal="User:alice", operation=Op.READ).matches_entry(entry)
    assert not AclBindingFilter(permission=DENY).matches_entry(entry)


def test_wire_validation() -> None:
    ok = binding_from_wire(2, "t", 4, "User:alice", "*", 3, 3)
    assert ok.pattern == ResourcePattern(Rt.TOPIC, "t", PRE)
    bad = [
        (2, "t", 2, "User:alice", "*", 3, 3),   # MATCH is only for filters
        (2, "t", 1, "User:alice", "*", 3, 3),   # ANY too
        (1, "t", 3, "User:alice", "*", 3, 3),   # resource type ANY
        (2, "t", 3, "alice", "*", 3, 3),        # no principal type
        (2, "t", 3, "User:alice", "*", 1, 3),   # operation ANY
        (2, "t", 3, "User:alice", "*", 3, 1),   # permission ANY
        (4, "other", 3, "User:alice", "*", 7, 3),  # the cluster is called kafka-cluster
        (2, "", 3, "User:alice", "*", 3, 3),
        (2, "a/b", 3, "User:alice", "*", 3, 3),
        (99, "t", 3, "User:alice", "*", 3, 3),
    ]
    for args in bad:
        with pytest.raises(AclError):
            binding_from_wire(*args)
    with pytest.raises(AclError):
        filter_from_wire(2, None, 0, None, None, 1, 1)  # pattern type UNKNOWN
    assert filter_from_wire(1, None, 1, None, None, 1, 1) == AclBindingFilter()


def test_config_selection() -> None:
    assert create_authorizer("", {}) is None
    for name in ("kafka.security.authorizer.AclAuthorizer", "org.apache.kafka.metadata.authorizer.StandardAuthorizer"):
        a = create_authorizer(name, {"super.users": "User:admin;User:ops", "allow.everyone.if.no.acl.found": "true"})
        assert isinstance(a, AclAuthorizer)
        assert a.super_users == {"User:admin", "User:ops"} and a.allow_everyone_if_no_acl_found
    with pytest.raises(AuthorizerConfigError, match="not available"):
        create_authorizer("com.example.MyAuthorizer", {})
    with pytest.raises(AuthorizerConfigError):
        parse_super_users("admin")


async def test_storage_in_kafkas_paths_and_notifications(tmp_path: Path) -> None:
    tree = await EmbeddedTree.open(tmp_path)
    try:
        a = AclAuthorizer()
        await a.start(tree)
        for root in ("/kafka-acl", "/kafka-acl-extended/prefixed"):
            assert sorted(await tree.children(root)) == sorted(
                ["Topic", "Group", "Cluster", "TransactionalId", "DelegationToken", "User"])
        errors = await a.create_acls([acl(Rt.TOPIC, "t", "User:alice", Op.READ),
                                      acl(Rt.TOPIC, "t", "User:bob", Op.WRITE, host="10.0.0.1"),
                                      acl(Rt.GROUP, "app-", "User:alice", Op.READ, pt=PRE)])
        assert errors == [None, None, None]
        data, _ = await tree.get("/kafka-acl/Topic/t")
        doc = json.loads(data or b"")
        assert doc["version"] == 1
        assert {"principal": "User:bob", "permissionType": "Allow", "operation": "Write", "host": "10.0.0.1"} \
            in doc["acls"]
        assert await tree.exists("/kafka-acl-extended/prefixed/Group/app-") is not None
        literal_changes = await tree.children("/kafka-acl-changes")
        (node,) = literal_changes
        assert node.startswith("acl_changes_")
        assert (await tree.get(f"/kafka-acl-changes/{node}"))[0] == b"TOPIC:t"
        (ext,) = await tree.children("/kafka-acl-extended-changes")
        assert json.loads((await tree.get(f"/kafka-acl-extended-changes/{ext}"))[0] or b"") == {
            "version": 1, "resourceType": "GROUP", "name": "app-", "patternType": "PREFIXED"}
        assert allowed(a, ALICE, Op.READ, Rt.GROUP, "app-1")

        # A second broker on the same tree loads everything and follows changes made elsewhere.
        b = AclAuthorizer()
        await b.start(tree)
        assert allowed(b, ALICE, Op.READ, Rt.TOPIC, "t")
        deleted = await a.delete_acls([AclBindingFilter(Rt.TOPIC, "t", PatternType.MATCH, principal="User:alice")])
        assert [d.entry.principal for d in deleted[0].deleted] == ["User:alice"]
        for _ in range(100):
            if not allowed(b, ALICE, Op.READ, Rt.TOPIC, "t"):
                break
            await asyncio.sleep(0.02)
        assert not allowed(b, ALICE, Op.READ, Rt.TOPIC, "t")
        assert len(b.acls(AclBindingFilter())) == 2
        # Removing the last ACL removes the node.
        await a.delete_acls([AclBindingFilter(Rt.TOPIC)])
        assert await tree.exists("/kafka-acl/Topic/t") is None
        assert [x.pattern.name for x in a.acls(AclBindingFilter())] == ["app-"]
        await a.stop()
        await b.stop()
    finally:
        await tree.close()


def test_parse_change_accepts_kafka_forms() -> None:
    assert parse_change("/kafka-acl-changes", b"TOPIC:foo") == ResourcePattern(Rt.TOPIC, "foo")
    assert parse_change("/kafka-acl-changes", b"TransactionalId:x") == ResourcePattern(Rt.TRANSACTIONAL_ID, "x")
    assert parse_change("/kafka-acl-changes", b"garbage") is None
    assert parse_change("/kafka-acl-extended-changes", b"{") is None
