"""The gateway processes that pull the discovery settings, as the console lists them.

The contract (../shared/logikm-contract.md 1.5) has a gateway send nothing about itself, so a
gateway is known by the address it calls from plus the instance id it may send in
:data:`INSTANCE_HEADER` (`kaflet gateway` sends ``<host name>:<listen port>``, so several
gateways behind one NAT address stay apart); :data:`INTERVAL_HEADER` says how often it pulls.
Each pull of ``discovery/update`` is recorded, but a process writes a gateway's row at most
every :data:`WRITE_EVERY_MS` unless the version it holds changed, so gateways pulling every
second cost the database little. A gateway is stale when its last recorded pull is older than
:data:`STALE_INTERVALS` of its pull intervals (never less than that many write periods, since the
recorded time may lag the real one by one period).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from sqlalchemy import case, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from kaflet.manager.db import Database
from kaflet.manager.models import GatewayInstance

INSTANCE_HEADER = "X-Kaflet-Gateway-Instance"
INTERVAL_HEADER = "X-Kaflet-Gateway-Sync-Interval-Ms"
WRITE_EVERY_MS = 2000
STALE_INTERVALS = 3
#: The pull interval assumed for a gateway that does not say (`kaflet gateway`'s default).
DEFAULT_INTERVAL_MS = 30_000
_MAX_INTERVAL_MS = 86_400_000
_INSTANCE_CHARS = 128
#: Remembered writes kept before old ones are forgotten (one per gateway seen).
_MEMORY = 10_000


def is_stale(last_pull_ms: int, sync_interval_ms: int | None, now_ms: int) -> bool:
    """Whether a gateway whose last recorded pull was at ``last_pull_ms`` has stopped pulling."""
    interval = max(sync_interval_ms or DEFAULT_INTERVAL_MS, WRITE_EVERY_MS)
    return now_ms - last_pull_ms > STALE_INTERVALS * interval


def instance_id(header: str | None) -> str:
    """The instance id a gateway sent, cut to the column and to printable characters; "" if none."""
    if not header:
        return ""
    return "".join(c for c in header if c.isprintable())[:_INSTANCE_CHARS].strip()


def sync_interval(header: str | None) -> int | None:
    """The pull interval a gateway sent, in ms; None when absent or not a sensible number."""
    if header is None or not header.strip().isdigit():
        return None
    value = int(header.strip())
    return value if 0 < value <= _MAX_INTERVAL_MS else None


@dataclass(frozen=True, slots=True)
class Pull:
    """One recorded pull of ``discovery/update``."""

    address: str
    instance_id: str
    sync_interval_ms: int | None
    version: int
    at_ms: int


class PullRecorder:
    """Writes the gateways' pulls to ``gateway_instance``, at most every WRITE_EVERY_MS per
    gateway and process unless the version or interval it reports changed."""

    def __init__(self) -> None:
        self._written: dict[tuple[str, str], tuple[int, int, int | None]] = {}
        self._lock = threading.Lock()

    def due(self, pull: Pull) -> bool:
        """Whether ``pull`` is to be written; remembers it as written if so."""
        key = (pull.address, pull.instance_id)
        with self._lock:
            last = self._written.get(key)
            if last is not None and pull.at_ms - last[0] < WRITE_EVERY_MS and last[1:] == (
                    pull.version, pull.sync_interval_ms):
                return False
            if len(self._written) >= _MEMORY:
                oldest = sorted(self._written.items(), key=lambda item: item[1][0])[:_MEMORY // 2]
                for forget, _ in oldest:
                    del self._written[forget]
            self._written[key] = (pull.at_ms, pull.version, pull.sync_interval_ms)
            return True

    def record(self, db: Database, pull: Pull) -> None:
        """Upsert the gateway's row when due. Another process may have written a later pull of
        the same gateway meanwhile: the later pull's time and version are kept."""
        if not self.due(pull):
            return
        with db.session() as s:
            upsert(s, pull)


def upsert(s: Session, pull: Pull) -> None:
    """Insert the gateway's row, or move its last pull forward to ``pull``."""
    insert = postgresql.insert if s.get_bind().dialect.name == "postgresql" else sqlite.insert
    table = GatewayInstance.__table__
    stmt = insert(GatewayInstance).values(address=pull.address, instance_id=pull.instance_id,
                                          sync_interval_ms=pull.sync_interval_ms, version=pull.version,
                                          first_pull_ms=pull.at_ms, last_pull_ms=pull.at_ms)
    later = stmt.excluded.last_pull_ms >= table.c.last_pull_ms
    stmt = stmt.on_conflict_do_update(
        index_elements=["address", "instance_id"],
        set_={"last_pull_ms": case((later, stmt.excluded.last_pull_ms), else_=table.c.last_pull_ms),
              "version": case((later, stmt.excluded.version), else_=table.c.version),
              "sync_interval_ms": case((later, stmt.excluded.sync_interval_ms), else_=table.c.sync_interval_ms)})
    s.execute(stmt)


@dataclass(frozen=True, slots=True)
class InstanceView:
    """A gateway process as the console shows it."""

    id: int
    address: str
    instance_id: str
    sync_interval_ms: int | None
    version: int
    first_pull_ms: int
    last_pull_ms: int
    stale: bool

    def to_json(self) -> dict[str, object]:
        return {"id": self.id, "address": self.address, "instance_id": self.instance_id, "sync_interval_ms": self.sync_interval_ms,
                "version": self.version, "first_pull_ms": self.first_pull_ms, "last_pull_ms": self.last_pull_ms,
                "stale": self.stale}


def list_instances(s: Session, now_ms: int) -> list[InstanceView]:
    """Every gateway that has pulled, the most recent pull first."""
    rows = s.scalars(select(GatewayInstance).order_by(GatewayInstance.last_pull_ms.desc(), GatewayInstance.id))
    return [InstanceView(r.id, r.address, r.instance_id, r.sync_interval_ms, r.version, r.first_pull_ms, r.last_pull_ms,
                         is_stale(r.last_pull_ms, r.sync_interval_ms, now_ms)) for r in rows]
