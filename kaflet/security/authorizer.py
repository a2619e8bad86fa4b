"""Authorization: the `Authorizer` interface and Kafka's ACL authorizer as its first implementation.

`authorizer.class.name` selects the implementation. Kafka's own class names
(kafka.security.authorizer.AclAuthorizer, org.apache.kafka.metadata.authorizer.StandardAuthorizer,
and the pre-3.0 kafka.security.auth.SimpleAclAuthorizer) all select `AclAuthorizer`, so a Kafka
server.properties works unchanged. Another implementation (the Logi-Kafka gateway's, see
shared/gateway-spec.md) registers itself with `register_authorizer` under its own name.

`AclAuthorizer` keeps Kafka's storage (the ZooKeeper AclAuthorizer's): one node per resource
pattern under /kafka-acl (LITERAL) or /kafka-acl-extended/prefixed (PREFIXED), and a sequential
notification per change under /kafka-acl-changes or /kafka-acl-extended-changes. Every broker
watches the notification nodes and re-reads the resources they name, so a change made through any
broker (or by Kafka's own tools against the same tree) applies without a restart. Checks run on
every request, so they only touch an in-memory index and a small decision cache.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kaflet.metadata import notifications
from kaflet.security.acl import (
    CHANGE_PREFIX,
    CONCRETE_RESOURCE_TYPES,
    EXTENDED_ACL_ROOT,
    EXTENDED_CHANGES,
    IMPLIED_BY,
    LITERAL_ACL_ROOT,
    LITERAL_CHANGES,
    WILDCARD,
    WILDCARD_HOST,
    WILDCARD_PRINCIPAL,
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
    acl_path,
    acls_json,
    change_notification,
    normalize_host,
    parse_acls_json,
    parse_change,
    resource_type_from_znode,
)
from kaflet.security.principal import KafkaPrincipal

if TYPE_CHECKING:
    from kaflet.metadata.tree import MetadataTree, WatchEvent

log = logging.getLogger("kaflet.authorizer")


@dataclass(frozen=True, slots=True)
class Action:
    """One thing a request wants to do: an operation on a (literal) resource."""

    operation: AclOperation
    resource_type: ResourceType
    name: str


@dataclass(slots=True)
class DeleteResult:
    """What one DeleteAcls filter removed (or why it failed: error code and message)."""

    deleted: list[AclBinding]
    error_code: int = 0
    error_message: str | None = None


class Authorizer(ABC):
    """Decides whether a principal connected from a host may perform actions; manages ACLs.

    `authorize` is called on the request path for every request that needs a check and must not
    block; the ACL management calls may do I/O.
    """

    async def start(self, tree: MetadataTree) -> None:  # noqa: B027 - optional hook
        """Load state and start following changes (before the listeners serve)."""

    async def resync(self) -> None:  # noqa: B027 - optional hook
        """Re-arm change watches after a new ZooKeeper session (the old one's are gone)."""

    async def stop(self) -> None:  # noqa: B027 - optional hook
        """Stop following changes."""

    @abstractmethod
    def authorize(self, principal: KafkaPrincipal, host: str, actions: Sequence[Action]) -> list[bool]:
        """One decision per action, in order."""

    def authorize_by_resource_type(self, principal: KafkaPrincipal, host: str, operation: AclOperation,
                                   resource_type: ResourceType) -> bool:
        """True when the principal may perform `operation` on at least one resource of the type.

        Kafka uses this for InitProducerId: Write on any topic implies idempotent writes (KIP-679).
        """
        return self.authorize(principal, host, [Action(operation, resource_type, "")])[0]

    @abstractmethod
    async def create_acls(self, bindings: Sequence[AclBinding]) -> list[str | None]:
        """Store ACLs; per binding None, or why it failed."""

    @abstractmethod
    async def delete_acls(self, filters: Sequence[AclBindingFilter]) -> list[DeleteResult]:
        """Delete the ACLs each filter matches."""

    @abstractmethod
    def acls(self, acl_filter: AclBindingFilter) -> list[AclBinding]:
        """The ACLs the filter matches."""


# ---------------------------------------------------------------------------------------------
# Selection by authorizer.class.name

AuthorizerFactory = Callable[[dict[str, str]], Authorizer]
_REGISTRY: dict[str, AuthorizerFactory] = {}


class AuthorizerConfigError(ValueError):
    """authorizer.class.name or another authorizer setting is wrong; the message is one line."""


def register_authorizer(class_name: str, factory: AuthorizerFactory) -> None:
    """Make `authorizer.class.name=<class_name>` build an authorizer with `factory(originals)`."""
    _REGISTRY[class_name] = factory


def create_authorizer(class_name: str | None, originals: dict[str, str]) -> Authorizer | None:
    """The authorizer the config selects, or None when authorizer.class.name is empty."""
    if not class_name or not class_name.strip():
        return None
    factory = _REGISTRY.get(class_name.strip())
    if factory is None:
        known = ", ".join(sorted(_REGISTRY))
        raise AuthorizerConfigError(f"authorizer.class.name {class_name.strip()} is not available in kaflet "
                                    f"(available: {known})")
    return factory(originals)


def parse_super_users(value: str | None) -> frozenset[str]:
    """super.users: `User:alice;User:bob` (semicolons, as Kafka splits it)."""
    if not value:
        return frozenset()
    users = set()
    for item in value.split(";"):
        item = item.strip()
        if not item:
            continue
        if ":" not in item:
            raise AuthorizerConfigError(f"super.users entry {item!r} is not of the form Type:name (e.g. User:admin)")
        users.add(item)
    return frozenset(users)


# ---------------------------------------------------------------------------------------------
# Kafka's ACL authorizer


class AclAuthorizer(Authorizer):
    """Kafka's AclAuthorizer: ACLs in the metadata tree, deny wins, super users, implied operations."""

    #: Decisions remembered between ACL changes; the cache is simply dropped when it grows past this.
    DECISION_CACHE_SIZE = 65536

    def __init__(self, super_users: Iterable[str] = (), allow_everyone_if_no_acl_found: bool = False) -> None:
        self.super_users = frozenset(super_users)
        self.allow_everyone_if_no_acl_found = allow_everyone_if_no_acl_found
        self.tree: MetadataTree | None = None
        # The index: literal ACLs by (type, name) (the wildcard is just the name "*"), prefixed
        # ACLs by type then prefix. Values are frozensets, replaced (never mutated) on change.
        self._literal: dict[tuple[ResourceType, str], frozenset[AccessControlEntry]] = {}
        self._prefixed: dict[ResourceType, dict[str, frozenset[AccessControlEntry]]] = {}
        self._decisions: dict[tuple[str, str, AclOperation, ResourceType, str], bool] = {}
        self._lock = asyncio.Lock()  # serializes this broker's read-modify-write of ACL nodes
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._last_seq: dict[str, int] = {LITERAL_CHANGES: -1, EXTENDED_CHANGES: -1}

    @classmethod
    def from_config(cls, originals: dict[str, str]) -> AclAuthorizer:
        allow = originals.get("allow.everyone.if.no.acl.found", "false").strip().lower()
        if allow not in ("true", "false"):
            raise AuthorizerConfigError(
                f"Invalid value {allow!r} for configuration allow.everyone.if.no.acl.found: expected true or false")
        return cls(parse_super_users(originals.get("super.users")), allow == "true")

    # -- the check ------------------------------------------------------------------------------

    def authorize(self, principal: KafkaPrincipal, host: str, actions: Sequence[Action]) -> list[bool]:
        who = str(principal)
        if who in self.super_users:
            return [True] * len(actions)
        decisions = self._decisions
        out = []
        for a in actions:
            key = (who, host, a.operation, a.resource_type, a.name)
            allowed = decisions.get(key)
            if allowed is None:
                allowed = self._decide(who, normalize_host(host), a)
                if len(decisions) >= self.DECISION_CACHE_SIZE:
                    decisions.clear()
                decisions[key] = allowed
                if not allowed:
                    log.debug("Principal = %s is Denied Operation = %s from host = %s on resource = %s:%s",
                              who, a.operation.znode_name, host, a.resource_type.znode_name, a.name)
            out.append(allowed)
        return out

    def _matching(self, resource_type: ResourceType, name: str) -> list[frozenset[AccessControlEntry]]:
        """Every ACL set that applies to the resource: literal, wildcard and prefixes of its name."""
        found = []
        literal = self._literal
        got = literal.get((resource_type, name))
        if got:
            found.append(got)
        if name != WILDCARD:
            got = literal.get((resource_type, WILDCARD))
            if got:
                found.append(got)
        prefixes = self._prefixed.get(resource_type)
        if prefixes:
            if len(prefixes) <= len(name):
                found.extend(entries for prefix, entries in prefixes.items() if name.startswith(prefix))
            else:
                found.extend(entries for i in range(1, len(name) + 1) if (entries := prefixes.get(name[:i])))
        return found

    def _decide(self, principal: str, host: str, action: Action) -> bool:
        sets = self._matching(action.resource_type, action.name)
        if not sets:
            return self.allow_everyone_if_no_acl_found
        op = action.operation
        granting = IMPLIED_BY.get(op, frozenset((op,)))
        allowed = False
        for entries in sets:
            for e in entries:
                if e.principal != principal and e.principal != WILDCARD_PRINCIPAL:
                    continue
                if e.host != WILDCARD_HOST and normalize_host(e.host) != host:
                    continue
                if e.permission is AclPermissionType.DENY:
                    # Deny wins, and a deny of an operation never implies anything else.
                    if e.operation is op or e.operation is AclOperation.ALL:
                        return False
                elif e.operation is AclOperation.ALL or e.operation in granting:
                    allowed = True
        return allowed

    def authorize_by_resource_type(self, principal: KafkaPrincipal, host: str, operation: AclOperation,
                                   resource_type: ResourceType) -> bool:
        # As Kafka's default: a made-up name catches super users, wildcards and allow.everyone.
        if self.authorize(principal, host, [Action(operation, resource_type, "\x00hardcode")])[0]:
            return True
        who, host = str(principal), normalize_host(host)

        def applies(e: AccessControlEntry) -> bool:
            return ((e.principal == who or e.principal == WILDCARD_PRINCIPAL)
                    and (e.host == WILDCARD_HOST or normalize_host(e.host) == host)
                    and (e.operation is operation or e.operation is AclOperation.ALL))

        deny_literal: set[str] = set()
        deny_prefix: set[str] = set()
        allow_literal: set[str] = set()
        allow_prefix: set[str] = set()
        for (rt, name), entries in self._literal.items():
            if rt is resource_type:
                for e in entries:
                    if applies(e):
                        (deny_literal if e.permission is AclPermissionType.DENY else allow_literal).add(name)
        for prefix, entries in self._prefixed.get(resource_type, {}).items():
            for e in entries:
                if applies(e):
                    (deny_prefix if e.permission is AclPermissionType.DENY else allow_prefix).add(prefix)
        if WILDCARD in deny_literal:
            return False
        if WILDCARD in allow_literal:
            return True

        def denied_by_prefix(name: str) -> bool:
            return any(name.startswith(p) for p in deny_prefix)

        if any(n not in deny_literal and not denied_by_prefix(n) for n in allow_literal):
            return True
        return any(not denied_by_prefix(p) for p in allow_prefix)

    # -- reading ACLs ---------------------------------------------------------------------------

    def _all(self) -> Iterable[tuple[ResourcePattern, frozenset[AccessControlEntry]]]:
        for (rt, name), entries in self._literal.items():
            yield ResourcePattern(rt, name, PatternType.LITERAL), entries
        for rt, prefixes in self._prefixed.items():
            for name, entries in prefixes.items():
                yield ResourcePattern(rt, name, PatternType.PREFIXED), entries

    def acls(self, acl_filter: AclBindingFilter) -> list[AclBinding]:
        out: list[AclBinding] = []
        for pattern, entries in self._all():
            if acl_filter.matches_pattern(pattern):
                out.extend(AclBinding(pattern, e) for e in entries if acl_filter.matches_entry(e))
        return out

    def _entries(self, pattern: ResourcePattern) -> frozenset[AccessControlEntry]:
        if pattern.pattern_type is PatternType.LITERAL:
            return self._literal.get((pattern.resource_type, pattern.name), frozenset())
        return self._prefixed.get(pattern.resource_type, {}).get(pattern.name, frozenset())

    def _set_entries(self, pattern: ResourcePattern, entries: frozenset[AccessControlEntry]) -> None:
        if pattern.pattern_type is PatternType.LITERAL:
            key = (pattern.resource_type, pattern.name)
            if entries:
                self._literal[key] = entries
            else:
                self._literal.pop(key, None)
        else:
            prefixes = self._prefixed.setdefault(pattern.resource_type, {})
            if entries:
                prefixes[pattern.name] = entries
            else:
                prefixes.pop(pattern.name, None)
        # Any change may flip any cached decision; changes are rare, checks are not.
        self._decisions = {}

    # -- writing ACLs ---------------------------------------------------------------------------

    async def create_acls(self, bindings: Sequence[AclBinding]) -> list[str | None]:
        by_pattern: dict[ResourcePattern, list[int]] = {}
        for i, b in enumerate(bindings):
            by_pattern.setdefault(b.pattern, []).append(i)
        results: list[str | None] = [None] * len(bindings)
        async with self._lock:
            for pattern, indexes in by_pattern.items():
                add = frozenset(bindings[i].entry for i in indexes)
                try:
                    await self._update(pattern, add=add)
                except Exception as exc:  # a storage failure fails these creations, not the request
                    log.exception("storing ACLs for %s failed", pattern)
                    for i in indexes:
                        results[i] = f"Failed to create ACLs: {exc}"
        return results

    async def delete_acls(self, filters: Sequence[AclBindingFilter]) -> list[DeleteResult]:
        results = [DeleteResult([]) for _ in filters]
        async with self._lock:
            # Which entries of which resources each filter removes, from one snapshot, as Kafka.
            plan: dict[ResourcePattern, set[AccessControlEntry]] = {}
            matched: dict[ResourcePattern, list[tuple[int, AccessControlEntry]]] = {}
            for pattern, entries in list(self._all()):
                for i, f in enumerate(filters):
                    if not f.matches_pattern(pattern):
                        continue
                    for e in entries:
                        if f.matches_entry(e):
                            plan.setdefault(pattern, set()).add(e)
                            matched.setdefault(pattern, []).append((i, e))
            for pattern, remove in plan.items():
                try:
                    await self._update(pattern, remove=frozenset(remove))
                except Exception as exc:
                    log.exception("deleting ACLs of %s failed", pattern)
                    for i, _ in matched[pattern]:
                        results[i].error_code = -1
                        results[i].error_message = f"Failed to delete ACLs: {exc}"
                    continue
                for i, e in matched[pattern]:
                    results[i].deleted.append(AclBinding(pattern, e))
        return results

    async def _update(self, pattern: ResourcePattern, add: frozenset[AccessControlEntry] = frozenset(),
                      remove: frozenset[AccessControlEntry] = frozenset()) -> None:
        """Read-modify-write one ACL node with compare-and-set, then announce the change."""
        from kaflet.metadata.tree import BadVersionError, NodeExistsError, NoNodeError

        tree = self.tree
        assert tree is not None, "authorizer not started"
        path = acl_path(pattern)
        while True:
            got = await tree.get_or_none(path)
            current = parse_acls_json(got[0]) if got else frozenset()
            new = (current | add) - remove
            if new == current:
                self._set_entries(pattern, current)
                return
            try:
                if got is None:
                    await tree.create(path, acls_json(new), make_parents=True)
                elif not new:
                    await tree.delete(path, version=got[1].version)
                else:
                    await tree.set(path, acls_json(new), version=got[1].version)
            except (BadVersionError, NodeExistsError, NoNodeError):
                continue  # another writer got there first: read again
            break
        # This broker applies its own change at once, so the next request already sees it.
        self._set_entries(pattern, new)
        prefix, data = change_notification(pattern)
        await tree.create(prefix, data, sequential=True, make_parents=True)

    # -- start-up and change notifications ----------------------------------------------------

    async def start(self, tree: MetadataTree) -> None:
        """Create Kafka's ACL roots, load every ACL, then follow the change notifications."""
        self.tree = tree
        for root in (LITERAL_ACL_ROOT, EXTENDED_ACL_ROOT):
            for rt in CONCRETE_RESOURCE_TYPES:
                await tree.ensure_path(f"{root}/{rt.znode_name}")
        for changes in (LITERAL_CHANGES, EXTENDED_CHANGES):
            await tree.ensure_path(changes)
        # Notifications already there describe changes the load below includes.
        for changes in (LITERAL_CHANGES, EXTENDED_CHANGES):
            names = await tree.children(changes, watch=self._on_change)
            self._last_seq[changes] = notifications.latest_sequence(names, CHANGE_PREFIX)
        count = 0
        for root, pt in ((LITERAL_ACL_ROOT, PatternType.LITERAL), (EXTENDED_ACL_ROOT, PatternType.PREFIXED)):
            for type_node in await tree.children(root):
                found = resource_type_from_znode(type_node)
                if found is None:
                    continue
                for name in await tree.children(f"{root}/{type_node}"):
                    pattern = ResourcePattern(found, name, pt)
                    await self._reload(pattern)
                    count += len(self._entries(pattern))
        log.info("authorizer loaded %d ACLs; super users: %s; allow.everyone.if.no.acl.found=%s", count,
                 ", ".join(sorted(self.super_users)) or "none", str(self.allow_everyone_if_no_acl_found).lower())
        self._task = asyncio.create_task(self._run(), name="kaflet-acl-changes")

    async def resync(self) -> None:
        """Re-read the change notifications (re-arming their watches) after a new session."""
        self._wake.set()

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _reload(self, pattern: ResourcePattern) -> None:
        assert self.tree is not None
        got = await self.tree.get_or_none(acl_path(pattern))
        try:
            entries = parse_acls_json(got[0]) if got else frozenset()
        except ValueError as exc:
            log.warning("ignoring unreadable ACL node %s: %s", acl_path(pattern), exc)
            entries = frozenset()
        self._set_entries(pattern, entries)

    def _on_change(self, _event: WatchEvent) -> None:
        self._wake.set()

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            try:
                for changes in (LITERAL_CHANGES, EXTENDED_CHANGES):
                    await self._process(changes)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("processing ACL change notifications failed; retrying")
                await asyncio.sleep(0.5)
                self._wake.set()

    async def _process(self, changes: str) -> None:
        assert self.tree is not None
        names = await self.tree.children(changes, watch=self._on_change)
        for seq, node in notifications.pending(names, CHANGE_PREFIX, self._last_seq[changes]):
            got = await self.tree.get_or_none(f"{changes}/{node}")
            if got is not None:
                pattern = parse_change(changes, got[0])
                if pattern is None:
                    log.warning("ignoring unreadable ACL change notification %s/%s", changes, node)
                else:
                    async with self._lock:
                        await self._reload(pattern)
            self._last_seq[changes] = seq
        await notifications.purge_expired(self.tree, changes, names)




for _name in ("kafka.security.authorizer.AclAuthorizer", "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
              "kafka.security.auth.SimpleAclAuthorizer"):
    register_authorizer(_name, AclAuthorizer.from_config)
