"""Storage engines: the session each store talks to (SQLite or PostgreSQL), and what every
engine shares: the namespace marker :data:`ALL` and the ``mnemex`` logger."""

from __future__ import annotations

from typing import TYPE_CHECKING, Final, cast

if TYPE_CHECKING:
    import logging

    from mnemex.config import Settings
    from mnemex.engine.sqlite.session import SqliteSession


class _AllNamespaces:
    def __repr__(self) -> str:
        return "mnemex.ALL"


ALL: Final = _AllNamespaces()
"""Pass as ``namespace=`` to read across every namespace (search, timeline, stats, export)."""
NamespaceArg = str | _AllNamespaces | None


def resolve_namespace(own: str, namespace: NamespaceArg, *, allow_all: bool = False) -> str | None:
    """The namespace a call names (``None``: the session's ``own``; ``ALL``: ``None``, if
    allowed), cleaned."""
    from mnemex.errors import InvalidInput
    from mnemex.text import clean_namespace

    if namespace is None:
        return own
    if namespace is ALL:
        if not allow_all:
            raise InvalidInput("this operation works on one namespace; name it")
        return None
    return clean_namespace(namespace)


def logger() -> logging.Logger:
    """The ``mnemex`` logger (logging is imported when something is logged)."""
    import logging

    return logging.getLogger("mnemex")


def open_session(settings: Settings, embedder: object) -> SqliteSession:
    """The session for the store ``settings`` name: PostgreSQL for a ``postgresql://``
    URL (psycopg imported only then), else the SQLite file. Typed as SQLite's: the
    PostgreSQL session offers the part of its surface that the shared code uses."""
    if settings.db_url is not None:
        from mnemex.engine.postgres.session import PostgresSession

        return cast("SqliteSession", PostgresSession(settings, embedder=embedder))
    from mnemex.engine.sqlite.session import SqliteSession

    return SqliteSession(settings, embedder=embedder)


def holds_store(settings: Settings) -> bool:
    """Whether the place ``settings`` name already holds a mnemex store, nothing created or
    migrated: a PostgreSQL database with mnemex's schema (psycopg imported only then), or
    a SQLite file whose schema version is set."""
    if settings.db_url is not None:
        from mnemex.engine.postgres import connect, schema_version

        with connect(settings.db_url) as conn:
            return schema_version(conn) > 0
    import sqlite3

    try:
        db = sqlite3.connect(f"file:{settings.db_path}?mode=ro", uri=True)
        try:
            return bool(db.execute("PRAGMA user_version").fetchone()[0])
        finally:
            db.close()
    except sqlite3.Error:
        return False


def place_name(settings: Settings) -> str:
    """How messages name the store ``settings`` name: its file, or its URL without the
    password."""
    if settings.db_url is not None:
        from mnemex.engine.postgres.connect import redact

        return redact(settings.db_url)
    return str(settings.db_path)


def engine_of(session: object) -> str:
    """The name of a session's engine: ``SQLite`` or ``PostgreSQL``."""
    return str(getattr(session, "engine", "SQLite"))
