"""The console's cluster pages: a cluster (brokers, topics, groups), a topic (partitions, configs,
message rate chart, groups, live connections) and a group (members, lag, offset reset), plus the
operator's topic operations.

Pages read the snapshot the cluster's background observer (sampling.ObserverPool) took, so a
page view costs no request to the cluster however many topics it holds. Only what an operation
needs is asked live: a topic's configs (the form that changes them), a group's members and lag
(the form that resets its offsets) and the operations themselves. Every change is audited.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Form, Request
from fastapi.responses import HTMLResponse, Response

from kaflet.manager import services as svc
from kaflet.manager.charts import line_chart
from kaflet.manager.clusters import (
    INTERNAL_TOPICS,
    ClusterError,
    OffsetChange,
    TopicConnection,
    connections_by_topic,
    now_ms,
)
from kaflet.manager.console import Me, see_other, state_of
from kaflet.manager.models import Account, Cluster, Role
from kaflet.manager.sampling import ClusterObserver, ClusterSnapshot
from kaflet.manager.state import ManagerState
from kaflet.manager.web import check_csrf, render

router = APIRouter(dependencies=[Depends(check_csrf)])

#: How long a page waits for a just-started observer's first round before saying it has none.
FIRST_ROUND_WAIT_S = 3.0
#: Kafka's own bound on a topic's partitions is the int32 count; more than this is a typo.
MAX_PARTITIONS = 100_000
RESET_TARGETS = ("earliest", "latest", "timestamp", "offset")

#: Kafka errors that mean the request was wrong (400), names an absent thing (404) or clashes (409).
_BAD_REQUEST = {"INVALID_CONFIG", "INVALID_PARTITIONS", "INVALID_REPLICATION_FACTOR", "INVALID_TOPIC_EXCEPTION",
                "INVALID_REQUEST", "POLICY_VIOLATION", "INVALID_REPLICA_ASSIGNMENT", "INVALID_COMMIT_OFFSET_SIZE",
                "INVALID_GROUP_ID"}
_NOT_FOUND = {"UNKNOWN_TOPIC_OR_PART", "GROUP_ID_NOT_FOUND", "_UNKNOWN_TOPIC", "_UNKNOWN_PARTITION"}
_CONFLICT = {"TOPIC_ALREADY_EXISTS", "GROUP_NOT_EMPTY", "NON_EMPTY_GROUP", "TOPIC_DELETION_DISABLED"}


class ClusterFailed(svc.ServiceError):
    """The cluster refused or could not do what was asked; the message carries Kafka's error."""

    def __init__(self, exc: ClusterError, doing: str) -> None:
        if exc.code in _BAD_REQUEST:
            self.status = 400
        elif exc.code in _NOT_FOUND:
            self.status = 404
        elif exc.code in _CONFLICT:
            self.status = 409
        else:
            self.status = 502
        super().__init__(f"{doing} failed: {exc}")


def observe_all(state: ManagerState) -> None:
    """Observe exactly the registered clusters: start observers for new ones, stop those of
    clusters forgotten (at the service's start, then every sample interval, as another manager
    process on the database may have registered or forgotten one)."""
    from sqlalchemy import select

    with state.db.session() as s:
        registered = {cluster.id: svc.cluster_access(cluster, state.box) for cluster in s.scalars(select(Cluster))}
    for cluster_id, access in registered.items():
        state.observers.observe(cluster_id, access)
    for key in state.observers.keys() - registered.keys():
        state.observers.forget(key)


def observer_of(request: Request, cluster_id: int) -> tuple[Cluster, ClusterObserver]:
    """The cluster (404 when not registered) and its running observer."""
    state = state_of(request)
    with state.db.session() as s:
        cluster = svc.get_cluster(s, cluster_id)
        s.expunge(cluster)
    return cluster, state.observers.observe(cluster.id, svc.cluster_access(cluster, state.box))


def snapshot_of(observer: ClusterObserver) -> ClusterSnapshot | None:
    snap = observer.snapshot()
    if snap is None:
        observer.wait_for_rounds(1, FIRST_ROUND_WAIT_S)
        snap = observer.snapshot()
    return snap


def operator(me: Account) -> bool:
    return svc.has_role(me, Role.OPERATOR)


def run(doing: str, call: Any, *args: Any, **kwargs: Any) -> Any:
    try:
        return call(*args, **kwargs)
    except ClusterError as exc:
        raise ClusterFailed(exc, doing) from exc


def audit(request: Request, me: Account, action: str, target: str, **detail: Any) -> None:
    with state_of(request).db.session() as s:
        svc.audit(s, me.username, action, target, **detail)
        s.commit()


def whole_number(text: str, what: str, low: int, high: int) -> int:
    text = (text or "").strip()
    try:
        value = int(text)
    except ValueError:
        raise svc.InvalidInput(f"{what} must be a whole number") from None
    if not low <= value <= high:
        raise svc.InvalidInput(f"{what} must be from {low} to {high}")
    return value


def parse_configs(text: str) -> dict[str, str]:
    """``name=value`` per line (or separated by commas)."""
    out: dict[str, str] = {}
    for line in text.replace(",", "\n").splitlines():
        line = line.strip()
        if not line:
            continue
        name, eq, value = line.partition("=")
        if not eq or not name.strip():
            raise svc.InvalidInput(f"config {line!r} is not name=value")
        out[name.strip()] = value.strip()
    return out


def _size(value: int | None) -> str:
    if value is None:
        return "?"
    for limit, unit in ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
        if value >= limit:
            return f"{value / limit:.1f} {unit}"
    return f"{value} B"


def _per_s(value: float | None) -> str:
    if value is None or not math.isfinite(value):
        return "-"
    return f"{value:,.1f}"


# -- pages ----------------------------------------------------------------------------------------


@router.get("/clusters/{cluster_id}", response_class=HTMLResponse)
def cluster_page(request: Request, me: Me, cluster_id: int) -> Response:
    cluster, observer = observer_of(request, cluster_id)
    snap = snapshot_of(observer)
    topics: list[dict[str, Any]] = []
    groups: list[dict[str, Any]] = []
    if snap is not None:
        for t in sorted(snap.topics.values(), key=lambda t: t.name):
            topics.append({"t": t, "size": _size(t.size_bytes), "rate": _per_s(observer.rates.latest(t.name))})
        for g in snap.groups:
            groups.append({"g": g, "members": snap.members.get(g.group_id), "lag": snap.group_lag(g.group_id)})
    return render(request, "cluster.html", cluster=cluster, snap=snap, topics=topics, groups=groups,
                  error=observer.last_error, operator=operator(me))


def topic_connections(request: Request, cluster_id: int, topic: str, snap: ClusterSnapshot | None) -> list[TopicConnection]:
    """The topic's clients the brokers reported in the last 20 minutes.

    Followers' replica fetches are reported too; they come from the other brokers' hosts. A
    lone broker has none, and producers are never replicas, so only those fetches are left out
    (a consumer on a broker's host of a multi-broker cluster is lost with them).
    """
    brokers = snap.overview.brokers if snap is not None else ()
    replica_hosts = {b.host for b in brokers if b.host} if len(brokers) > 1 else set()
    with state_of(request).db.session() as s:
        rows = [r for r in svc.live_connections(s, cluster_id=cluster_id, topic=topic)
                if not (r.type == "fetch" and r.ip in replica_hosts)]
    return connections_by_topic(rows, now_ms()).get(topic, [])


@router.get("/clusters/{cluster_id}/topics/{topic}", response_class=HTMLResponse)
def topic_page(request: Request, me: Me, cluster_id: int, topic: str) -> Response:
    cluster, observer = observer_of(request, cluster_id)
    snap = snapshot_of(observer)
    if snap is None:
        raise svc.Unavailable(f"cluster {cluster_id} has not been sampled yet: {observer.last_error or 'try again'}")
    info = snap.topics.get(topic)
    if info is None:
        raise svc.NotFound(f"cluster {cluster_id} has no topic {topic!r} (as of its last sample)")
    configs = run("reading the topic's configs", observer.client.topic_configs, topic)
    chart = line_chart({topic: observer.rates.series(topic)}, title=f"{topic}: messages in per second",
                       unit="messages/s")
    connections = topic_connections(request, cluster_id, topic, snap)
    return render(request, "topic.html", cluster=cluster, snap=snap, topic=info, configs=configs, chart=chart,
                  size=_size(info.size_bytes), part_sizes={p.partition: _size(p.size_bytes) for p in info.partitions},
                  rate=_per_s(observer.rates.latest(topic)), groups=snap.groups_of_topic(topic),
                  connections=connections, operator=operator(me))


@router.get("/clusters/{cluster_id}/groups/{group_id}", response_class=HTMLResponse)
def group_page(request: Request, me: Me, cluster_id: int, group_id: str) -> Response:
    cluster, observer = observer_of(request, cluster_id)
    group = run("describing the group", observer.client.group, group_id)
    if group.state == "Dead" and not group.partitions:
        raise svc.NotFound(f"cluster {cluster_id} has no consumer group {group_id!r}")
    return render(request, "group.html", cluster=cluster, group=group, targets=RESET_TARGETS, operator=operator(me))


# -- operations -----------------------------------------------------------------------------------


def _operator_observer(request: Request, me: Account, cluster_id: int) -> tuple[Cluster, ClusterObserver]:
    svc.require_role(me, Role.OPERATOR)
    return observer_of(request, cluster_id)


def do_create_topic(request: Request, me: Account, cluster_id: int, name: str, partitions: int,
                    replication_factor: int, settings: dict[str, str]) -> str:
    """Create a topic (operators); ``replication_factor`` -1 takes the cluster's default."""
    cluster, observer = _operator_observer(request, me, cluster_id)
    topic = svc.check_topic(name)
    count = whole_number(str(partitions), "partitions", 1, MAX_PARTITIONS)
    rf = replication_factor if replication_factor == -1 else whole_number(
        str(replication_factor), "replication factor", 1, 32767)
    run(f"creating topic {topic}", observer.client.create_topic, topic, count, rf, settings)
    audit(request, me, "topic.create", f"cluster {cluster_id} topic {topic}", partitions=count,
          replication_factor=rf, configs=settings)
    observer.refresh()
    return topic


def do_expand_topic(request: Request, me: Account, cluster_id: int, topic: str, partitions: int) -> None:
    """Raise a topic's partition count (operators)."""
    cluster, observer = _operator_observer(request, me, cluster_id)
    count = whole_number(str(partitions), "the new partition count", 1, MAX_PARTITIONS)
    run(f"expanding topic {topic}", observer.client.expand_topic, svc.check_topic(topic), count)
    audit(request, me, "topic.expand", f"cluster {cluster_id} topic {topic}", partitions=count)
    observer.refresh()


def do_delete_topic(request: Request, me: Account, cluster_id: int, topic: str, confirm: str) -> None:
    """Delete a topic (operators), confirmed by typing its name; refused while it has clients."""
    cluster, observer = _operator_observer(request, me, cluster_id)
    if topic in INTERNAL_TOPICS:
        raise svc.InvalidInput(f"{topic} is one of Kafka's internal topics: the brokers need it")
    if confirm.strip() != topic:
        raise svc.InvalidInput(f"type the name of the topic ({topic}) to confirm deleting it")
    live = topic_connections(request, cluster_id, topic, observer.snapshot())
    if live:
        # As Logi-KafkaManager: a topic in use is not deleted under its clients' feet.
        clients = ", ".join(sorted({f"{c.app_id}@{c.ip} ({c.role})" for c in live}))
        raise svc.Conflict(f"topic {topic} has clients reported in the last 20 minutes: {clients}; stop them first")
    run(f"deleting topic {topic}", observer.client.delete_topic, svc.check_topic(topic))
    audit(request, me, "topic.delete", f"cluster {cluster_id} topic {topic}")
    observer.refresh()


def do_alter_configs(request: Request, me: Account, cluster_id: int, topic: str, settings: dict[str, str],
                     defaults: list[str]) -> None:
    """Set some of a topic's configs and return others to their defaults (operators)."""
    cluster, observer = _operator_observer(request, me, cluster_id)
    if not settings and not defaults:
        raise svc.InvalidInput("name at least one config to set or to reset")
    run(f"changing the configs of {topic}", observer.client.alter_topic_configs, svc.check_topic(topic),
        settings, defaults)
    audit(request, me, "topic.configs", f"cluster {cluster_id} topic {topic}", set=settings, reset=defaults)


def do_reset_offsets(request: Request, me: Account, cluster_id: int, group_id: str, topic: str, to: str,
                     value: str, dry_run: bool) -> tuple[Cluster, str, list[OffsetChange]]:
    """Move a group's committed offsets on a topic (operators); a dry run only computes them.
    Kafka refuses to move a group's offsets while it has members; so does this."""
    cluster, observer = _operator_observer(request, me, cluster_id)
    if to not in RESET_TARGETS:
        raise svc.InvalidInput(f"reset to one of {', '.join(RESET_TARGETS)}")
    topic = svc.check_topic(topic)
    target = reset_value(to, value)
    changes: list[OffsetChange] = run(f"resetting the offsets of {group_id}", observer.client.reset_offsets,
                                      group_id, topic, to, target, dry_run=dry_run)
    if not dry_run:
        audit(request, me, "group.reset_offsets", f"cluster {cluster_id} group {group_id}", topic=topic, to=to,
              value=target, offsets={c.partition: [c.before, c.after] for c in changes})
        observer.refresh()
    return cluster, topic, changes


@router.post("/clusters/{cluster_id}/topics")
def create_topic(request: Request, me: Me, cluster_id: int, name: Annotated[str, Form(max_length=249)],
                 partitions: Annotated[str, Form(max_length=16)],
                 replication_factor: Annotated[str, Form(max_length=16)] = "",
                 configs: Annotated[str, Form(max_length=8192)] = "") -> Response:
    count = whole_number(partitions, "partitions", 1, MAX_PARTITIONS)
    rf = whole_number(replication_factor, "replication factor", 1, 32767) if replication_factor.strip() else -1
    do_create_topic(request, me, cluster_id, name, count, rf, parse_configs(configs))
    return see_other(f"/clusters/{cluster_id}")


@router.post("/clusters/{cluster_id}/topics/{topic}/partitions")
def expand_topic(request: Request, me: Me, cluster_id: int, topic: str,
                 partitions: Annotated[str, Form(max_length=16)]) -> Response:
    do_expand_topic(request, me, cluster_id, topic, whole_number(partitions, "the new partition count", 1,
                                                                 MAX_PARTITIONS))
    return see_other(f"/clusters/{cluster_id}/topics/{topic}")


@router.post("/clusters/{cluster_id}/topics/{topic}/delete")
def delete_topic(request: Request, me: Me, cluster_id: int, topic: str,
                 confirm: Annotated[str, Form(max_length=249)] = "") -> Response:
    do_delete_topic(request, me, cluster_id, topic, confirm)
    return see_other(f"/clusters/{cluster_id}")


@router.post("/clusters/{cluster_id}/topics/{topic}/configs")
def alter_configs(request: Request, me: Me, cluster_id: int, topic: str,
                  set_configs: Annotated[str, Form(max_length=8192)] = "",
                  reset: Annotated[str, Form(max_length=1024)] = "") -> Response:
    defaults = [n.strip() for n in reset.replace(",", "\n").splitlines() if n.strip()]
    do_alter_configs(request, me, cluster_id, topic, parse_configs(set_configs), defaults)
    return see_other(f"/clusters/{cluster_id}/topics/{topic}")


def reset_value(to: str, value: str) -> int | None:
    """The reset's value: an offset, or a time as ms since the epoch or an ISO date-time (UTC
    unless it names a zone)."""
    value = value.strip()
    if to in ("earliest", "latest"):
        return None
    if to == "offset":
        return whole_number(value, "the offset", 0, 2**63 - 1)
    if value.isdigit():
        return int(value)
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        raise svc.InvalidInput("the time is ms since the epoch or a date-time like 2026-01-31T12:00") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return int(when.timestamp() * 1000)


@router.post("/clusters/{cluster_id}/groups/{group_id}/reset")
def reset_offsets(request: Request, me: Me, cluster_id: int, group_id: str,
                  topic: Annotated[str, Form(max_length=249)], to: Annotated[str, Form(max_length=16)],
                  value: Annotated[str, Form(max_length=64)] = "",
                  confirm: Annotated[str, Form(max_length=8)] = "") -> Response:
    """Without ``confirm=yes`` a dry run: the changes are shown with a form that confirms them."""
    dry_run = confirm != "yes"
    cluster, topic, changes = do_reset_offsets(request, me, cluster_id, group_id, topic, to, value, dry_run)
    if dry_run:
        return render(request, "reset.html", cluster=cluster, group_id=group_id, topic=topic, to=to, value=value,
                      changes=changes)
    return see_other(f"/clusters/{cluster_id}/groups/{group_id}")
