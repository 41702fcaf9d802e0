"""Opening the database: the default SQLite file or any SQLAlchemy URL, brought to the current schema."""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError

from pipelines.store import migrations
from pipelines.store.errors import StoreError

DB_FILE = "stepmark.db"
SQLITE_BUSY_TIMEOUT_MS = 30_000
# Execution option that marks a write transaction; on SQLite it starts with BEGIN IMMEDIATE.
WRITE = "stepmark_write"


def default_url(data_dir: str | Path) -> str:
    return f"sqlite:///{(Path(data_dir) / DB_FILE).resolve()}"


def _configure_sqlite(engine: Engine) -> None:
    """WAL (readers never block the writer), a busy timeout, foreign keys, and explicit transactions.

    pysqlite's own transaction handling starts transactions lazily and never for DDL; taking it over makes
    DDL transactional and lets writes start with BEGIN IMMEDIATE: a deferred transaction that later needs the
    write lock can fail at once with "database is locked" instead of waiting (the busy handler is not used when
    a WAL snapshot is stale), which would lose a concurrent tag.
    """

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection, _record) -> None:  # type: ignore[no-untyped-def]
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA foreign_keys = ON")
        if cursor.execute("PRAGMA journal_mode").fetchone()[0] != "memory":
            cursor.execute("PRAGMA journal_mode = WAL")
        cursor.execute("PRAGMA synchronous = NORMAL")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn) -> None:  # type: ignore[no-untyped-def]
        conn.exec_driver_sql("BEGIN IMMEDIATE" if conn.get_execution_options().get(WRITE) else "BEGIN")


def _configure_postgresql(engine: Engine) -> None:
    """JIT compilation off for stepmark's sessions: its queries are index look-ups and ranges, and PostgreSQL
    compiled the large-cost ones (a page jump's OFFSET at 1M episodes) for 240-290 ms each, more than the scan."""

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection, _record) -> None:  # type: ignore[no-untyped-def]
        with dbapi_connection.cursor() as cursor:
            cursor.execute("SET jit = off")
        dbapi_connection.commit()


def create_engine(url: str | None, data_dir: str | Path) -> Engine:
    """An engine for `url`, or for `<data_dir>/stepmark.db` when url is None (the folder is created)."""
    if url is None:
        try:
            Path(data_dir).mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"--data {data_dir}: cannot create the data directory ({exc.strerror})") from exc
        url = default_url(data_dir)
    try:
        parsed = make_url(url)
    except ArgumentError as exc:
        raise StoreError(f"--store {url!r}: not a database URL ({exc})") from exc
    if parsed.get_backend_name() == "sqlite":
        if parsed.database and parsed.database != ":memory:":
            try:
                Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise StoreError(
                    f"--store {url}: cannot create {Path(parsed.database).parent} ({exc.strerror})"
                ) from exc
        engine = sa.create_engine(parsed)
        _configure_sqlite(engine)
    else:
        try:
            engine = sa.create_engine(parsed, pool_pre_ping=True)
        except Exception as exc:  # missing driver, bad options
            raise StoreError(f"--store {parsed.render_as_string()}: cannot create engine: {exc}") from exc
        if engine.dialect.name == "postgresql":
            _configure_postgresql(engine)
    return engine


def upgrade(engine: Engine) -> tuple[int, int]:
    """Create or upgrade the schema; returns (old, new) version. Refuses newer databases."""
    try:
        with engine.execution_options(**{WRITE: True}).begin() as conn:
            return migrations.migrate(conn)
    except DBAPIError as exc:
        reason = " ".join(str(exc.orig).split())  # one line: the CLI prints errors on one line
        raise StoreError(f"cannot open database {engine.url.render_as_string()}: {reason}") from exc
