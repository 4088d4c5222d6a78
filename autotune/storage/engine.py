"""How autotune reaches a database: one engine per URL (SQLite in WAL mode, waiting out a
writer), and a database error as one line."""

from __future__ import annotations

from typing import Any

from sqlalchemy import create_engine, event
from sqlalchemy.engine import Engine, make_url


def connect(url: str) -> Engine:
    """An engine for ``url``. SQLite: write-ahead log (readers never block the writer) and a
    60 s wait for another process's write lock; others: no pings (a lost connection fails,
    and is retried by :mod:`.retry`)."""
    if make_url(url).get_backend_name() != "sqlite":
        return create_engine(url)
    engine = create_engine(url, connect_args={"timeout": 60})

    @event.listens_for(engine, "connect")
    def _wal(dbapi_connection: Any, _: Any) -> None:
        dbapi_connection.execute("PRAGMA busy_timeout=60000")
        wal(dbapi_connection)

    return engine


WAL_TRIES = 600  # 60 s of 0.1 s waits, as long as a write lock is waited for


def wal(dbapi_connection: Any) -> None:
    """Put a SQLite database in write-ahead-log mode. Switching a new database's journal needs
    its lock, and SQLite answers "database is locked" at once, without its busy wait, while
    other processes open the same new database: so try again, as long as a write waits."""
    import sqlite3
    import time

    for attempt in range(WAL_TRIES):
        try:
            dbapi_connection.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or attempt == WAL_TRIES - 1:
                raise
            time.sleep(0.1)


def line(exc: BaseException) -> str:
    """The first line of a database error (the driver's own message where there is one)."""
    text = str(getattr(exc, "orig", None) or exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
