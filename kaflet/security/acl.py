"""Kafka's ACL model: resource types, pattern types, operations, permissions, bindings and filters.

The codes are the wire values of Kafka's enums (they go into CreateAcls/DescribeAcls/DeleteAcls
and the authorized-operations bit fields); the names are how Kafka writes them into the ACL
znodes (PascalCase) and into change notifications (the Java enum names, upper case).
The matching rules of filters follow Kafka's ResourcePatternFilter/AccessControlEntryFilter,
which every client's DescribeAcls and DeleteAcls rely on.
"""

from __future__ import annotations

import enum
import ipaddress
import json
from dataclasses import dataclass

#: The only name a CLUSTER resource has.
CLUSTER_NAME = "kafka-cluster"
#: A LITERAL resource name that matches every resource of its type.
WILDCARD = "*"
#: An ACL principal that matches every principal ("User:*").
WILDCARD_PRINCIPAL = "User:*"
#: An ACL host that matches every host.
WILDCARD_HOST = "*"


class ResourceType(enum.IntEnum):
    """org.apache.kafka.common.resource.ResourceType."""

    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7

    @property
    def znode_name(self) -> str:
        """The PascalCase name of the /kafka-acl/<ResourceType> node ("TransactionalId")."""
        return _RESOURCE_ZNODE_NAMES[self]


_RESOURCE_ZNODE_NAMES = {
    ResourceType.TOPIC: "Topic", ResourceType.GROUP: "Group", ResourceType.CLUSTER: "Cluster",
    ResourceType.TRANSACTIONAL_ID: "TransactionalId", ResourceType.DELEGATION_TOKEN: "DelegationToken",
    ResourceType.USER: "User", ResourceType.ANY: "Any", ResourceType.UNKNOWN: "Unknown",
}
#: The concrete resource types, in the order Kafka creates their ACL nodes.
CONCRETE_RESOURCE_TYPES = (ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER,
                           ResourceType.TRANSACTIONAL_ID, ResourceType.DELEGATION_TOKEN, ResourceType.USER)
_RESOURCE_BY_ZNODE = {rt.znode_name: rt for rt in CONCRETE_RESOURCE_TYPES}


class PatternType(enum.IntEnum):
    """org.apache.kafka.common.resource.PatternType (MATCH and ANY only appear in filters)."""

    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(enum.IntEnum):
    """org.apache.kafka.common.acl.AclOperation."""

    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14

    @property
    def znode_name(self) -> str:
        """PascalCase, as in the ACL znodes ("DescribeConfigs")."""
        return "".join(part.capitalize() for part in self.name.split("_"))


_OPERATION_BY_ZNODE = {op.znode_name.lower(): op for op in AclOperation}


class AclPermissionType(enum.IntEnum):
    """org.apache.kafka.common.acl.AclPermissionType."""

    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3

    @property
    def znode_name(self) -> str:
        return self.name.capitalize()


# An ACL that grants one of these also grants the key: Kafka's implied operations.
IMPLIED_BY: dict[AclOperation, frozenset[AclOperation]] = {
    AclOperation.DESCRIBE: frozenset({AclOperation.DESCRIBE, AclOperation.READ, AclOperation.WRITE,
                                      AclOperation.DELETE, AclOperation.ALTER}),
    AclOperation.DESCRIBE_CONFIGS: frozenset({AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS}),
}

#: What can be granted on each resource type (the authorized-operations fields list these).
SUPPORTED_OPERATIONS: dict[ResourceType, tuple[AclOperation, ...]] = {
    ResourceType.TOPIC: (AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE, AclOperation.DESCRIBE,
                         AclOperation.DELETE, AclOperation.ALTER, AclOperation.DESCRIBE_CONFIGS,
                         AclOperation.ALTER_CONFIGS),
    ResourceType.GROUP: (AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE),
    ResourceType.CLUSTER: (AclOperation.CREATE, AclOperation.CLUSTER_ACTION, AclOperation.DESCRIBE_CONFIGS,
                           AclOperation.ALTER_CONFIGS, AclOperation.IDEMPOTENT_WRITE, AclOperation.ALTER,
                           AclOperation.DESCRIBE),
    ResourceType.TRANSACTIONAL_ID: (AclOperation.DESCRIBE, AclOperation.WRITE),
    ResourceType.DELEGATION_TOKEN: (AclOperation.DESCRIBE,),
    ResourceType.USER: (AclOperation.CREATE_TOKENS, AclOperation.DESCRIBE_TOKENS),
}


class AclError(ValueError):
    """An ACL or filter that Kafka would refuse with INVALID_REQUEST; the message says why."""


def normalize_host(host: str) -> str:
    """One spelling per IP address ("::1" and "0:0:0:0:0:0:0:1" are equal), other hosts as given."""
    if host == WILDCARD_HOST:
        return host
    try:
        return ipaddress.ip_address(host).compressed
    except ValueError:
        return host


@dataclass(frozen=True, slots=True)
class ResourcePattern:
    """A resource type, a name and how the name matches (LITERAL or PREFIXED)."""

    resource_type: ResourceType
    name: str
    pattern_type: PatternType = PatternType.LITERAL

    def __str__(self) -> str:
        return f"ResourcePattern(resourceType={self.resource_type.name}, name={self.name}, " \
               f"patternType={self.pattern_type.name})"


@dataclass(frozen=True, slots=True)
class AccessControlEntry:
    """Who (principal, host) is allowed or denied what (operation)."""

    principal: str
    host: str
    operation: AclOperation
    permission: AclPermissionType


@dataclass(frozen=True, slots=True)
class AclBinding:
    """One ACL: a resource pattern and an entry."""

    pattern: ResourcePattern
    entry: AccessControlEntry


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """A filter over ACLs; None (names, principal, host) and the ANY codes match everything."""

    resource_type: ResourceType = ResourceType.ANY
    name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission: AclPermissionType = AclPermissionType.ANY

    def matches_pattern(self, pattern: ResourcePattern) -> bool:
        """Kafka's ResourcePatternFilter.matches: MATCH also finds wildcard and prefixed ACLs."""
        if self.resource_type is not ResourceType.ANY and self.resource_type is not pattern.resource_type:
            return False
        if self.pattern_type not in (PatternType.ANY, PatternType.MATCH) and self.pattern_type is not pattern.pattern_type:
            return False
        if self.name is None:
            return True
        if self.pattern_type in (PatternType.ANY, pattern.pattern_type):
            return self.name == pattern.name
        # MATCH: the ACLs that would apply to a resource of this name.
        if pattern.pattern_type is PatternType.LITERAL:
            return self.name == pattern.name or pattern.name == WILDCARD
        return self.name.startswith(pattern.name)

    def matches_entry(self, entry: AccessControlEntry) -> bool:
        if self.principal is not None and self.principal != entry.principal:
            return False
        if self.host is not None and normalize_host(self.host) != normalize_host(entry.host):
            return False
        if self.operation is not AclOperation.ANY and self.operation is not entry.operation:
            return False
        return self.permission is AclPermissionType.ANY or self.permission is entry.permission

    def matches(self, binding: AclBinding) -> bool:
        return self.matches_pattern(binding.pattern) and self.matches_entry(binding.entry)


def _enum_value(cls: type[enum.IntEnum], code: int, what: str) -> enum.IntEnum:
    try:
        return cls(code)
    except ValueError:
        raise AclError(f"Unknown {what} code {code}") from None


def parse_principal(principal: str | None) -> str:
    """Kafka's `Type:name` check (SecurityUtils.parseKafkaPrincipal)."""
    if not principal or ":" not in principal or principal.startswith(":"):
        raise AclError(f"Could not parse principal from `{principal}` (no colon is present separating the "
                       "principal type from the principal name)")
    return principal


def binding_from_wire(resource_type: int, name: str | None, pattern_type: int, principal: str | None,
                      host: str | None, operation: int, permission: int) -> AclBinding:
    """Validate one CreateAcls creation as Kafka does; raises AclError (INVALID_REQUEST)."""
    rt = ResourceType(_enum_value(ResourceType, resource_type, "resource type"))
    pt = PatternType(_enum_value(PatternType, pattern_type, "pattern type"))
    op = AclOperation(_enum_value(AclOperation, operation, "operation"))
    perm = AclPermissionType(_enum_value(AclPermissionType, permission, "permission type"))
    if PatternType.UNKNOWN in (pt,) or rt is ResourceType.UNKNOWN or op is AclOperation.UNKNOWN \
            or perm is AclPermissionType.UNKNOWN:
        raise AclError("Invalid ACL creation: it contains UNKNOWN elements")
    if rt is ResourceType.ANY:
        raise AclError("resourceType must not be ANY")
    if pt not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise AclError(f"patternType must not be {pt.name}; use LITERAL or PREFIXED")
    if op is AclOperation.ANY:
        raise AclError("operation must not be ANY")
    if perm is AclPermissionType.ANY:
        raise AclError("permissionType must not be ANY")
    if not name:
        raise AclError("Invalid empty resource name")
    if rt is ResourceType.CLUSTER and name != CLUSTER_NAME:
        raise AclError(f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}")
    if "/" in name or name in (".", ".."):
        # The name is a znode name (/kafka-acl/<type>/<name>), as in Kafka, which cannot store these.
        raise AclError(f"Invalid resource name {name!r}: it cannot be stored as an ACL node")
    if host is None or host == "":
        raise AclError("Invalid ACL host: it must be '*' or an IP address")
    return AclBinding(ResourcePattern(rt, name, pt),
                      AccessControlEntry(parse_principal(principal), host, op, perm))


def filter_from_wire(resource_type: int, name: str | None, pattern_type: int, principal: str | None,
                     host: str | None, operation: int, permission: int) -> AclBindingFilter:
    """Validate one DescribeAcls/DeleteAcls filter; raises AclError (INVALID_REQUEST)."""
    rt = ResourceType(_enum_value(ResourceType, resource_type, "resource type"))
    pt = PatternType(_enum_value(PatternType, pattern_type, "pattern type"))
    op = AclOperation(_enum_value(AclOperation, operation, "operation"))
    perm = AclPermissionType(_enum_value(AclPermissionType, permission, "permission type"))
    if pt is PatternType.UNKNOWN:
        raise AclError("The pattern type is UNKNOWN")
    if rt is ResourceType.UNKNOWN or op is AclOperation.UNKNOWN or perm is AclPermissionType.UNKNOWN:
        raise AclError("The filter contains UNKNOWN elements")
    return AclBindingFilter(rt, name, pt, principal, host, op, perm)


# ---------------------------------------------------------------------------------------------
# The znodes: /kafka-acl/<ResourceType>/<name>, /kafka-acl-extended/prefixed/<ResourceType>/<name>

LITERAL_ACL_ROOT = "/kafka-acl"
LITERAL_CHANGES = "/kafka-acl-changes"
EXTENDED_ACL_ROOT = "/kafka-acl-extended/prefixed"
EXTENDED_CHANGES = "/kafka-acl-extended-changes"
CHANGE_PREFIX = "acl_changes_"


def acl_root(pattern_type: PatternType) -> str:
    return LITERAL_ACL_ROOT if pattern_type is PatternType.LITERAL else EXTENDED_ACL_ROOT


def acl_path(pattern: ResourcePattern) -> str:
    return f"{acl_root(pattern.pattern_type)}/{pattern.resource_type.znode_name}/{pattern.name}"


def resource_type_from_znode(name: str) -> ResourceType | None:
    return _RESOURCE_BY_ZNODE.get(name)


def acls_json(entries: frozenset[AccessControlEntry] | set[AccessControlEntry]) -> bytes:
    """The node's data: {"version":1,"acls":[...]} (compact, as Jackson writes it)."""
    acls = [{"principal": e.principal, "permissionType": e.permission.znode_name,
             "operation": e.operation.znode_name, "host": e.host}
            for e in sorted(entries, key=lambda e: (e.principal, e.permission, e.operation, e.host))]
    return json.dumps({"version": 1, "acls": acls}, separators=(",", ":")).encode()


def parse_acls_json(data: bytes | None) -> frozenset[AccessControlEntry]:
    """Read an ACL node; entries Kafka could not read either are skipped."""
    if not data:
        return frozenset()
    doc = json.loads(data)
    out = set()
    for item in doc.get("acls", []):
        op = _OPERATION_BY_ZNODE.get(str(item.get("operation", "")).replace("_", "").lower())
        perm_name = str(item.get("permissionType", "")).upper()
        if op is None or perm_name not in ("ALLOW", "DENY") or "principal" not in item:
            continue
        out.add(AccessControlEntry(str(item["principal"]), str(item.get("host", WILDCARD_HOST)), op,
                                   AclPermissionType[perm_name]))
    return frozenset(out)


def change_notification(pattern: ResourcePattern) -> tuple[str, bytes]:
    """(sequential node prefix, data) announcing a change of this resource's ACLs."""
    if pattern.pattern_type is PatternType.LITERAL:
        return f"{LITERAL_CHANGES}/{CHANGE_PREFIX}", f"{pattern.resource_type.name}:{pattern.name}".encode()
    doc = {"version": 1, "resourceType": pattern.resource_type.name, "name": pattern.name,
           "patternType": pattern.pattern_type.name}
    return f"{EXTENDED_CHANGES}/{CHANGE_PREFIX}", json.dumps(doc, separators=(",", ":")).encode()


def parse_change(root: str, data: bytes | None) -> ResourcePattern | None:
    """The resource a change notification names (None: unreadable or of an unknown type)."""
    if not data:
        return None
    text = data.decode("utf-8", errors="replace")
    if root == LITERAL_CHANGES:
        type_name, sep, name = text.partition(":")
        pt = PatternType.LITERAL
    else:
        try:
            doc = json.loads(text)
            type_name, name, pt_name = str(doc["resourceType"]), str(doc["name"]), str(doc["patternType"])
            pt = PatternType[pt_name.upper()]
        except (ValueError, KeyError, TypeError):
            return None
        sep = ":"
    try:
        rt = ResourceType[type_name.upper()]
    except KeyError:
        # Kafka 2.0's notifications used the PascalCase names ("TransactionalId").
        found = _RESOURCE_BY_ZNODE.get(type_name)
        if found is None:
            return None
        rt = found
    if not sep or rt not in CONCRETE_RESOURCE_TYPES or pt not in (PatternType.LITERAL, PatternType.PREFIXED):
        return None
    return ResourcePattern(rt, name, pt)
