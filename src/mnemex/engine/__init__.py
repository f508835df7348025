"""Storage engines: the session each store talks to (SQLite today), and what every
engine shares: the namespace marker :data:`ALL` and the ``mnemex`` logger."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final, TypeVar, cast

if TYPE_CHECKING:
    import logging

    from mnemex.config import Settings
    from mnemex.engine.sqlite import SqliteSession

F = TypeVar("F", bound=Callable[..., Any])


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
    PostgreSQL session offers the part of its surface that the shared code uses, and
    the operations it lacks are refused before they reach it (:func:`sqlite_only`)."""
    if settings.db_url is not None:
        from mnemex.engine.postgres.session import PostgresSession

        return cast("SqliteSession", PostgresSession(settings, embedder=embedder))
    from mnemex.engine.sqlite import SqliteSession

    return SqliteSession(settings, embedder=embedder)


def engine_of(session: object) -> str:
    """The name of a session's engine: ``SQLite`` or ``PostgreSQL``."""
    return str(getattr(session, "engine", "SQLite"))


def sqlite_only(feature: str) -> Callable[[F], F]:
    """A :class:`~mnemex.Store` method that only the SQLite engine offers yet: on another
    engine it raises :class:`~mnemex.errors.Unsupported` naming ``feature``."""

    def wrap(method: F) -> F:
        @functools.wraps(method)
        def run(self: Any, *args: Any, **kwargs: Any) -> Any:
            engine = engine_of(self.session)
            if engine != "SQLite":
                from mnemex.errors import Unsupported

                raise Unsupported(feature, engine)
            return method(self, *args, **kwargs)

        return cast(F, run)

    return wrap
