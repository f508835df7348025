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


def engine_of(session: object) -> str:
    """The name of a session's engine: ``SQLite`` or ``PostgreSQL``."""
    return str(getattr(session, "engine", "SQLite"))
