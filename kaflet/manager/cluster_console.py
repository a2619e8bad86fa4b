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
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Annotated, Any, TypeVar
from urllib.parse import urlencode

from fastapi import APIRouter, Depends, Form, Request
from fastapi.responses import HTMLResponse, Response

from kaflet.manager import services as svc
from kaflet.manager.charts import line_chart
from kaflet.manager.clusters import INTERNAL_TOPICS, ClusterError, GroupSummary, OffsetChange, TopicInfo
from kaflet.manager.console import Me, see_other, state_of
from kaflet.manager.models import Account, Cluster, Role
from kaflet.manager.sampling import ClusterObserver, ClusterSnapshot
from kaflet.manager.state import ManagerState
from kaflet.manager.topic_connections import TopicConnection, connections_by_topic, now_ms
from kaflet.manager.web import check_csrf, render, size_text

router = APIRouter(dependencies=[Depends(check_csrf)])

#: How long a page waits for a just-started observer's first round before saying it has none.
FIRST_ROUND_WAIT_S = 3.0
#: Kafka's own bound on a topic's partitions is the int32 count; more than this is a typo.
MAX_PARTITIONS = 100_000
RESET_TARGETS = ("earliest", "latest", "timestamp", "offset")
#: Rows per page of the cluster page's topic and group lists.
PAGE_ROWS = 100
#: Kafka's longest topic name; a topic filter longer than that matches nothing and is refused.
MAX_TOPIC_FILTER = 249
#: Group ids have no length limit in Kafka; a filter is still bounded (it is echoed in links).
MAX_GROUP_FILTER = 1024

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


def _per_s(value: float | None) -> str:
    if value is None or not math.isfinite(value):
        return "-"
    return f"{value:,.1f}"


# -- paging ---------------------------------------------------------------------------------------

T = TypeVar("T")


def page_number(text: str | None, what: str) -> int:
    """The page asked for (1 when not given); 400 unless a whole number from 1. A number beyond
    the last page is kept as asked: :func:`paged` shows the last page then."""
    text = (text or "").strip()
    if not text:
        return 1
    if not re.fullmatch(r"[+-]?[0-9]+", text):
        raise svc.InvalidInput(f"{what} must be a whole number from 1")
    if text.startswith("-") or text.strip("+0") == "":
        raise svc.InvalidInput(f"{what} must be a whole number from 1")
    # More digits than any page count: the last page (int() of thousands of digits is refused).
    return int(text) if len(text) <= 18 else 10**18


def name_filter(text: str | None, what: str, longest: int) -> str:
    """A substring filter, stripped; 400 when longer than ``longest`` characters."""
    text = (text or "").strip()
    if len(text) > longest:
        raise svc.InvalidInput(f"the {what} filter is {len(text)} characters long; at most {longest}")
    return text


@dataclass(frozen=True)
class Page:
    """One page of a filtered list: its rows, where they are in it and links to the others."""

    rows: list[Any]
    number: int
    pages: int
    total: int
    #: (label, href or None for the current page or a gap) for the page links.
    links: list[tuple[str, str | None]]

    @property
    def first(self) -> int:
        return (self.number - 1) * PAGE_ROWS + 1 if self.rows else 0

    @property
    def last(self) -> int:
        return self.first + len(self.rows) - 1 if self.rows else 0


def last_page_clamp(number: int, rows: int) -> int:
    """``number`` moved into the pages that ``rows`` rows fill (at least one, if empty)."""
    return min(max(1, number), max(1, math.ceil(rows / PAGE_ROWS)))


def paged(items: Sequence[T], number: int, href: Callable[[int], str]) -> Page:
    """Page ``number`` (clamped to the last) of ``items``, ``PAGE_ROWS`` a page, with links to
    the first, previous, nearby, next and last pages built by ``href``."""
    pages = max(1, math.ceil(len(items) / PAGE_ROWS))
    number = last_page_clamp(number, len(items))
    rows = list(items[(number - 1) * PAGE_ROWS:number * PAGE_ROWS])
    links: list[tuple[str, str | None]] = []
    if pages > 1:
        if number > 1:
            links.append(("previous", href(number - 1)))
        shown = sorted({1, pages, *range(max(1, number - 2), min(pages, number + 2) + 1)})
        for i, n in enumerate(shown):
            if i and n - shown[i - 1] > 1:
                links.append(("…", None))
            links.append((str(n), None if n == number else href(n)))
        if number < pages:
            links.append(("next", href(number + 1)))
    return Page(rows, number, pages, len(items), links)


# -- pages ----------------------------------------------------------------------------------------


@router.get("/clusters/{cluster_id}", response_class=HTMLResponse)
def cluster_page(request: Request, me: Me, cluster_id: int, q: str = "", page: str = "", gq: str = "",
                 gpage: str = "") -> Response:
    """Brokers, then topics and groups, each list filtered by a substring of the name (``q``,
    ``gq``, case-insensitive) and shown ``PAGE_ROWS`` a page (``page``, ``gpage``)."""
    topic_filter = name_filter(q, "topic", MAX_TOPIC_FILTER)
    group_filter = name_filter(gq, "group", MAX_GROUP_FILTER)
    topic_page, group_page = page_number(page, "page"), page_number(gpage, "gpage")
    cluster, observer = observer_of(request, cluster_id)
    snap = snapshot_of(observer)
    topic_list: list[TopicInfo] = []
    group_list: list[GroupSummary] = []
    brokers: list[dict[str, Any]] = []
    if snap is not None:
        wanted = topic_filter.casefold()
        topic_list = [t for t in sorted(snap.topics.values(), key=lambda t: t.name) if wanted in t.name.casefold()]
        wanted = group_filter.casefold()
        group_list = [g for g in snap.groups if wanted in g.group_id.casefold()]
        load, sizes = snap.broker_load(), snap.broker_sizes()
        for b in snap.overview.brokers:
            replicas, leaders = load.get(b.id, (0, 0))
            held = None if sizes is None else sizes.get(b.id)
            brokers.append({"b": b, "replicas": replicas, "leaders": leaders, "size": size_text(held), "bytes": held,
                            "log_dirs": snap.log_dirs.get(b.id, ())})
    # Links keep the other list's filter and page (as shown: past the last page is the last).
    asked = {"q": topic_filter, "page": last_page_clamp(topic_page, len(topic_list)),
             "gq": group_filter, "gpage": last_page_clamp(group_page, len(group_list))}

    def href(**changed: Any) -> str:
        query = {k: v for k, v in {**asked, **changed}.items() if v not in ("", 1)}
        return f"/clusters/{cluster_id}" + (f"?{urlencode(query)}" if query else "")

    topics = paged(topic_list, topic_page, lambda n: href(page=n))
    topics = replace(topics, rows=[{"t": t, "size": size_text(t.size_bytes), "rate": _per_s(observer.rates.latest(t.name))}
                                   for t in topics.rows])
    groups = paged(group_list, group_page, lambda n: href(gpage=n))
    if snap is not None:
        groups = replace(groups, rows=[{"g": g, "members": snap.members.get(g.group_id),
                                        "lag": snap.group_lag(g.group_id)} for g in groups.rows])
    return render(request, "cluster.html", cluster=cluster, snap=snap, brokers=brokers, topics=topics,
                  groups=groups, q=topic_filter, gq=group_filter, page=topics.number, gpage=groups.number,
                  all_topics=href(q="", page=1), all_groups=href(gq="", gpage=1),
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
    # Cached answers only: addresses not known yet are resolved in the background for the next view.
    names = state_of(request).host_names.lookup(c.ip for c in connections)
    # Per partition: its bytes over all replicas, then (broker, bytes) of each replica; None: unknown.
    sizes_known = snap.sizes_unavailable is None
    part_sizes = {p.partition: (p.size_bytes, [(r, p.replica_size(r) if sizes_known else None) for r in p.replicas])
                  for p in info.partitions}
    return render(request, "topic.html", cluster=cluster, snap=snap, topic=info, configs=configs, chart=chart,
                  size=size_text(info.size_bytes), part_sizes=part_sizes,
                  rate=_per_s(observer.rates.latest(topic)), groups=snap.groups_of_topic(topic),
                  connections=connections, names=names, operator=operator(me))


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
