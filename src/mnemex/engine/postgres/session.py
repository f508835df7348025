"""The PostgreSQL session: what :class:`mnemex.Store` talks to for a ``postgresql://`` URL.

It offers the part of the SQLite session's surface that the shared code uses
(``DESIGN.md``, "The storage session"): ``settings``, ``namespace``, ``path``
(the URL without its password), ``resolve_namespace``, ``lock``,
``connection()`` / ``transaction()`` / ``read()``, ``generation`` and
``after_write()``, ``embedding``, ``insert_chunks`` / ``insert_prepared``,
``workspaces`` / ``files_cache`` (markdown workspaces) and ``close()``.
Connections come from a pool of at most ``settings.pool_size``
(``psycopg_pool``); a thread that asks for a connection while it holds one gets
the same one back, so nested calls use one connection and one transaction. A
hybrid search whose query vector is ready runs its vector arm on a second
connection (:meth:`PostgresSession.spare`, kept open: ``SPARE``), in the same
snapshot, while its lexical arm runs on the first.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from mnemex.engine import NamespaceArg, resolve_namespace
from mnemex.engine.postgres import dedup, injections, memories, relations
from mnemex.engine.postgres.connect import connect, pool, redact, snapshot
from mnemex.engine.postgres.schema import migrate
from mnemex.engine.postgres.workspaces import tables
from mnemex.engine.postgres.write import Written, insert_rows, pg_row
from mnemex.errors import DuplicateId, InvalidInput, StoreError, StoreLocked
from mnemex.text import clean_namespace

if TYPE_CHECKING:
    from mnemex.config import Settings
    from mnemex.embed import Embedder
    from mnemex.engine.postgres.copy import PgCopyTables
    from mnemex.engine.postgres.embedding import PgEmbedding
    from mnemex.engine.postgres.retrieval import PostgresEngine
    from mnemex.engine.protocol import DuplicateChecks, MemoryStatements

ENGINE = "PostgreSQL"
SPARE = 1  # connections kept open beside the one a search holds, for its vector arm
SPARE_WAIT = 0.001  # seconds a search waits for a spare connection (0 would never get one)
Conn = Any  # psycopg.Connection[tuple[Any, ...]]


class PostgresSession:
    """A pool of connections to one PostgreSQL database, safe to share between threads."""

    engine = ENGINE

    def __init__(self, settings: Settings, *, embedder: Embedder | object | None) -> None:
        from mnemex.engine.embedding import FROM_SETTINGS
        from mnemex.engine.postgres.embedding import PgEmbedding

        assert settings.db_url is not None
        self.settings = settings
        self.namespace = clean_namespace(settings.namespace)
        self.url = settings.db_url
        self.path = redact(self.url)
        self.lock = threading.RLock()
        self._local = threading.local()
        with connect(self.url) as conn:  # an unreachable server fails here, at once
            _prepare(conn, self.path)
        self._pool: Any = pool(
            self.url, min_size=min(SPARE + 1, settings.pool_size), max_size=settings.pool_size
        )
        self._generation = 0
        self.workspaces = tables()  # the workspace tables' statements
        self.injections = injections  # the injection log's statements
        self.relations = relations  # the relations' statements
        self.memories: MemoryStatements = memories  # the memories' statements
        self.dedup: DuplicateChecks = dedup  # the duplicate checks
        self.files_cache: dict[int, tuple[Any, ...]] = {}  # owned by mnemex.ingest.workspace
        self.backgrounds: dict[Any, Any] = {}  # owned by mnemex.search.background
        # The query vectors kept while a caller asks (mnemex.search.pipeline.kept_query_vectors)
        self.queries: dict[Any, Any] | None = None
        self.embedding: PgEmbedding = PgEmbedding(
            self, FROM_SETTINGS if embedder is FROM_SETTINGS else embedder
        )

    def close(self) -> None:
        """Close the pool's connections (again: nothing)."""
        with self.lock:
            if self._pool is not None:
                self._pool.close()
                self._pool = None

    def resolve_namespace(self, namespace: NamespaceArg, *, allow_all: bool = False) -> str | None:
        """The namespace a call names (``None``: the store's own; ``ALL``: ``None``, if allowed)."""
        return resolve_namespace(self.namespace, namespace, allow_all=allow_all)

    # -- the meta record: tools' state, emptiness ----------------------------------------

    def state(self, key: str) -> str | None:
        """The value kept under ``key`` in the ``meta`` table, or ``None``."""
        with self.connection() as conn:
            row = conn.execute("SELECT value FROM meta WHERE key = %s", (key,)).fetchone()
        return None if row is None else str(row[0])

    def set_state(self, key: str, value: str) -> None:
        """Keep ``value`` under ``key`` in the ``meta`` table (replacing what was there)."""
        with self.transaction() as conn:
            conn.execute(
                "INSERT INTO meta (key, value) VALUES (%s, %s) "
                "ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
                (key, value),
            )

    def release_if_empty(self) -> bool:
        """Never: a database on a server is not a file to delete."""
        return False

    # -- connections, errors, transactions ---------------------------------------------

    @contextlib.contextmanager
    def errors(self) -> Iterator[None]:
        """psycopg's errors as mnemex errors that say what to do; others pass through."""
        from psycopg import errors as pg_errors

        try:
            yield
        except pg_errors.LockNotAvailable:
            raise StoreLocked(f"the PostgreSQL store {self.path} is locked; retry") from None
        except pg_errors.OperationalError as exc:
            raise StoreError(
                f"the PostgreSQL server at {self.path} failed: {' '.join(str(exc).split())}; "
                "check that it runs, and retry"
            ) from None

    @contextlib.contextmanager
    def connection(self) -> Iterator[Conn]:
        """A connection from the pool (this thread's, if it holds one), errors translated."""
        held = getattr(self._local, "conn", None)
        if held is not None:
            yield held
            return
        if self._pool is None:
            raise InvalidInput("this store is closed; open it again with mnemex.open()")
        with self.errors(), self._pool.connection() as conn:
            self._local.conn = conn
            try:
                yield conn
            finally:
                self._local.conn = None

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Conn]:
        """:meth:`connection` inside one transaction: all or nothing."""
        with self.connection() as conn, conn.transaction():
            yield conn

    @contextlib.contextmanager
    def read(self) -> Iterator[Conn]:
        """:meth:`connection` inside one read-only snapshot (several statements, one state)."""
        with self.connection() as conn:
            if conn.info.transaction_status != 0:  # inside a transaction already
                yield conn
                return
            with snapshot(conn):
                yield conn

    @property
    def generation(self) -> int:
        """How many times this process has written through this session."""
        return self._generation

    def lean(self, size: int) -> contextlib.AbstractContextManager[None]:
        """Nothing to keep small here: the server holds the pages."""
        return contextlib.nullcontext()

    def after_write(self) -> None:
        self._generation += 1

    @property
    def embedder(self) -> Embedder | None:
        return self.embedding.embedder

    @property
    def copying(self) -> PgCopyTables:
        """The store's records, read and written (imported on first use: only a migration
        needs them)."""
        from mnemex.engine.postgres.copy import copy_tables

        return copy_tables()

    # -- bulk insert -----------------------------------------------------------------------

    def insert_prepared(
        self, rows: Sequence[tuple[Any, ...]], on_conflict: str
    ) -> tuple[int, list[int]]:
        """Insert rows of :func:`mnemex.rows.prepare` in one transaction; how many were new
        and their seqs."""
        count, _, seqs = self.insert_chunks([list(rows)], on_conflict)
        return count, seqs

    def insert_chunks(
        self, chunks: Iterable[list[tuple[Any, ...]]], on_conflict: str
    ) -> tuple[int, list[str], list[int]]:
        """Insert chunks of prepared rows in one transaction: all or nothing. Returns the
        rows inserted, the id holding each row in order, and the seqs inserted.

        A row whose text is already stored in its namespace is not inserted: its id
        is the stored memory's (the schema keeps one memory per text and namespace,
        which two writers racing cannot break). An id already stored raises
        :class:`~mnemex.errors.DuplicateId` (``on_conflict="error"``) or is kept as
        it is (``"skip"``).

        One row alone is one statement, its own transaction: one round trip.
        """
        ids: list[str] = []
        seqs: list[int] = []
        seen: set[str] = set()
        given = iter(chunks)
        first = next(given, [])
        second = next(given, None)  # validated before anything is written
        if second is None and len(first) <= 1:
            with self.connection() as conn:
                _insert_checked(conn, first, on_conflict, seen, (ids, seqs))
            return len(seqs), ids, seqs
        with self.transaction() as conn:
            for rows in itertools.chain([first, second], given):
                _insert_checked(conn, rows or [], on_conflict, seen, (ids, seqs))
        return len(seqs), ids, seqs

    def retriever(self, conn: Conn, embedder: Embedder | None) -> PostgresEngine:
        """What a search on ``conn``, one of this session's connections, reads."""
        from mnemex.engine.postgres.retrieval import PostgresEngine  # with search only

        return PostgresEngine(
            conn,
            self.settings,
            embedder,
            backgrounds=self.backgrounds,
            queries=self.queries,
            spare=self.spare,
        )

    @contextlib.contextmanager
    def spare(self) -> Iterator[Conn | None]:
        """Another connection of the pool if one is free now (``None`` if not: no waiting
        for one, the caller goes on with its own; the pool grows meanwhile if it may)."""
        from psycopg_pool import PoolTimeout

        pool = self._pool
        try:
            conn = None if pool is None else pool.getconn(timeout=SPARE_WAIT)
        except PoolTimeout:
            conn = None
        if conn is None or pool is None:
            yield None
            return
        try:
            yield conn
        finally:
            pool.putconn(conn)

    def insert_one(self, conn: Conn, row: tuple[Any, ...]) -> Written:
        """Insert one prepared row in the caller's transaction (its text already stored in
        the namespace: the stored memory, not inserted)."""
        return insert_rows(conn, [pg_row(row)])[0]


def _prepare(conn: Conn, where: str) -> None:
    """The schema brought up to date, or one error that says what the database lacks."""
    import psycopg

    try:
        migrate(conn)
    except psycopg.Error as exc:
        raise StoreError(
            f"cannot prepare the PostgreSQL database at {where}: {' '.join(str(exc).split())}; "
            "mnemex needs the pgvector extension (CREATE EXTENSION vector) and a user "
            "allowed to create tables in the database"
        ) from None


def _duplicate(ident: str) -> DuplicateId:
    return DuplicateId(
        f"a memory with id {ident!r} already exists; "
        "leave id out to get a new one, or skip existing ids"
    )


def _insert_checked(
    conn: Conn,
    rows: Sequence[tuple[Any, ...]],
    on_conflict: str,
    seen: set[str],
    out: tuple[list[str], list[int]],
) -> None:
    """Insert a chunk of prepared rows; the id holding each row appended to ``out[0]``,
    the seqs inserted to ``out[1]``. With ``on_conflict="error"``, an id given twice
    (``seen``: the ids of the chunks before) or already stored raises
    :class:`~mnemex.errors.DuplicateId` (the caller's transaction then writes nothing:
    a row alone was not inserted)."""
    if not rows:
        return
    if on_conflict == "error":
        for row in rows:
            if row[0] in seen:
                raise DuplicateId(
                    f"id {row[0]!r} appears more than once in the batch; ids must be unique"
                )
            seen.add(row[0])
    written = insert_rows(conn, [pg_row(r) for r in rows])
    for row, w in zip(rows, written, strict=True):
        if w.taken and on_conflict == "error":
            raise _duplicate(row[0])
        out[0].append(w.id)
        if w.inserted:
            out[1].append(w.seq)
