"""The JSON API of clusters (``/api/v1/clusters``): what the console's cluster pages show and the
operator's operations on topics and groups, for scripts.

Reads come from the cluster observer's last snapshot, as the pages do (a topic's configs and a
group's lag are asked live). Operations go through the same functions as the console's forms, so
they are checked, audited and refused alike; unsafe calls need the ``X-CSRF-Token`` header that
``/api/v1/login`` returns.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query, Request
from pydantic import Field
from sqlalchemy import select

from kaflet.manager import services as svc
from kaflet.manager.api import Me, Strict
from kaflet.manager.cluster_console import (
    MAX_PARTITIONS,
    do_alter_configs,
    do_create_topic,
    do_delete_topic,
    do_expand_topic,
    do_reset_offsets,
    observer_of,
    run,
    snapshot_of,
    topic_connections,
)
from kaflet.manager.clusters import TopicInfo
from kaflet.manager.console import state_of
from kaflet.manager.models import Cluster
from kaflet.manager.sampling import ClusterObserver, ClusterSnapshot
from kaflet.manager.web import check_csrf

router = APIRouter(prefix="/api/v1/clusters", dependencies=[Depends(check_csrf)])

ConfigName = Annotated[str, Field(max_length=255)]


class NewCluster(Strict):
    name: str = Field(max_length=128)
    bootstrap_servers: str = Field(max_length=1024)
    cluster_id: int | None = None
    zookeeper_connect: str | None = Field(default=None, max_length=1024)
    security_protocol: str = Field(default="PLAINTEXT", max_length=32)
    sasl_mechanism: str | None = Field(default=None, max_length=32)
    sasl_username: str | None = Field(default=None, max_length=255)
    sasl_password: str | None = None


class NewTopic(Strict):
    name: str = Field(max_length=249)
    partitions: int = Field(ge=1, le=MAX_PARTITIONS)
    #: -1: the cluster's default.replication.factor.
    replication_factor: int = Field(default=-1, ge=-1, le=32767)
    configs: dict[ConfigName, str] = Field(default_factory=dict, max_length=200)


class Expansion(Strict):
    partitions: int = Field(ge=1, le=MAX_PARTITIONS)


class ConfigChange(Strict):
    set: dict[ConfigName, str] = Field(default_factory=dict, max_length=200)
    reset: list[ConfigName] = Field(default_factory=list, max_length=200)


class OffsetReset(Strict):
    topic: str = Field(max_length=249)
    to: Literal["earliest", "latest", "timestamp", "offset"]
    #: The offset (``offset``) or the time (``timestamp``: ms since the epoch or an ISO date-time).
    value: str = Field(default="", max_length=64)
    dry_run: bool = True


def cluster_json(cluster: Cluster) -> dict[str, Any]:
    # The SASL password never leaves the service.
    return {"id": cluster.id, "name": cluster.name, "bootstrap_servers": cluster.bootstrap_servers,
            "zookeeper_connect": cluster.zookeeper_connect, "security_protocol": cluster.security_protocol,
            "sasl_mechanism": cluster.sasl_mechanism, "sasl_username": cluster.sasl_username,
            "created_ms": cluster.created_ms}


def topic_summary(t: TopicInfo, observer: ClusterObserver) -> dict[str, Any]:
    return {"name": t.name, "internal": t.internal, "partitions": t.partition_count,
            "replication_factor": t.replication_factor, "under_replicated": t.under_replicated,
            "offline": t.offline, "size_bytes": t.size_bytes, "messages_per_s": observer.rates.latest(t.name)}


def _snapshot(observer: ClusterObserver, cluster_id: int) -> ClusterSnapshot:
    snap = snapshot_of(observer)
    if snap is None:
        raise svc.Unavailable(f"cluster {cluster_id} has not been sampled yet: {observer.last_error or 'try again'}")
    return snap


@router.get("")
def list_clusters(request: Request, me: Me) -> Any:
    with state_of(request).db.session() as s:
        return [cluster_json(c) for c in s.scalars(select(Cluster).order_by(Cluster.id))]


@router.post("", status_code=201)
def register_cluster(request: Request, me: Me, body: NewCluster) -> Any:
    state = state_of(request)
    with state.db.session() as s:
        cluster = svc.register_cluster(s, me, state.box, **body.model_dump())
        state.observers.observe(cluster.id, svc.cluster_access(cluster, state.box))
        return cluster_json(cluster)


@router.delete("/{cluster_id}", status_code=204)
def delete_cluster(request: Request, me: Me, cluster_id: int) -> None:
    state = state_of(request)
    with state.db.session() as s:
        svc.delete_cluster(s, me, cluster_id)
    state.observers.forget(cluster_id)


@router.get("/{cluster_id}")
def cluster_detail(request: Request, me: Me, cluster_id: int) -> Any:
    """Brokers, topics and groups as of the observer's last round (``sampled_at``, seconds since
    the epoch)."""
    cluster, observer = observer_of(request, cluster_id)
    snap = _snapshot(observer, cluster_id)
    load = snap.broker_load()
    return {**cluster_json(cluster), "sampled_at": snap.taken_at, "kafka_cluster_id": snap.overview.cluster_id,
            "controller": snap.overview.controller_id, "sizes_unavailable": snap.sizes_unavailable,
            "brokers": [{**asdict(b), "replicas": load.get(b.id, (0, 0))[0], "leaders": load.get(b.id, (0, 0))[1]}
                        for b in snap.overview.brokers],
            "topics": [topic_summary(t, observer) for t in sorted(snap.topics.values(), key=lambda t: t.name)],
            "groups": [{**asdict(g), "members": snap.members.get(g.group_id), "lag": snap.group_lag(g.group_id)}
                       for g in snap.groups]}


@router.get("/{cluster_id}/topics/{topic}")
def topic_detail(request: Request, me: Me, cluster_id: int, topic: str,
                 configs: Annotated[bool, Query()] = True) -> Any:
    """A topic's partitions, groups, live clients and (unless ``configs=false``) its configs."""
    cluster, observer = observer_of(request, cluster_id)
    snap = _snapshot(observer, cluster_id)
    info = snap.topics.get(topic)
    if info is None:
        raise svc.NotFound(f"cluster {cluster_id} has no topic {topic!r} (as of its last sample)")
    out: dict[str, Any] = {
        **topic_summary(info, observer),
        "partition_list": [{**asdict(p), "under_replicated": p.under_replicated,
                            "log_end_offset": snap.end_offsets.get((topic, p.partition))} for p in info.partitions],
        "groups": snap.groups_of_topic(topic),
        "connections": [asdict(c) for c in topic_connections(request, cluster_id, topic, snap)],
        "rate_series": observer.rates.series(topic),
    }
    if configs:
        out["configs"] = [asdict(c) for c in run("reading the topic's configs", observer.client.topic_configs, topic)]
    return out


@router.get("/{cluster_id}/groups/{group_id}")
def group_detail(request: Request, me: Me, cluster_id: int, group_id: str) -> Any:
    """A group's state, members and lag per partition, asked live."""
    cluster, observer = observer_of(request, cluster_id)
    group = run("describing the group", observer.client.group, group_id)
    if group.state == "Dead" and not group.partitions:
        raise svc.NotFound(f"cluster {cluster_id} has no consumer group {group_id!r}")
    return {**asdict(group), "total_lag": group.total_lag,
            "partitions": [{**asdict(p), "lag": p.lag} for p in group.partitions]}


@router.post("/{cluster_id}/topics", status_code=201)
def create_topic(request: Request, me: Me, cluster_id: int, body: NewTopic) -> Any:
    topic = do_create_topic(request, me, cluster_id, body.name, body.partitions, body.replication_factor,
                            body.configs)
    return {"name": topic, "partitions": body.partitions, "replication_factor": body.replication_factor}


@router.post("/{cluster_id}/topics/{topic}/partitions")
def expand_topic(request: Request, me: Me, cluster_id: int, topic: str, body: Expansion) -> Any:
    do_expand_topic(request, me, cluster_id, topic, body.partitions)
    return {"name": topic, "partitions": body.partitions}


@router.delete("/{cluster_id}/topics/{topic}", status_code=204)
def delete_topic(request: Request, me: Me, cluster_id: int, topic: str,
                 confirm: Annotated[str, Query(max_length=249)] = "") -> None:
    """``?confirm=<the topic's name>``, as the console asks for the name to be typed."""
    do_delete_topic(request, me, cluster_id, topic, confirm)


@router.patch("/{cluster_id}/topics/{topic}/configs")
def alter_configs(request: Request, me: Me, cluster_id: int, topic: str, body: ConfigChange) -> Any:
    do_alter_configs(request, me, cluster_id, topic, dict(body.set), list(body.reset))
    return {"set": body.set, "reset": body.reset}


@router.post("/{cluster_id}/groups/{group_id}/reset")
def reset_offsets(request: Request, me: Me, cluster_id: int, group_id: str, body: OffsetReset) -> Any:
    """Without ``"dry_run": false`` only computes the new offsets."""
    _, topic, changes = do_reset_offsets(request, me, cluster_id, group_id, body.topic, body.to, body.value,
                                         body.dry_run)
    return {"group_id": group_id, "topic": topic, "dry_run": body.dry_run,
            "offsets": [asdict(c) for c in changes]}
