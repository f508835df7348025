"""What a session of any engine offers the code written over it (:class:`Session`), and
the part of PostgreSQL's session its own modules use besides (:class:`PostgresSurface`;
SQLite's is :class:`mnemex.engine.sqlite.surface.SqliteSurface`).

The operations of an engine take a session typed by these protocols rather than by
the session class that owns them, so that a session and its parts (its embedding
lifecycle, its check) import each other in one direction only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from datetime import datetime

    from mnemex.config import Settings
    from mnemex.embed import Embedder
    from mnemex.engine.copy import CopyTables
    from mnemex.engine.duplicates import Match
    from mnemex.engine.workspaces import WorkspaceTables
    from mnemex.index.query import Term, Token
    from mnemex.index.retrieval import Filters, LexicalPlan
    from mnemex.models import Memory
    from mnemex.progress import Progress
    from mnemex.results import EmbedReport, Stats, TimelineEntry


class Embeddings(Protocol):
    """A session's embedding lifecycle: its embedder, and giving memories vectors."""

    last_error: str | None

    @property
    def embedder(self) -> Embedder | None: ...

    def first(self, text: str) -> str: ...

    def embed(
        self, *, progress: Callable[[int], None] | None = None, force: bool = False
    ) -> EmbedReport: ...

    def reindex(
        self, *, progress: Progress | None = None, force: bool = False, prune: bool = False
    ) -> EmbedReport | None: ...

    def embed_new(
        self,
        seqs: Sequence[int],
        primed: dict[str, Any] | None = None,
        *,
        deadline: float | None = None,
        progress: Callable[[int], None] | None = None,
    ) -> EmbedReport | None: ...

    def catch_up(self, most: int) -> int: ...


class InjectionLog(Protocol):
    """An engine's statements over the injection log (a module: ``engine/*/injections.py``),
    rows in the column order of its ``COLUMNS``."""

    @property
    def MARK(self) -> str: ...

    def log(self, session: Session, row: Sequence[Any], oldest: datetime, keep: int) -> int: ...

    def read(
        self, session: Session, parts: str, params: Sequence[Any], limit: int
    ) -> list[Sequence[Any]]: ...

    def one(self, session: Session, seq: int) -> Sequence[Any] | None: ...

    def sessions(
        self, session: Session, parts: str, params: Sequence[Any], limit: int
    ) -> list[Sequence[Any]]: ...


class RelationIndex(Protocol):
    """What a search of relations reads, on one engine (``SqliteRelationIndex`` in
    :mod:`mnemex.engine.sqlite.relations`, ``PgRelationIndex`` in
    :mod:`mnemex.engine.postgres.relations`). Statistics are of every relation, as
    FTS5's ``bm25()`` has them."""

    def tokenize(self, text: str) -> list[Token]: ...

    def any(self, namespace: str | None) -> bool: ...

    def counts(self, terms: Sequence[Term]) -> tuple[list[int], int]:
        """The relations holding each term, and the relations."""
        ...

    def matches(
        self, lexical: LexicalPlan, namespace: str | None, limit: int | None
    ) -> list[tuple[int, float, float]]:
        """(seq, bm25, confidence) of matching relations by ``bm25 · confidence``, best
        first (ties: newest first), at most ``limit`` (``None``: all)."""
        ...

    def rows(self, seqs: Sequence[int]) -> dict[int, Sequence[Any]]:
        """Rows of the engine's ``COLUMNS`` by seq."""
        ...


class RelationStatements(Protocol):
    """An engine's statements over relations (a module: ``engine/*/relations.py``), rows
    in the column order of its ``COLUMNS``, times as stored text; ``conn`` is a connection
    of the session, the caller's transaction around it."""

    def upsert(self, conn: Any, rows: Sequence[tuple[Any, ...]]) -> list[Any]: ...

    def forget(self, conn: Any, namespace: str, ids: Sequence[str]) -> set[str]: ...

    def count(self, conn: Any, namespace: str | None) -> int: ...

    def page(
        self, conn: Any, namespace: str | None, after: int, limit: int
    ) -> list[tuple[int, Any]]: ...

    def read_from(self, conn: Any, memory_id: str, namespace: str) -> list[Any]: ...

    def neighbors(self, conn: Any, key: str, namespace: str | None, limit: int) -> list[Any]: ...

    def reading(self, session: Any, conn: Any) -> AbstractContextManager[RelationIndex]: ...


class MemoryStatements(Protocol):
    """An engine's statements over memories (a module: ``engine/*/memories.py``); each
    takes the session first (``update`` runs inside its caller's transaction)."""

    @property
    def MARK(self) -> str: ...

    @property
    def ENTRY(self) -> str: ...

    def entry(self, row: Sequence[Any]) -> TimelineEntry: ...

    def get(self, session: Any, ns: str | None, wanted: list[str]) -> dict[str, Memory]: ...

    def holders(self, session: Any, wanted: list[str]) -> dict[str, str]: ...

    def forget(self, session: Any, ns: str, wanted: list[str]) -> set[str]: ...

    def update(
        self, session: Any, ns: str, ident: str, sets: Mapping[str, Any]
    ) -> tuple[Memory, int]: ...

    def count(self, session: Any, ns: str | None) -> int: ...

    def bodies(self, session: Any, ids: Sequence[str]) -> dict[str, tuple[str, float]]: ...

    def memory(self, row: Sequence[Any]) -> Memory: ...

    def page(self, session: Any, ns: str | None, after: int, limit: int) -> list[Sequence[Any]]: ...

    def stats(self, session: Any, ns: str | None, embedder: Embedder | None) -> Stats: ...

    def check(self, session: Any) -> dict[str, Any]: ...

    def timeline(
        self,
        session: Any,
        filters: Filters,
        limit: int,
        oldest_first: bool,
        around: tuple[str, int, int] | None,
    ) -> list[TimelineEntry]: ...

    def kind_counts(self, session: Any, ns: str | None) -> list[Sequence[Any]]: ...

    def last_thread(self, session: Any, ns: str, kind: str, limit: int) -> list[Memory]: ...

    def notable(self, session: Any, ns: str, skip: Sequence[str], limit: int) -> list[Memory]: ...


class DuplicateChecks(Protocol):
    """An engine's duplicate checks (a module: ``engine/*/dedup.py``), each with the
    engine's own reads and locking; the decisions are :mod:`mnemex.engine.duplicates`'."""

    def remember_row(
        self, session: Any, row: tuple[Any, ...], embed: bool
    ) -> tuple[Match | None, int, Any]:
        """Store a row of :func:`mnemex.rows.prepare` unless it repeats a memory of its
        namespace: the memory it was merged into (or ``None`` and the new row's seq), and
        the row's vector when the check made one (to embed the new memory with)."""
        ...

    def dedup_pass(
        self, session: Any, namespace: str, moved_to: str, dry_run: bool
    ) -> tuple[Sequence[tuple[Any, ...]], Callable[[Any, tuple[Any, ...]], Match | None]]:
        """The rows of a dedup pass over ``namespace`` and the step that checks one (and,
        unless ``dry_run``, merges it and moves it to ``moved_to``) in a transaction."""
        ...


class Session(Protocol):
    """One store's session: its settings, lock, connections and transactions."""

    @property
    def settings(self) -> Settings: ...

    @property
    def namespace(self) -> str: ...

    @property
    def lock(self) -> AbstractContextManager[Any]: ...

    @property
    def workspaces(self) -> WorkspaceTables: ...

    @property
    def embedding(self) -> Embeddings: ...

    @property
    def injections(self) -> InjectionLog: ...

    @property
    def relations(self) -> RelationStatements: ...

    @property
    def memories(self) -> MemoryStatements: ...

    @property
    def dedup(self) -> DuplicateChecks: ...

    @property
    def copying(self) -> CopyTables:
        """The store's records, read and written (:mod:`mnemex.engine.copy`)."""
        ...

    def connection(self) -> AbstractContextManager[Any]: ...

    def retriever(self, conn: Any, embedder: Embedder | None) -> Any:
        """What a search on ``conn`` reads (the ``Retriever`` of :mod:`mnemex.search.pipeline`)."""
        ...

    def transaction(self) -> AbstractContextManager[Any]: ...

    def read(self) -> AbstractContextManager[Any]: ...

    def lean(self, size: int) -> AbstractContextManager[None]:
        """Around the writes of a memory of ``size`` bytes: whatever keeps the process's
        memory bounded while they run (SQLite: a small page cache)."""
        ...

    def after_write(self) -> None: ...


class PostgresSurface(Session, Protocol):
    """What PostgreSQL's statements use of its session besides."""

    @property
    def path(self) -> str: ...
