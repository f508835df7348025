"""Opening the database: WAL, busy timeout, foreign keys, and error translation."""

from __future__ import annotations

import contextlib
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

from mnemex.errors import StoreError, StoreLocked

_LOCKED = ("database is locked", "database is busy", "database table is locked")


def connect(path: Path, *, busy_timeout: float) -> sqlite3.Connection:
    """Open (creating if needed) the store file with mnemex's connection settings.

    The connection is in autocommit mode: every write goes through
    :func:`write_transaction`, every multi-statement read through
    :func:`read_transaction`.
    """
    if str(path) != ":memory:":
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"cannot create the folder for the store {path}: {exc}") from None
    try:
        conn = sqlite3.connect(
            str(path),
            timeout=busy_timeout,
            isolation_level=None,
            check_same_thread=False,
            cached_statements=256,
        )
    except sqlite3.Error as exc:
        raise StoreError(f"cannot open the store {path}: {exc}") from None
    try:
        conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}")
        with translate_errors(path, busy_timeout):
            mode = _enable_wal(conn, busy_timeout)
        if str(path) != ":memory:" and str(mode).lower() != "wal":
            raise StoreError(f"cannot switch {path} to WAL journal mode (got {mode!r})")
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute("PRAGMA foreign_keys = ON")
        conn.execute("PRAGMA temp_store = MEMORY")
        conn.execute("PRAGMA cache_size = -65536")
        conn.execute("PRAGMA mmap_size = 268435456")
    except BaseException:
        conn.close()
        raise
    return conn


def _enable_wal(conn: sqlite3.Connection, busy_timeout: float) -> str:
    """Switch to WAL, retrying: two processes creating a store at once can make
    SQLite refuse the switch without calling the busy handler (deadlock avoidance)."""
    deadline = time.monotonic() + busy_timeout
    delay = 0.005
    while True:
        try:
            return str(conn.execute("PRAGMA journal_mode = WAL").fetchone()[0])
        except sqlite3.OperationalError as exc:
            if not any(m in str(exc) for m in _LOCKED) or time.monotonic() >= deadline:
                raise
            time.sleep(delay)
            delay = min(delay * 2, 0.1)


@contextlib.contextmanager
def translate_errors(path: Path, busy_timeout: float) -> Iterator[None]:
    """Turn SQLite's lock and corruption errors into mnemex errors with a next step."""
    try:
        yield
    except sqlite3.OperationalError as exc:
        message = str(exc)
        if any(m in message for m in _LOCKED):
            raise StoreLocked(
                f"the store {path} is locked by another process (waited {busy_timeout:g} s); "
                "retry, or raise busy_timeout (MNEMEX_BUSY_TIMEOUT)"
            ) from None
        if "disk I/O error" in message or "unable to open" in message:
            raise StoreError(f"cannot read or write the store {path}: {message}") from None
        raise
    except sqlite3.DatabaseError as exc:
        if isinstance(exc, sqlite3.IntegrityError | sqlite3.ProgrammingError):
            raise
        message = str(exc)
        if "not a database" in message or "malformed" in message:
            raise StoreError(
                f"{path} is not a usable mnemex store ({message}); "
                "point --db at another file or restore a backup"
            ) from None
        raise


@contextlib.contextmanager
def write_transaction(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """``BEGIN IMMEDIATE`` ... ``COMMIT``: all or nothing, waiting for the write lock."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    else:
        conn.execute("COMMIT")


@contextlib.contextmanager
def read_transaction(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """A read snapshot across several statements (WAL readers never block writers)."""
    if conn.in_transaction:
        yield conn
        return
    conn.execute("BEGIN")
    try:
        yield conn
    finally:
        if conn.in_transaction:
            conn.execute("COMMIT")
