"""The gateway authorizer (Logi-Kafka's DidiAuthorizer): super users, a fixed matrix, topic ACLs.

Decisions, in order:
1. Super users may do everything: ``super.users``, users the users view marks super, ``admin``,
   and ``ANONYMOUS`` (what PLAINTEXT listeners and inter-broker links run as; the authenticator
   never lets a client log in under that name).
2. Everyone else gets a fixed matrix: Describe on topics, Describe and Write on transactional
   ids, IdempotentWrite on the cluster, Read and Describe on groups. Read and Write on a topic
   are looked up in the ACL view as (topic, user), then (``*``, user), then (topic, ``*``); the
   first row that carries the operation's allow or deny bit decides, and no such row denies.
   Everything else (creating or deleting topics, configs, ACLs...) is denied.
3. A connection authenticated by the gateway caches its topic decisions until the ACL view's
   version (the commit timestamp) moves, so a revoke reaches connected clients on the next commit.

Denials go to the ``kaflet.gateway.denials`` logger (Logi-Kafka's separate "userError" log).
ACLs live in the management service, so Kafka's ACL calls are refused with an explanation.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from kaflet.gateway.model import (
    ACCESS_DENY_READ,
    ACCESS_DENY_WRITE,
    ACCESS_READ,
    ACCESS_WRITE,
    ADMIN_USER,
    ANONYMOUS_USER,
    WILDCARD,
    AclView,
    UserView,
)
from kaflet.gateway.sessions import GatewayPrincipal
from kaflet.gateway.static import StaticAcls, StaticUsers
from kaflet.security.acl import AclBinding, AclBindingFilter, AclOperation, ResourceType
from kaflet.security.authorizer import (
    Action,
    Authorizer,
    DeleteResult,
    parse_super_users,
    register_authorizer,
)
from kaflet.security.principal import KafkaPrincipal

denials = logging.getLogger("kaflet.gateway.denials")

#: authorizer.class.name values that select this authorizer: Logi-Kafka's, and kaflet's own.
CLASS_NAMES = ("com.didichuxing.datachannel.kafka.security.authorizer.DidiAuthorizer",
               "kaflet.gateway.GatewayAuthorizer")

_ALLOWED = frozenset({
    (AclOperation.DESCRIBE, ResourceType.TOPIC),
    (AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID),
    (AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID),
    (AclOperation.IDEMPOTENT_WRITE, ResourceType.CLUSTER),
    (AclOperation.READ, ResourceType.GROUP),
    (AclOperation.DESCRIBE, ResourceType.GROUP),
})
#: Topic operations decided by the ACL view: (allow bit, deny bit).
_TOPIC_BITS = {AclOperation.READ: (ACCESS_READ, ACCESS_DENY_READ), AclOperation.WRITE: (ACCESS_WRITE, ACCESS_DENY_WRITE)}

MANAGED_ELSEWHERE = ("ACLs of the gateway authorizer are managed by the gateway's management service, "
                     "not with Kafka's ACL requests")


def acl_allows(acls: AclView, topic: str, user: str, operation: AclOperation) -> bool:
    """Read or Write on a topic per the ACL view: (topic, user), (*, user), (topic, *), else deny."""
    allow, deny = _TOPIC_BITS[operation]
    for key_topic, key_user in ((topic, user), (WILDCARD, user), (topic, WILDCARD)):
        bits = acls.access(key_topic, key_user)
        if bits is None:
            continue
        if bits & deny:
            return False
        if bits & allow:
            return True
    return False


class GatewayAuthorizer(Authorizer):
    """Authorization from the gateway's users and ACL views; see the module docstring."""

    def __init__(self, super_users: frozenset[str], users: Callable[[], UserView],
                 acls: Callable[[], AclView]) -> None:
        self.super_users = super_users
        self._users = users
        self._acls = acls

    @classmethod
    def from_config(cls, originals: dict[str, str]) -> GatewayAuthorizer:
        """Super users from super.users; the static views of the config until `attach` replaces them."""
        users = StaticUsers.from_config(originals.get("gateway.default.users"))
        acls = StaticAcls.from_config(originals.get("gateway.default.acls"))
        return cls(parse_super_users(originals.get("super.users")), lambda: users, lambda: acls)

    def attach(self, users: Callable[[], UserView], acls: Callable[[], AclView]) -> None:
        """Consult these views from now on (the broker's, shared with the authenticator)."""
        self._users = users
        self._acls = acls

    def is_super(self, principal: KafkaPrincipal) -> bool:
        name = principal.name
        if name in (ANONYMOUS_USER, ADMIN_USER) or (self.super_users and str(principal) in self.super_users):
            return True
        user = self._users().user(name)
        return user is not None and user.super_user

    def authorize(self, principal: KafkaPrincipal, host: str, actions: Sequence[Action]) -> list[bool]:
        if self.is_super(principal):
            return [True] * len(actions)
        acls = self._acls()
        cached = principal.decisions.current(acls.version) if isinstance(principal, GatewayPrincipal) else None
        out = []
        for a in actions:
            op = a.operation
            if a.resource_type is ResourceType.TOPIC and (op is AclOperation.WRITE or op is AclOperation.READ):
                key = (op, a.name)
                got = cached.get(key) if cached is not None else None
                if got is None:
                    got = acl_allows(acls, a.name, principal.name, op)
                    if cached is not None:
                        cached[key] = got
                allowed = got
            else:
                allowed = (op, a.resource_type) in _ALLOWED
            if not allowed:
                denials.info("User = %s from %s is denied Operation = %s on resource = %s:%s", principal.name, host,
                             a.operation.znode_name, a.resource_type.znode_name, a.name)
            out.append(allowed)
        return out

    def authorize_by_resource_type(self, principal: KafkaPrincipal, host: str, operation: AclOperation,
                                   resource_type: ResourceType) -> bool:
        if self.is_super(principal) or (operation, resource_type) in _ALLOWED:
            return True
        if resource_type is ResourceType.TOPIC and operation in _TOPIC_BITS:
            # The views answer per (topic, user); a user-wide grant is the (*, user) row.
            return acl_allows(self._acls(), WILDCARD, principal.name, operation)
        return False

    async def create_acls(self, bindings: Sequence[AclBinding]) -> list[str | None]:
        return [MANAGED_ELSEWHERE] * len(bindings)

    async def delete_acls(self, filters: Sequence[AclBindingFilter]) -> list[DeleteResult]:
        return [DeleteResult([], error_code=-1, error_message=MANAGED_ELSEWHERE) for _ in filters]

    def acls(self, acl_filter: AclBindingFilter) -> list[AclBinding]:
        # The gateway's permissions are not Kafka ACL bindings; there are none of those to list.
        return []


for _name in CLASS_NAMES:
    register_authorizer(_name, GatewayAuthorizer.from_config)
