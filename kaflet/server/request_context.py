"""What a handler knows about the request it serves, and the authorization checks it makes."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kaflet.protocol.header import RequestHeader
from kaflet.quota.entity import QuotaType
from kaflet.security.acl import CLUSTER_NAME, SUPPORTED_OPERATIONS, AclOperation, ResourceType
from kaflet.security.authorizer import Action

if TYPE_CHECKING:
    from kaflet.network.connection import Connection
    from kaflet.server.services import Services


@dataclass(slots=True)
class RequestContext:
    """The broker's services, the connection and the parsed header of one request."""

    services: Services
    conn: Connection
    header: RequestHeader
    #: The bytes per topic a Produce or Fetch moved, counted by server/traffic.py when the broker
    #: tracks traffic (the gateway's topic quotas and session report); None: nothing is counted.
    traffic: dict[str, int] | None = None
    #: Set by Fetch for a follower's fetch: replication is exempt from client quotas, as in
    #: Kafka (it answers followers with sendResponseExemptThrottle).
    quota_exempt: bool = False
    #: Set by Fetch when disk load protection refused a cold read: the response's throttle time
    #: (the quotas' own throttle wins when longer).
    throttle_ms: int = 0

    @property
    def version(self) -> int:
        return self.header.api_version

    @property
    def listener(self) -> str:
        return self.conn.listener

    def may_defer(self) -> bool:
        """May the handler answer with a DeferredResponse (the connection reads on meanwhile)?

        Not while a quota may apply: Kafka mutes a throttled connection after the response,
        and the throttle time is only known once the request is complete.
        """
        manager = self.services.accounting.quotas
        return self.conn.authenticated and not (
            manager.active(QuotaType.REQUEST) or manager.active(QuotaType.PRODUCE)
            or manager.active_per_topic(QuotaType.PRODUCE))

    # -- authorization (Kafka's AuthHelper). Without an authorizer everything is allowed. ------

    def authorize(self, operation: AclOperation, resource_type: ResourceType, name: str) -> bool:
        """May the connection's principal perform `operation` on this (literal) resource?"""
        authorizer = self.services.authorizer
        if authorizer is None:
            return True
        return authorizer.authorize(self.conn.principal, self.conn.peer[0],
                                    [Action(operation, resource_type, name)])[0]

    def authorize_cluster(self, operation: AclOperation) -> bool:
        return self.authorize(operation, ResourceType.CLUSTER, CLUSTER_NAME)

    def authorized(self, operation: AclOperation, resource_type: ResourceType, names: Iterable[str]) -> set[str]:
        """The names (of resources of one type) the principal may perform `operation` on."""
        unique = list(dict.fromkeys(names))
        authorizer = self.services.authorizer
        if authorizer is None:
            return set(unique)
        results = authorizer.authorize(self.conn.principal, self.conn.peer[0],
                                       [Action(operation, resource_type, n) for n in unique])
        return {n for n, ok in zip(unique, results, strict=True) if ok}

    def authorize_by_resource_type(self, operation: AclOperation, resource_type: ResourceType) -> bool:
        """May the principal perform `operation` on at least one resource of the type?"""
        authorizer = self.services.authorizer
        if authorizer is None:
            return True
        return authorizer.authorize_by_resource_type(self.conn.principal, self.conn.peer[0], operation,
                                                     resource_type)

    def authorized_operations(self, resource_type: ResourceType, name: str) -> set[int]:
        """The operation codes the principal holds on a resource (the *AuthorizedOperations fields)."""
        ops = SUPPORTED_OPERATIONS[resource_type]
        authorizer = self.services.authorizer
        if authorizer is None:
            return {int(op) for op in ops}
        results = authorizer.authorize(self.conn.principal, self.conn.peer[0],
                                       [Action(op, resource_type, name) for op in ops])
        return {int(op) for op, ok in zip(ops, results, strict=True) if ok}
