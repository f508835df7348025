"""Connections to PostgreSQL: psycopg 3, imported only when a connection is made.

Connections are in autocommit mode; every write is one explicit transaction
(``with conn.transaction():``), so nothing is left open between calls. A pool
(``psycopg_pool``) serves processes that run several sessions at once.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from types import ModuleType
from typing import TYPE_CHECKING, Any

from mnemex.errors import MissingExtra, StoreError

if TYPE_CHECKING:
    import psycopg
    from psycopg_pool import ConnectionPool

APPLICATION = "mnemex"
_TYPES = False  # whether psycopg knows the types of mnemex.engine.postgres.vectors


def driver() -> ModuleType:
    """The ``psycopg`` module, or :class:`MissingExtra` naming the extra to install."""
    try:
        import psycopg
    except ImportError:
        raise MissingExtra("postgres", "the PostgreSQL engine", "psycopg") from None
    global _TYPES
    if not _TYPES:
        from mnemex.engine.postgres.vectors import register_types

        register_types(psycopg.adapters)
        _TYPES = True
    return psycopg


def connect(url: str) -> psycopg.Connection[tuple[Any, ...]]:
    """An autocommit connection to the server at ``url`` (``postgresql://...``)."""
    module = driver()
    try:
        conn: psycopg.Connection[tuple[Any, ...]] = module.connect(
            url, autocommit=True, application_name=APPLICATION
        )
    except module.OperationalError as exc:
        raise StoreError(
            f"cannot connect to PostgreSQL at {redact(url)}: {' '.join(str(exc).split())}; "
            "check that the server runs and the URL names it"
        ) from None
    return conn


def pool(url: str, *, min_size: int = 1, max_size: int = 8) -> ConnectionPool:
    """A pool of autocommit connections to ``url``, opened (call ``close()`` when done)."""
    driver()
    try:
        from psycopg_pool import ConnectionPool
    except ImportError:
        raise MissingExtra("postgres", "the PostgreSQL engine", "psycopg_pool") from None
    opened = ConnectionPool(
        url,
        min_size=min_size,
        max_size=max_size,
        kwargs={"autocommit": True, "application_name": APPLICATION},
        open=True,
    )
    return opened


@contextlib.contextmanager
def snapshot(conn: psycopg.Connection[Any]) -> Iterator[None]:
    """One read-only ``REPEATABLE READ`` transaction on an idle connection, begun in one
    command (``BEGIN ISOLATION LEVEL ... READ ONLY``: no ``SET TRANSACTION`` round trip).
    The connection's own settings are back as they were when it ends."""
    from psycopg import IsolationLevel

    conn.isolation_level, conn.read_only = IsolationLevel.REPEATABLE_READ, True
    try:
        with conn.transaction():
            yield
    finally:
        conn.isolation_level, conn.read_only = None, None


def redact(url: str) -> str:
    """``url`` without its password, for messages."""
    scheme, sep, rest = url.partition("://")
    if not sep or "@" not in rest:
        return url
    creds, _, host = rest.rpartition("@")
    user = creds.split(":", 1)[0]
    return f"{scheme}://{user}:***@{host}" if ":" in creds else url
