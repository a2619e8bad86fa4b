"""Cost of one gateway authorization on the request path, with and without the connection cache.

    PYTHONPATH=. python benchmarks/gateway_authorize.py [--acls 10000] [--calls 200000]

Compares, per call of ``authorize`` with one action (what a Produce of one topic asks):
the gateway authorizer for a connection of a gateway login (cached decision), for a principal
without a connection cache (three ACL view look-ups each time, the worst case: a wildcard-user
grant), for a super user, and Kafka's AclAuthorizer with its decision cache, for scale.
"""

from __future__ import annotations

import argparse
import time

from kaflet.gateway.authorizer import GatewayAuthorizer
from kaflet.gateway.model import ACCESS_READ, ACCESS_WRITE
from kaflet.gateway.sessions import GatewayPrincipal
from kaflet.gateway.static import StaticAcls, StaticUsers
from kaflet.security.acl import AclOperation, ResourceType
from kaflet.security.authorizer import AclAuthorizer, Action, Authorizer
from kaflet.security.principal import KafkaPrincipal


def per_call_ns(authorizer: Authorizer, principal: KafkaPrincipal, action: Action, calls: int) -> float:
    actions = [action]
    assert authorizer.authorize(principal, "10.0.0.1", actions) == [True]
    start = time.perf_counter_ns()
    for _ in range(calls):
        authorizer.authorize(principal, "10.0.0.1", actions)
    return (time.perf_counter_ns() - start) / calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--acls", type=int, default=10000, help="ACL rows in the view")
    parser.add_argument("--calls", type=int, default=200000)
    args = parser.parse_args()
    rows = [(f"topic-{i}", f"app_{i % 1000}", ACCESS_READ | ACCESS_WRITE) for i in range(args.acls)]
    rows.append(("*", "wide", ACCESS_WRITE))
    users = StaticUsers.from_config(",".join(f"app_{i}:pw:false" for i in range(1000)) + ",wide:pw:false")
    acls = StaticAcls(rows)
    gateway = GatewayAuthorizer(frozenset(), lambda: users, lambda: acls)
    write = Action(AclOperation.WRITE, ResourceType.TOPIC, "topic-42")
    cases = {
        "gateway, connection cache hit": (GatewayPrincipal("User", "app_42"), write),
        "gateway, no cache, (*, user) row": (KafkaPrincipal.user("wide"), write),
        "gateway, super user": (KafkaPrincipal.user("admin"), write),
    }
    for name, (principal, action) in cases.items():
        print(f"{name:36s} {per_call_ns(gateway, principal, action, args.calls):8.0f} ns/call")
    kafka = AclAuthorizer(super_users=(), allow_everyone_if_no_acl_found=True)
    print(f"{'Kafka AclAuthorizer, cache hit':36s} "
          f"{per_call_ns(kafka, KafkaPrincipal.user('app_42'), write, args.calls):8.0f} ns/call")


if __name__ == "__main__":
    main()
