"""The order of the brokers' change logs (``kafka_user``, ``kafka_acl``) across manager processes.

Brokers pull these rows incrementally: each pull asks for [start, end] and the next one starts
at the previous end. That is only sound if a row stamped at or before ``end`` is committed and
visible when a pull up to ``end`` reads, and if no row committed later gets such a stamp. Several
manager processes serve one database, so this is arranged in the database, not in a process:

- A writer takes the change-log lock (PostgreSQL: the transaction-scoped advisory lock
  :data:`LOCK_KEY`, exclusive; SQLite: the database's single write lock), then stamps its rows
  from ``change_log_clock``: ``max(clock now, last stamp + 1)``, strictly increasing, and commits,
  which releases the lock.
- A pull takes the lock (PostgreSQL: shared, so pulls do not wait for each other; SQLite: the
  write lock, ``BEGIN IMMEDIATE``), which waits for the writers in flight, and reads the clock.
  Until the clock is past ``end`` it lets the lock go and waits (so a writer that comes later
  stamps above ``end``); then it reads the rows.

"The clock" is one clock for every process: PostgreSQL's ``clock_timestamp()`` on its server,
the local clock for SQLite (whose processes share one machine).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

from sqlalchemy import text
from sqlalchemy.orm import Session

from kaflet.manager.db import begin_write, now_ms
from kaflet.manager.models import KafkaAcl, KafkaUser

log = logging.getLogger("kaflet.manager.changelog")

#: pg_advisory_xact_lock key of the change logs ("kaflet" and 1, a signed 64-bit integer).
LOCK_KEY = 0x6B61666C6574_0001
#: How far ahead of the clock a pull's ``end`` is waited for; beyond it (a broker whose clock is
#: that far ahead) the pull answers at once, and a row stamped later may fall before its end.
MAX_WAIT_MS = 1000


def _postgres(s: Session) -> bool:
    return s.get_bind().dialect.name == "postgresql"


def clock_ms(s: Session) -> int:
    """The clock every process stamps by: the PostgreSQL server's, else this machine's."""
    if _postgres(s):
        return int(s.scalar(text("SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint")))
    return now_ms()


def lock(s: Session) -> None:
    """Take the change-log lock for writing, held until the session's transaction ends (also
    taken by writers of other versioned rows the brokers poll, the discovery settings)."""
    # The transaction's other changes go first: once it holds the lock it waits for nobody's row
    # locks, so two writers cannot deadlock on it.
    s.flush()
    if _postgres(s):
        s.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": LOCK_KEY})
    else:
        begin_write(s)  # SQLite's one write lock (a session that has written holds it already)


def stamp(s: Session, rows: Sequence[KafkaUser | KafkaAcl]) -> None:
    """Take the change-log lock (held until the session's commit) and give ``rows`` strictly
    increasing timestamps after every row stamped before, in any process."""
    lock(s)
    # Read after the lock: a writer that waited for it must not stamp by a time from before.
    top = clock_ms(s) + len(rows) - 1
    last = s.scalar(text("UPDATE change_log_clock SET last_stamp = CASE WHEN last_stamp + :n > :top "
                         "THEN last_stamp + :n ELSE :top END WHERE id = 1 RETURNING last_stamp"),
                    {"n": len(rows), "top": top})
    if last is None:
        raise RuntimeError("the change_log_clock row is missing; run the migrations (kaflet manager does at start)")
    for offset, row in enumerate(rows):
        row.create_time = int(last) - len(rows) + 1 + offset
        s.add(row)


def _lock_shared(s: Session) -> int:
    """Take the change-log lock for reading (held until the transaction ends); the clock's time
    after it was granted."""
    if _postgres(s):
        # Shared: pulls do not wait for each other, only for writers holding it exclusively. One
        # round trip: the subquery takes the lock before the clock is read.
        return int(s.scalar(text("SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint "
                                 "FROM (SELECT pg_advisory_xact_lock_shared(:key)) AS granted"), {"key": LOCK_KEY}))
    begin_write(s)  # SQLite's write lock: waits, with the busy timeout, for the writer in flight
    return now_ms()


def settle_pull(s: Session, end: int) -> int:
    """Prepare ``s`` (a fresh session) to read the change logs up to ``end`` (0: now): take the
    lock once the clock is past ``end``, so every row stamped at or before ``end`` is committed
    and visible, and a writer coming later stamps above it. The ``end`` to read up to."""
    while True:
        now = _lock_shared(s)
        if end == 0:
            end = now
        if now > end:
            return end
        if end - now >= MAX_WAIT_MS:
            log.warning("a pull up to %d is %d ms ahead of the clock; rows stamped later may fall before its "
                        "end (synchronise the brokers' clocks with the manager's)", end, end - now)
            return end
        s.rollback()  # not holding the lock while the clock catches up
        time.sleep((end - now + 1) / 1000)
