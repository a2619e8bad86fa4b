"""The database: engine, sessions, and schema migrations (Alembic, shipped in the package)."""

from __future__ import annotations

import fcntl
import time
from collections.abc import Iterator
from contextlib import contextmanager

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker

SCRIPT_LOCATION = "kaflet.manager:migrations"


def now_ms() -> int:
    """Milliseconds since the epoch."""
    return int(time.time() * 1000)


def normalize_url(url: str) -> str:
    """``postgresql://`` means psycopg 3 (SQLAlchemy's default driver for it is psycopg2)."""
    parsed = make_url(url)
    if parsed.drivername in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed.render_as_string(hide_password=False)


def make_engine(url: str) -> Engine:
    """An engine for ``url``; SQLite gets foreign keys on and a busy timeout."""
    url = normalize_url(url)
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30})

        @event.listens_for(engine, "connect")
        def _pragmas(dbapi_conn, _record):  # type: ignore[no-untyped-def]
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA foreign_keys=ON")
            cur.execute("PRAGMA journal_mode=WAL")
            cur.close()

        return engine
    # READ COMMITTED whatever the server's default: a pull's reads must see what the writers it
    # waited for (under the change-log lock) committed, not a snapshot from before the wait.
    return create_engine(url, pool_pre_ping=True, isolation_level="READ COMMITTED")


#: pg_advisory_lock key a starting process holds while it migrates and creates the first admin.
STARTUP_LOCK_KEY = 0x6B61666C6574_0002


@contextmanager
def startup_lock(engine: Engine) -> Iterator[None]:
    """Held while a starting process migrates the schema and creates the first admin, so
    processes starting together on one database do that one after the other (PostgreSQL: a
    session advisory lock, released when the process dies; SQLite: an flock on
    ``<database>.startup-lock`` beside the file)."""
    if engine.dialect.name == "postgresql":
        with engine.connect() as conn:
            conn.execute(text("SELECT pg_advisory_lock(:key)"), {"key": STARTUP_LOCK_KEY})
            conn.commit()
            try:
                yield
            finally:
                conn.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": STARTUP_LOCK_KEY})
                conn.commit()
        return
    database = engine.url.database if engine.dialect.name == "sqlite" else None
    if not database or database == ":memory:" or database.startswith("file:"):
        yield  # no file other processes could share
        return
    with open(database + ".startup-lock", "a") as lock_file:
        fcntl.flock(lock_file, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock_file, fcntl.LOCK_UN)


def begin_write(s: Session) -> None:
    """On SQLite, make the session's transaction a write transaction now (``BEGIN IMMEDIATE``,
    waiting with the busy timeout for another writer, in any process), so the reads a change
    is decided on cannot go stale before it commits. SQLite's module begins a transaction only
    at the first write; a session that has written already holds the write lock. PostgreSQL's
    callers lock the rows they read instead (SELECT ... FOR UPDATE)."""
    if s.get_bind().dialect.name != "sqlite":
        return
    dbapi = s.connection().connection.dbapi_connection
    if dbapi is not None and not dbapi.in_transaction:
        s.execute(text("BEGIN IMMEDIATE"))


def alembic_config() -> Config:
    """Alembic's config pointing at the migrations inside the package."""
    cfg = Config()
    cfg.set_main_option("script_location", SCRIPT_LOCATION)
    return cfg


def migrate(engine: Engine) -> str | None:
    """Upgrade the schema to the newest revision; the revision it was at before (None: empty)."""
    cfg = alembic_config()
    with engine.begin() as conn:
        before = MigrationContext.configure(conn).get_current_revision()
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "head")
    return before


def current_revision(engine: Engine) -> str | None:
    """The schema's revision (None before the first migration)."""
    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def head_revision() -> str | None:
    """The newest revision the package ships."""
    return ScriptDirectory.from_config(alembic_config()).get_current_head()


class Database:
    """An engine and its session factory."""

    def __init__(self, url: str) -> None:
        self.engine = make_engine(url)
        self.sessions = sessionmaker(self.engine, expire_on_commit=False)

    @contextmanager
    def session(self) -> Iterator[Session]:
        """A session committed on success, rolled back on any error."""
        with self.sessions() as s:
            try:
                yield s
                s.commit()
            except BaseException:
                s.rollback()
                raise

    def dispose(self) -> None:
        """Close every pooled connection."""
        self.engine.dispose()
