"""Which cluster and which broker this is: the cluster id in the metadata tree, and the
broker.id configured, stored in each log dir's meta.properties or generated (Kafka's
KafkaServer.getOrGenerateClusterId and getOrGenerateBrokerId)."""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence

from kaflet.log import checkpoints
from kaflet.metadata import zkdata
from kaflet.metadata.tree import MetadataTree, NodeExistsError, NoNodeError
from kaflet.server.config import BrokerConfig

log = logging.getLogger("kaflet.broker")


class ClusterIdentityError(Exception):
    """The log dirs, the cluster and the config disagree on who this broker is; says how."""


async def cluster_id(tree: MetadataTree) -> str:
    """The cluster's id, made (a random UUID) by the first broker to start."""
    try:
        data, _ = await tree.get(zkdata.CLUSTER_ID_PATH)
        return zkdata.parse_cluster_id(data)
    except NoNodeError:
        made = zkdata.random_uuid()
        try:
            await tree.create(zkdata.CLUSTER_ID_PATH, zkdata.cluster_id_json(made), make_parents=True)
        except NodeExistsError:
            data, _ = await tree.get(zkdata.CLUSTER_ID_PATH)
            return zkdata.parse_cluster_id(data)
        return made


async def broker_id(tree: MetadataTree, cluster: str, log_dirs: Sequence[str], configured: int,
                    config: BrokerConfig) -> int:
    """The broker's id (checked against or taken from meta.properties, else generated), written
    to every log dir's meta.properties; raises ClusterIdentityError."""
    stored_ids = set()
    for d in log_dirs:
        try:
            meta = checkpoints.read_meta_properties(os.path.join(d, "meta.properties"))
        except OSError as exc:
            # The log manager takes a failing dir offline when it loads it.
            log.error("cannot read %s/meta.properties: %s", d, exc)
            continue
        if meta is None:
            continue
        if meta.get("cluster.id") and meta["cluster.id"] != cluster:
            raise ClusterIdentityError(
                f"The cluster id {cluster} does not match the cluster.id {meta['cluster.id']} stored in "
                f"{d}/meta.properties; the log directory belongs to another cluster"
            )
        if "broker.id" in meta:
            stored_ids.add(int(meta["broker.id"]))
    if len(stored_ids) > 1:
        raise ClusterIdentityError(f"log directories disagree on broker.id: {sorted(stored_ids)}")
    stored = stored_ids.pop() if stored_ids else None
    if configured >= 0:
        if stored is not None and stored != configured:
            raise ClusterIdentityError(
                f"Configured broker.id {configured} doesn't match stored broker.id {stored} in meta.properties"
            )
        chosen = configured
    elif stored is not None:
        chosen = stored
    elif config["broker.id.generation.enable"]:
        stat = await tree.set(zkdata.BROKER_SEQID_PATH, b"")
        chosen = stat.version + config["reserved.broker.max.id"]
    else:
        raise ClusterIdentityError("broker.id is not set and broker.id.generation.enable is false")
    written = 0
    for d in log_dirs:
        try:
            checkpoints.write_meta_properties(os.path.join(d, "meta.properties"),
                                              {"version": "0", "broker.id": str(chosen), "cluster.id": cluster})
            written += 1
        except OSError as exc:
            log.error("cannot write %s/meta.properties: %s", d, exc)
    if not written:
        raise ClusterIdentityError(f"cannot write meta.properties in any log directory ({', '.join(log_dirs)})")
    return chosen
