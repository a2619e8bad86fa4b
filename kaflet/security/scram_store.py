"""SCRAM credentials in the metadata tree at /config/users/<sanitized user> (Kafka's layout).

Credentials are read at authentication time, so a user added or changed through
AlterUserScramCredentials (on this broker or, later, any broker of the cluster) logs in at once.
Writes keep the node's other keys (quotas) and announce the change under /config/changes.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from kaflet.metadata import zkdata
from kaflet.metadata.tree import BadVersionError, MetadataTree, NodeExistsError, NoNodeError
from kaflet.protocol.errors import ErrorCode
from kaflet.security import scram

log = logging.getLogger("kaflet.security")

USERS = "users"


@dataclass(frozen=True, slots=True)
class Upsertion:
    user: str
    mechanism: int
    iterations: int
    salt: bytes
    salted_password: bytes


@dataclass(frozen=True, slots=True)
class Deletion:
    user: str
    mechanism: int


@dataclass(slots=True)
class UserResult:
    """One user's outcome of Alter/DescribeUserScramCredentials."""

    user: str
    error_code: int = 0
    error_message: str | None = None
    credentials: list[tuple[int, int]] | None = None  # (mechanism type, iterations)


class ScramCredentialStore:
    """Reads and writes SCRAM credentials through the metadata tree."""

    def __init__(self, tree: MetadataTree) -> None:
        self.tree = tree

    def _path(self, user: str) -> str:
        return zkdata.config_entity_path(USERS, zkdata.sanitize(user))

    async def _configs(self, user: str) -> tuple[dict[str, str], int | None]:
        got = await self.tree.get_or_none(self._path(user))
        if got is None:
            return {}, None
        return zkdata.parse_entity_config(got[0]), got[1].version

    async def lookup(self, user: str, mech: scram.ScramMechanism) -> scram.ScramCredential | None:
        """The user's credential for `mech`, or None (unknown user, or unreadable credential)."""
        configs, _ = await self._configs(user)
        value = configs.get(mech.name)
        if value is None:
            return None
        try:
            return scram.ScramCredential.from_config(value)
        except ValueError as exc:
            log.warning("ignoring the stored %s credential of a user: %s", mech.name, exc)
            return None

    async def describe(self, users: Sequence[str] | None) -> list[UserResult]:
        """Kafka's DescribeUserScramCredentials: every user with credentials, or the ones asked for."""
        if not users:
            out = []
            try:
                names = await self.tree.children(f"{zkdata.CONFIG_PATH}/{USERS}")
            except NoNodeError:
                names = []
            for sanitized in names:
                user = zkdata.desanitize(sanitized)
                configs, _ = await self._configs(user)
                creds = _credential_infos(configs)
                if creds:
                    out.append(UserResult(user, credentials=creds))
            return sorted(out, key=lambda r: r.user)
        results: dict[str, UserResult] = {}
        for user in dict.fromkeys(users):
            if not user:
                results[user] = UserResult(user, ErrorCode.RESOURCE_NOT_FOUND, "Username must not be empty")
            elif users.count(user) > 1:
                results[user] = UserResult(user, ErrorCode.DUPLICATE_RESOURCE,
                                           f"Cannot describe SCRAM credentials for the same user twice in a single request: {user}")
            else:
                configs, _ = await self._configs(user)
                creds = _credential_infos(configs)
                results[user] = (UserResult(user, credentials=creds) if creds else UserResult(
                    user, ErrorCode.RESOURCE_NOT_FOUND, f"Attempt to describe a user credential that does not exist: {user}"))
        return list(results.values())

    async def alter(self, upsertions: Sequence[Upsertion], deletions: Sequence[Deletion]) -> list[UserResult]:
        """Kafka's AlterUserScramCredentials checks, then one write per valid user."""
        errors: dict[str, UserResult] = {}
        for d in deletions:
            if not d.user:
                errors[d.user] = UserResult(d.user, ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty")
            elif d.mechanism not in scram.BY_TYPE:
                errors[d.user] = UserResult(d.user, ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism")
        for u in upsertions:
            if not u.user:
                errors[u.user] = UserResult(u.user, ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty")
            elif u.mechanism not in scram.BY_TYPE:
                errors[u.user] = UserResult(u.user, ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism")
            elif u.iterations > scram.MAX_ITERATIONS:
                errors[u.user] = UserResult(u.user, ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too many iterations")
            elif u.iterations < scram.BY_TYPE[u.mechanism].min_iterations:
                errors[u.user] = UserResult(u.user, ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too few iterations")
        pairs = [(u.user, u.mechanism) for u in upsertions if u.user not in errors]
        pairs += [(d.user, d.mechanism) for d in deletions if d.user not in errors]
        for user, mech in pairs:
            if pairs.count((user, mech)) > 1:
                errors[user] = UserResult(user, ErrorCode.DUPLICATE_RESOURCE,
                                          "A user credential cannot be altered twice in the same request")
        results = list(errors.values())
        for user in dict.fromkeys(p[0] for p in pairs if p[0] not in errors):
            results.append(await self._alter_user(user, [u for u in upsertions if u.user == user],
                                                  [d for d in deletions if d.user == user]))
        return results

    async def _alter_user(self, user: str, ups: list[Upsertion], dels: list[Deletion]) -> UserResult:
        for _attempt in range(10):
            configs, version = await self._configs(user)
            for d in dels:
                if scram.BY_TYPE[d.mechanism].name not in configs:
                    return UserResult(user, ErrorCode.RESOURCE_NOT_FOUND,
                                      "Attempt to delete a user credential that does not exist")
            for d in dels:
                configs.pop(scram.BY_TYPE[d.mechanism].name, None)
            for u in ups:
                mech = scram.BY_TYPE[u.mechanism]
                cred = scram.credential_from_salted_password(mech, u.salt, u.salted_password, u.iterations)
                configs[mech.name] = cred.to_config()
            data = zkdata.entity_config_json(configs)
            try:
                if version is None:
                    await self.tree.create(self._path(user), data, make_parents=True)
                else:
                    await self.tree.set(self._path(user), data, version)
            except (BadVersionError, NodeExistsError, NoNodeError):
                continue  # a concurrent writer: read again and re-apply
            await self.tree.create(zkdata.config_change_prefix(),
                                   zkdata.config_change_json(f"{USERS}/{zkdata.sanitize(user)}"),
                                   sequential=True, make_parents=True)
            log.info("SCRAM credentials of user %s altered (%s)", user, ", ".join(
                [f"set {scram.BY_TYPE[u.mechanism].name}" for u in ups]
                + [f"deleted {scram.BY_TYPE[d.mechanism].name}" for d in dels]))
            return UserResult(user)
        return UserResult(user, ErrorCode.UNKNOWN_SERVER_ERROR, "concurrent updates of the user's configs")


def _credential_infos(configs: dict[str, str]) -> list[tuple[int, int]]:
    out = []
    for mech in scram.MECHANISMS.values():
        value = configs.get(mech.name)
        if value is None:
            continue
        try:
            out.append((mech.type_id, scram.ScramCredential.from_config(value).iterations))
        except ValueError:
            continue
    return out
