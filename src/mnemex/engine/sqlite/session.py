"""The SQLite session: one connection to one store file and what lives beside it
(locks, transactions, the lexicon, the vector index, bulk insert).

The operations (search, dedup, ingest, transfer, the embedding lifecycle) reach
storage through its public members only; a second engine implements the same
surface (``DESIGN.md``, "The storage session").
"""

from __future__ import annotations

import contextlib
import itertools
import sqlite3
import threading
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from concurrent.futures import Future, ThreadPoolExecutor

    from mnemex.config import Settings
    from mnemex.embed import Embedder
    from mnemex.engine.copy import CopyTables
    from mnemex.engine.protocol import DuplicateChecks, MemoryStatements
    from mnemex.engine.sqlite.retrieval import Engine
    from mnemex.engine.sqlite.vectors import VectorIndex

from mnemex.engine import NamespaceArg, resolve_namespace
from mnemex.engine.embedding import FROM_SETTINGS
from mnemex.engine.sqlite import injections, memories, relations
from mnemex.engine.sqlite.embedding import Embedding
from mnemex.engine.sqlite.fts import Lexicon, stored_rows
from mnemex.engine.workspaces import SQLITE
from mnemex.errors import DuplicateId, InvalidInput
from mnemex.rows import ROW_COLUMNS
from mnemex.storage import (
    OPTIMIZE_MAX_ROWS,
    connect,
    marks,
    migrate,
    read_transaction,
    translate_errors,
    write_transaction,
)
from mnemex.storage.connect import CACHE_KIB
from mnemex.text import clean_namespace

Conflict = Literal["error", "skip"]
WRITE_CHUNK = 2_500  # rows per INSERT ... SELECT in a bulk write
OPTIMIZE_MIN_BATCH = 1_000  # only bulk writes consider merging the full-text index
OPTIMIZE_MIN_ROWS = 10_000
LEAN_BYTES = 1 << 20  # a memory this large is written with a small page cache (see lean)
LEAN_CACHE_KIB = 8_192
_MAX_SEQ = "SELECT coalesce(max(seq), 0) FROM memories"


class SqliteSession:
    """One connection to a store file, safe to share between threads.

    Every use of the connection holds ``lock`` (:meth:`connection`,
    :meth:`transaction`, :meth:`read`). Connection-local state (the lexicon's
    temp tables, the staging table) is made once, here, outside any transaction,
    so that no rollback drops it.
    """

    def __init__(self, settings: Settings, *, embedder: Embedder | object | None = FROM_SETTINGS):
        self.settings = settings
        self.namespace = clean_namespace(settings.namespace)
        self.path = Path(settings.db_path)
        self.lock = threading.RLock()
        self._conn: sqlite3.Connection | None = connect(
            self.path, busy_timeout=settings.busy_timeout
        )
        try:
            with translate_errors(self.path, settings.busy_timeout):
                migrate(self._conn)
                self.lexicon = Lexicon(self._conn)
                self._conn.execute(
                    f"CREATE TEMP TABLE IF NOT EXISTS mnemex_staging ({ROW_COLUMNS})"
                )
        except BaseException:
            self._conn.close()
            raise
        self._executor: ThreadPoolExecutor | None = None
        self._generation = 0  # this process's writes, for caches that PRAGMA data_version misses
        self._vector_index: VectorIndex | None = None
        self.workspaces = SQLITE  # the workspace tables' statements
        self.injections = injections  # the injection log's statements
        self.relations = relations  # the relations' statements
        self.memories: MemoryStatements = memories  # the memories' statements
        self.files_cache: dict[int, tuple[Any, ...]] = {}  # owned by mnemex.ingest.workspace
        self.backgrounds: dict[Any, Any] = {}  # owned by mnemex.search.background
        # The query vectors kept while a caller asks (mnemex.search.pipeline.kept_query_vectors)
        self.queries: dict[Any, Any] | None = None
        self.embedding = Embedding(self, embedder)

    def close(self) -> None:
        """Wait for the writer thread, close the connection and let go of what was kept
        for it: the vector index (its matrix) and the caches (again: nothing)."""
        with self.lock:
            if self._executor is not None:
                self._executor.shutdown(wait=True)
                self._executor = None
            if self._conn is not None:
                self._conn.close()
                self._conn = None
            if self._vector_index is not None:
                self._vector_index.close()
            self._vector_index = None
            self.backgrounds.clear()
            self.queries = None
            self.files_cache.clear()

    @property
    def copying(self) -> CopyTables:
        """The store's records, read and written (imported on first use: only a migration
        needs them)."""
        from mnemex.engine.copy import SQLITE as records

        return records

    @property
    def conn(self) -> sqlite3.Connection:
        """The connection; use it inside :meth:`connection` (or its kin) only."""
        if self._conn is None:
            raise InvalidInput("this store is closed; open it again with mnemex.open()")
        return self._conn

    def resolve_namespace(self, namespace: NamespaceArg, *, allow_all: bool = False) -> str | None:
        """The namespace a call names (``None``: the store's own; ``ALL``: ``None``, if allowed)."""
        return resolve_namespace(self.namespace, namespace, allow_all=allow_all)

    # -- the meta record: tools' state, emptiness ----------------------------------------

    def state(self, key: str) -> str | None:
        """The value kept under ``key`` in the ``meta`` table, or ``None``."""
        with self.connection() as conn:
            row = conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def set_state(self, key: str, value: str) -> None:
        """Keep ``value`` under ``key`` in the ``meta`` table (replacing what was there)."""
        with self.transaction() as conn:
            conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, value))

    def release_if_empty(self) -> bool:
        """Whether the store holds no memory, relation or workspace and this is its only
        connection, which then leaves WAL mode (it needs the only one): its files can go."""
        with self.connection() as conn:
            if conn.execute(
                "SELECT EXISTS (SELECT 1 FROM memories) OR EXISTS (SELECT 1 FROM relations) "
                "OR EXISTS (SELECT 1 FROM workspaces)"
            ).fetchone()[0]:
                return False
            return str(conn.execute("PRAGMA journal_mode = DELETE").fetchone()[0]) == "delete"

    # -- locks, errors, transactions -------------------------------------------------

    @contextlib.contextmanager
    def errors(self) -> Iterator[None]:
        """SQLite errors translated; on any error, caches that a rollback may have
        outdated (counts, vectors, workspace files) are dropped."""
        try:
            with translate_errors(self.path, self.settings.busy_timeout):
                yield
        except BaseException:
            self.after_write()
            self.lexicon.invalidate(counts=True)
            raise

    @contextlib.contextmanager
    def connection(self) -> Iterator[sqlite3.Connection]:
        """The connection, for this thread alone, with errors translated."""
        with self.lock, self.errors():
            yield self.conn

    @contextlib.contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """:meth:`connection` inside one write transaction: all or nothing."""
        with self.lock, self.errors(), write_transaction(self.conn) as conn:
            yield conn

    @contextlib.contextmanager
    def read(self) -> Iterator[sqlite3.Connection]:
        """:meth:`connection` inside one read snapshot (several statements, one state)."""
        with self.lock, self.errors(), read_transaction(self.conn) as conn:
            yield conn

    @contextlib.contextmanager
    def lean(self, size: int) -> Iterator[None]:
        """Around the writes of a memory of ``size`` bytes: past ``LEAN_BYTES``, the page
        cache is kept to ``LEAN_CACHE_KIB`` while they run and emptied after them. A memory
        of megabytes would otherwise fill the cache with pages no search reads (its text,
        its index entries and its vectors): 64 MiB of a 5 MiB memory's add."""
        if size < LEAN_BYTES:
            yield
            return
        with self.connection() as conn:
            conn.execute(f"PRAGMA cache_size = -{LEAN_CACHE_KIB}")
        try:
            yield
        finally:
            with self.connection() as conn:
                conn.execute("PRAGMA shrink_memory")
                conn.execute(f"PRAGMA cache_size = -{CACHE_KIB}")

    @property
    def generation(self) -> int:
        """How many times this process has written (see :meth:`after_write`): caches keyed
        on it and on ``PRAGMA data_version`` see every write, this process's included."""
        return self._generation

    def after_write(self) -> None:
        """Note a write by this process: lexicon counts and the vector snapshot are dropped,
        and caches keyed on :attr:`generation` miss."""
        self._generation += 1
        self.lexicon.invalidate()
        if self._vector_index is not None:
            self._vector_index.mark_dirty()

    # -- vectors -----------------------------------------------------------------------

    @property
    def embedder(self) -> Embedder | None:
        """The store's embedder (see :attr:`Embedding.embedder`), or ``None``: lexical only."""
        return self.embedding.embedder

    @property
    def dedup(self) -> DuplicateChecks:
        """The duplicate checks (imported by the first write that checks: a process that
        only searches, as the prompt hook's, does not load them)."""
        from mnemex.engine.sqlite import dedup

        return dedup

    def retriever(self, conn: sqlite3.Connection, embedder: Embedder | None) -> Engine:
        """What a search on ``conn``, one of this session's connections, reads."""
        from mnemex.engine.sqlite.retrieval import Engine  # with search only

        return Engine(
            conn,
            self.lexicon,
            self.settings,
            embedder,
            self.vectors,
            self.backgrounds,
            self.queries,
        )

    def vectors(self, dim: int) -> VectorIndex:
        """The in-process index of the embedder's ``dim``-dimensional vectors (kept between
        calls; a snapshot file beside the store makes the first load fast)."""
        embedder = self.embedder
        assert embedder is not None
        index = self._vector_index
        if index is None or index.model != embedder.model_id or index.dim != dim:
            from mnemex.engine.sqlite import ann
            from mnemex.engine.sqlite.vectors import VectorIndex, snapshot_path

            in_memory = str(self.path) == ":memory:"
            snapshot = None if in_memory else snapshot_path(self.path, embedder.model_id)
            index = VectorIndex(self.conn, embedder.model_id, dim, snapshot=snapshot)
            if self.settings.ann != "off" and ann.available():
                index.ann = ann.HnswIndex.load(ann.sidecar(self.path, embedder.model_id), dim)
            self._vector_index = index
        return index

    def update_ann(self, embedder: Embedder) -> None:
        """Build or extend the HNSW index once the store is past ``ann_threshold`` vectors."""
        from mnemex.engine.sqlite import ann

        if self.settings.ann == "off" or not ann.available():
            return
        with self.connection():
            index = self.vectors(embedder.dim)
            vectors, ids = index.live()
            graph = index.ann
        if self.settings.ann == "auto" and len(ids) < self.settings.ann_threshold:
            return
        dead = graph.size - len(ids) if graph is not None else 0
        if graph is None or dead > ann.REBUILD_DEAD_FRACTION * max(graph.size, 1):
            graph = ann.HnswIndex(ann.sidecar(self.path, embedder.model_id), embedder.dim)
            graph.build(vectors, ids)  # minutes for millions of vectors: no lock held
        else:
            graph.add(vectors, ids)
        graph.save()
        with self.lock:
            index.ann = graph

    def drop_ann(self, model_id: str) -> None:
        """Delete the model's HNSW index, vector snapshot and background files (to be built
        anew)."""
        from mnemex.engine.sqlite import ann
        from mnemex.engine.sqlite.codes import codes_path
        from mnemex.engine.sqlite.vectors import backgrounds_path, snapshot_path

        graph = ann.sidecar(self.path, model_id)
        snapshot = snapshot_path(self.path, model_id)
        for path in (
            graph,
            graph.with_suffix(graph.suffix + ".json"),
            snapshot,
            codes_path(snapshot),
            backgrounds_path(snapshot),
        ):
            path.unlink(missing_ok=True)
        if self._vector_index is not None:
            self._vector_index.ann = None

    # -- bulk insert ---------------------------------------------------------------------

    def insert_prepared(
        self, rows: Sequence[tuple[Any, ...]], on_conflict: Conflict
    ) -> tuple[int, list[int]]:
        """Insert prepared rows in one transaction; returns how many were new and their seqs.
        Call it inside :meth:`connection`."""
        chunks = (list(rows[i : i + WRITE_CHUNK]) for i in range(0, len(rows), WRITE_CHUNK))
        count, _, seqs = self.insert_chunks(chunks, on_conflict)
        return count, seqs

    def insert_chunks(
        self, chunks: Iterable[list[tuple[Any, ...]]], on_conflict: Conflict
    ) -> tuple[int, list[str], list[int]]:
        """Insert chunks of prepared rows in one transaction: all or nothing. Call it
        inside :meth:`connection`.

        Preparing rows is Python work and inserting them is SQLite work that
        releases the GIL, so while one chunk is inserted by a worker thread the
        next is prepared by the caller (the ``chunks`` iterator). Returns the
        number of rows inserted, the ids of all rows in order, and the seqs of
        the rows inserted (``seq`` only grows, so they are those above the
        largest before the transaction).
        """
        conn = self.conn
        ids: list[str] = []
        seen: set[str] = set()
        inserted = 0
        pending: Future[int] | None = None
        # The first chunk (all of a batch of up to WRITE_CHUNK rows) is prepared
        # before the write lock is taken: other writers wait for the insert only.
        chunks = iter(chunks)
        first = next(chunks, None)
        with write_transaction(conn):
            before = conn.execute(_MAX_SEQ).fetchone()[0]
            try:
                for rows in itertools.chain([] if first is None else [first], chunks):
                    for row in rows:
                        if row[0] in seen and on_conflict == "error":
                            raise DuplicateId(
                                f"id {row[0]!r} appears more than once in the batch; "
                                "ids must be unique"
                            )
                        seen.add(row[0])
                        ids.append(row[0])
                    if pending is not None:
                        inserted += pending.result()
                    pending = self._writer().submit(self._insert_chunk, rows, on_conflict)
                if pending is not None:
                    inserted += pending.result()
                    pending = None
            finally:
                if pending is not None:  # an error while preparing: let the insert finish first
                    pending.exception()  # waits; its error is raised below
            seqs = [r[0] for r in conn.execute("SELECT seq FROM memories WHERE seq > ?", (before,))]
            if inserted >= OPTIMIZE_MIN_BATCH:
                self._maybe_optimize()
        return inserted, ids, seqs

    def insert_rows(self, rows: list[tuple[Any, ...]]) -> list[int]:
        """Insert prepared rows (new ids) inside the caller's write transaction; their seqs."""
        if not rows:
            return []
        before = self.conn.execute(_MAX_SEQ).fetchone()[0]
        for start in range(0, len(rows), WRITE_CHUNK):
            self._insert_chunk(rows[start : start + WRITE_CHUNK], "error")
        return [
            r[0]
            for r in self.conn.execute(
                "SELECT seq FROM memories WHERE seq > ? ORDER BY seq", (before,)
            )
        ]

    def _maybe_optimize(self) -> None:
        """Merge the full-text index into one segment each time the store has doubled.

        Bulk writes leave many index segments, and every query and snippet
        seeks each of them; one ``optimize`` per doubling keeps that in check
        at an amortized cost of a few microseconds a row. Past
        ``OPTIMIZE_MAX_ROWS`` the pass would hold the write lock too long,
        and FTS5's own incremental merging is left to do the work.
        """
        conn = self.conn
        rows = stored_rows(conn)
        row = conn.execute("SELECT value FROM meta WHERE key = 'fts_optimized_rows'").fetchone()
        last = int(row[0]) if row else 0
        if rows < OPTIMIZE_MIN_ROWS or rows > OPTIMIZE_MAX_ROWS or rows < 2 * last:
            return
        conn.execute("INSERT INTO memories_fts (memories_fts) VALUES ('optimize')")
        conn.execute(
            "INSERT OR REPLACE INTO meta (key, value) VALUES ('fts_optimized_rows', ?)",
            (str(rows),),
        )

    def _writer(self) -> ThreadPoolExecutor:
        if self._executor is None:
            from concurrent.futures import ThreadPoolExecutor

            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="mnemex-write")
        return self._executor

    def _insert_chunk(self, rows: list[tuple[Any, ...]], on_conflict: Conflict) -> int:
        conn = self.conn
        conn.execute("DELETE FROM temp.mnemex_staging")
        conn.executemany(
            f"INSERT INTO temp.mnemex_staging ({ROW_COLUMNS}) VALUES ({marks(14)})", rows
        )
        if on_conflict == "error":
            existing = conn.execute(
                "SELECT s.id FROM temp.mnemex_staging AS s JOIN memories AS m ON m.id = s.id "
                "LIMIT 1"
            ).fetchone()
            if existing:
                raise DuplicateId(
                    f"a memory with id {existing[0]!r} already exists; "
                    "leave id out to get a new one, or skip existing ids"
                )
            sql = (
                f"INSERT INTO memories ({ROW_COLUMNS}) "
                f"SELECT {ROW_COLUMNS} FROM temp.mnemex_staging ORDER BY rowid"
            )
        else:
            sql = f"""INSERT INTO memories ({ROW_COLUMNS})
                SELECT {ROW_COLUMNS} FROM temp.mnemex_staging AS s
                WHERE s.rowid IN (SELECT min(rowid) FROM temp.mnemex_staging GROUP BY id)
                  AND NOT EXISTS (SELECT 1 FROM memories AS m WHERE m.id = s.id)
                ORDER BY s.rowid"""
        # One INSERT ... SELECT per chunk: the FTS5 trigger then buffers the chunk
        # instead of flushing an index segment per row (a statement per row does).
        count = conn.execute(sql).rowcount
        conn.execute("DELETE FROM temp.mnemex_staging")
        return int(count)
