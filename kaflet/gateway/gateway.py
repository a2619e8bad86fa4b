"""The gateway of one broker: its management-service client and synchronized caches, started and
stopped with the broker (which builds it only when ``gateway.url`` is set).

Also the check of ``cluster.id`` (Logi-Kafka's numeric cluster id, unrelated to Kafka's
generated cluster id in ``/cluster/id`` and meta.properties) against the one the cluster has
stored, which ``cluster.id.update`` overrides.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kaflet.gateway.caches import AclCache, PartitionCache, UserCache, build_caches
from kaflet.gateway.client import HttpManagementService
from kaflet.gateway.model import AclRow, GatewayUser, Operation, UserRow
from kaflet.metadata.tree import MetadataTree, NodeExistsError

log = logging.getLogger("kaflet.gateway")

#: Where kaflet keeps the cluster's numeric Logi-Kafka id (Logi-Kafka overwrites Kafka's
#: ``/cluster/id`` with it; kaflet keeps Kafka's and stores this one beside it).
GATEWAY_CLUSTER_ID_PATH = "/gateway/cluster_id"


class ClusterIdMismatchError(Exception):
    """The configured cluster.id differs from the stored one and cluster.id.update is false."""


@dataclass(frozen=True, slots=True)
class GatewaySettings:
    """The broker settings the gateway runs on (server.properties names in from_config)."""

    url: str
    cluster_id: int
    sync_interval_ms: int = 60_000
    check_interval_ms: int = 4 * 3600 * 1000
    request_timeout_ms: int = 10_000

    @classmethod
    def from_config(cls, values: Mapping[str, Any]) -> GatewaySettings:
        """From the broker's typed config values."""
        return cls(values["gateway.url"], values["cluster.id"], values["gateway.sync.interval.ms"],
                   values["gateway.check.interval.ms"], values["gateway.request.timeout.ms"])


class Gateway:
    """The management service and the user, ACL and disabled-partition views of one broker."""

    def __init__(self, settings: GatewaySettings, tree: MetadataTree, broker_id: int, *,
                 default_users: Iterable[GatewayUser] = (),
                 default_acls: Iterable[tuple[str, str, int]] = ()) -> None:
        self.settings = settings
        self.service = HttpManagementService(settings.url, settings.request_timeout_ms / 1000)
        users: UserCache
        acls: AclCache
        partitions: PartitionCache
        users, acls, partitions = build_caches(
            tree, self.service, broker_id=broker_id, cluster_id=settings.cluster_id,
            default_users=[UserRow(u, Operation.CREATE, 0) for u in default_users],
            default_acls=[AclRow(t, u, a, Operation.CREATE, 0) for t, u, a in default_acls],
            sync_interval_ms=settings.sync_interval_ms, check_interval_ms=settings.check_interval_ms)
        self.users = users
        self.acls = acls
        self.partitions = partitions
        self._started: list[UserCache | AclCache | PartitionCache] = []

    @property
    def caches(self) -> tuple[UserCache, AclCache, PartitionCache]:
        return self.users, self.acls, self.partitions

    async def start(self) -> None:
        """Register and load every cache (static defaults where the service does not answer)."""
        # Together: a service that hangs delays the start by one request timeout, not three.
        caches: list[UserCache | AclCache | PartitionCache] = [self.users, self.acls, self.partitions]
        results = await asyncio.gather(*(cache.start() for cache in caches), return_exceptions=True)
        self._started = [c for c, r in zip(caches, results, strict=True) if r is None]
        for result in results:
            if isinstance(result, BaseException):
                raise result
        down = [c.name for c in self.caches if not c.loaded]
        log.info("gateway on %s (cluster.id %d): %s", self.settings.url, self.settings.cluster_id,
                 "all caches loaded" if not down else
                 f"not loaded from the management service, serving static defaults for {', '.join(down)}")

    async def stop(self) -> None:
        """Stop the caches and close the HTTP client."""
        for cache in reversed(self._started):
            await cache.stop()
        self._started.clear()
        await self.service.close()

    async def resync(self) -> None:
        """After a new ZooKeeper session: register again and catch up with the commits."""
        for cache in self._started:
            await cache.resync()


async def check_cluster_id(tree: MetadataTree, configured: int, allow_update: bool) -> None:
    """Store ``cluster.id`` on first use; refuse a different one unless ``cluster.id.update``
    (then the stored one is replaced). Raises ClusterIdMismatchError."""
    data = str(configured).encode()
    found = await tree.get_or_none(GATEWAY_CLUSTER_ID_PATH)
    if found is None:
        try:
            await tree.create(GATEWAY_CLUSTER_ID_PATH, data, make_parents=True)
            return
        except NodeExistsError:
            found = await tree.get_or_none(GATEWAY_CLUSTER_ID_PATH)
            if found is None:
                raise ClusterIdMismatchError(f"{GATEWAY_CLUSTER_ID_PATH} vanished while cluster.id was stored") from None
    stored = (found[0] or b"").decode("ascii", "replace").strip()
    if stored == str(configured):
        return
    if not allow_update:
        raise ClusterIdMismatchError(
            f"cluster.id {configured} does not match the cluster id {stored or '(empty)'} stored in "
            f"{GATEWAY_CLUSTER_ID_PATH}; set cluster.id.update=true to replace it")
    await tree.set(GATEWAY_CLUSTER_ID_PATH, data)
    log.warning("cluster.id changed from %s to %d (cluster.id.update=true)", stored, configured)
