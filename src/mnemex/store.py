"""The store: one SQLite file, scoped reads and writes, the public API of mnemex."""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal

if TYPE_CHECKING:
    import logging
    from concurrent.futures import Future, ThreadPoolExecutor

    from mnemex.index.embeddings import EmbedReport
    from mnemex.index.vectors import VectorIndex
    from mnemex.search.pipeline import Request

from mnemex import embed as embedders
from mnemex import relations as relations_db
from mnemex.config import (
    DEFAULT_CONFIDENCE,
    DEFAULT_KIND,
    MAX_SEARCH_LIMIT,
    RecallOptions,
    SearchOptions,
    Settings,
    check_count,
    check_patterns,
    load_settings,
)
from mnemex.embed import Embedder
from mnemex.errors import (
    DuplicateId,
    EmbeddingError,
    IndexMismatch,
    InvalidInput,
    MissingExtra,
    MnemexError,
    UnknownMemory,
)
from mnemex.index.fts import Filters, Lexicon
from mnemex.models import (
    Added,
    Appended,
    DedupReport,
    DuplicatePair,
    ForgetResult,
    GetResult,
    Memory,
    RecallResult,
    Relation,
    SearchResult,
    Stats,
    SyncReport,
    TimelineEntry,
    WorkspaceStatus,
)
from mnemex.search.rank import Ranking
from mnemex.storage import (
    connect,
    migrate,
    read_meta,
    read_transaction,
    schema_version,
    translate_errors,
    write_transaction,
)
from mnemex.text import (
    batched,
    clean_confidence,
    clean_content,
    clean_id,
    clean_label,
    clean_metadata,
    clean_name,
    clean_namespace,
    clean_query,
    clean_tags,
    content_hash,
    format_time,
    listed,
    new_id,
    parse_stored_time,
    parse_time,
    segment,
    summarize,
    tags_columns,
    utcnow,
)


class _AllNamespaces:
    def __repr__(self) -> str:
        return "mnemex.ALL"


ALL: Final = _AllNamespaces()
"""Pass as ``namespace=`` to read across every namespace (search, timeline, stats, export)."""
FROM_SETTINGS: Final = object()  # Store(embedder=...) default: resolve the embedder setting


def logger() -> logging.Logger:
    """The ``mnemex`` logger (logging is imported when something is logged)."""
    import logging

    return logging.getLogger("mnemex")


NamespaceArg = str | _AllNamespaces | None
Conflict = Literal["error", "skip"]

_FIELDS = (
    "id, namespace, kind, content, tags, source, confidence, pinned, "
    "created_at, updated_at, content_hash, metadata"
)
_ROW_COLUMNS = _FIELDS + ", fts_content, fts_tags"
_INPUT_KEYS = frozenset(
    {
        "id",
        "content",
        "kind",
        "tags",
        "source",
        "confidence",
        "pinned",
        "created_at",
        "updated_at",
        "metadata",
        "namespace",
        "content_hash",
    }
)
_UNSET: Final = object()
_CHUNK = 500  # ids per IN (...) query
WRITE_CHUNK = 2_500  # rows per INSERT ... SELECT in add_many
OPTIMIZE_MIN_BATCH = 1_000  # only bulk writes consider merging the full-text index
OPTIMIZE_MIN_ROWS = 10_000
OPTIMIZE_MAX_ROWS = 2_000_000
DEADLINE_SLICE = 32  # memories embedded between two looks at the clock when time is limited


def open_store(
    db: str | os.PathLike[str] | None = None,
    *,
    namespace: str | None = None,
    embedder: Embedder | object | None = FROM_SETTINGS,
    **settings: Any,
) -> Store:
    """Open (creating if needed) a store. ``db`` defaults to the data folder's ``memories.db``.

    Keyword arguments override :class:`~mnemex.config.Settings` fields;
    ``embedder`` is the ``embedder`` setting's name (``local``, ``none``, ...)
    or an instance (or ``None`` for lexical only).
    """
    if isinstance(embedder, str):
        settings["embedder"], embedder = embedder, FROM_SETTINGS
    return Store(load_settings(db, namespace=namespace, **settings), embedder=embedder)


class Store:
    """A memory store in one SQLite file.

    Every read and write is scoped to one namespace: the store's own
    (``settings.namespace``) unless a call names another. Safe to share
    between threads; several processes may use the same file at once.
    """

    def __init__(
        self, settings: Settings, *, embedder: Embedder | object | None = FROM_SETTINGS
    ) -> None:
        self.settings = settings
        self._embedder_arg = embedder
        self._embedder: Embedder | None = None
        self._wanted: Embedder | None = None  # what reindex and embed switch the store to
        self._recorded: dict[str, Any] | None = None
        self._embedder_ready = False
        self._vector_index: VectorIndex | None = None
        self.last_embedding_error: str | None = None
        self.namespace = clean_namespace(settings.namespace)
        self.path = Path(settings.db_path)
        self._lock = threading.RLock()
        self._conn: sqlite3.Connection | None = connect(
            self.path, busy_timeout=settings.busy_timeout
        )
        try:
            with translate_errors(self.path, settings.busy_timeout):
                migrate(self._conn)
                # Connection-local state (temp tables) is made here, outside any
                # transaction: made inside one, a rollback would drop it while the
                # store still counts on it.
                self._lexicon = Lexicon(self._conn)
                self._conn.execute(
                    f"CREATE TEMP TABLE IF NOT EXISTS mnemex_staging ({_ROW_COLUMNS})"
                )
        except BaseException:
            self._conn.close()
            raise
        self._executor: ThreadPoolExecutor | None = None
        self._generation = 0  # this process's writes, for caches that PRAGMA data_version misses
        self.files_cache: dict[int, tuple[Any, ...]] = {}  # owned by mnemex.ingest.workspace

    # -- lifecycle -------------------------------------------------------------

    def close(self) -> None:
        with self._lock:
            if self._executor is not None:
                self._executor.shutdown(wait=True)
                self._executor = None
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Store({str(self.path)!r}, namespace={self.namespace!r})"

    @property
    def conn(self) -> sqlite3.Connection:
        if self._conn is None:
            raise InvalidInput("this store is closed; open it again with mnemex.open()")
        return self._conn

    @contextlib.contextmanager
    def _errors(self) -> Iterator[None]:
        """SQLite errors translated; on any error, caches that a rollback may have
        outdated (counts, vectors, workspace files) are dropped."""
        try:
            with translate_errors(self.path, self.settings.busy_timeout):
                yield
        except BaseException:
            self.after_write()
            self._lexicon.invalidate(counts=True)
            raise

    # -- the session surface that ingest/ and transfer build on ------------------

    @contextlib.contextmanager
    def connection(self) -> Iterator[sqlite3.Connection]:
        """The connection, for this thread alone, with errors translated."""
        with self._lock, self._errors():
            yield self.conn

    @contextlib.contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """:meth:`connection` inside one write transaction: all or nothing."""
        with self._lock, self._errors(), write_transaction(self.conn) as conn:
            yield conn

    @property
    def generation(self) -> int:
        """How many times this process has written (see :meth:`after_write`): caches keyed
        on it and on ``PRAGMA data_version`` see every write, this process's included."""
        return self._generation

    def resolve_namespace(self, namespace: NamespaceArg, *, allow_all: bool = False) -> str | None:
        """The namespace a call names (``None``: the store's own; ``ALL``: ``None``, if allowed)."""
        if namespace is None:
            return self.namespace
        if isinstance(namespace, _AllNamespaces):
            if not allow_all:
                raise InvalidInput("this operation works on one namespace; name it")
            return None
        return clean_namespace(namespace)

    def after_write(self) -> None:
        """Note a write by this process: lexicon counts and the vector snapshot are dropped,
        and caches keyed on :attr:`generation` miss."""
        self._generation += 1
        self._lexicon.invalidate()
        if self._vector_index is not None:
            self._vector_index.mark_dirty()

    # -- embeddings -----------------------------------------------------------------

    @property
    def embedder(self) -> Embedder | None:
        """The embedder in use (resolved on first use), or ``None``: lexical only.

        The one the store records it was indexed with unless another is configured
        (then, until :meth:`reindex` or :meth:`embed` switches the store, an
        :class:`~mnemex.embed.Unavailable` that says so); see
        :func:`mnemex.embed.settle`.
        """
        if not self._embedder_ready:
            with self._lock:
                if not self._embedder_ready:
                    wanted: Any = self._embedder_arg
                    if wanted is FROM_SETTINGS:
                        configured = self.settings.embedder != "auto"
                        wanted = embedders.resolve(self.settings) if configured else embedders.AUTO
                    with self.connection() as conn:
                        self._recorded = _recorded_embedder(conn)
                    self._embedder = embedders.settle(wanted, self._recorded, self.settings)
                    self._wanted = self._embedder if wanted is embedders.AUTO else wanted
                    self._embedder_ready = True
        return self._embedder

    def _record_embedder(self, embedder: Embedder) -> None:
        """Record ``embedder`` as the one the store is indexed with (after it stored vectors)."""
        if getattr(embedder, "lazy_dim", False) or isinstance(embedder, embedders.Unavailable):
            return
        record = embedders.describe(embedder)
        if record == self._recorded:
            return
        with self.connection() as conn, write_transaction(conn):
            conn.execute(
                "INSERT OR REPLACE INTO meta (key, value) VALUES ('embedder', ?)",
                (json.dumps(record, sort_keys=True),),
            )
        self._recorded = record

    def _vectors(self, dim: int) -> VectorIndex:
        """The in-process index of the configured model's vectors."""
        embedder = self.embedder
        assert embedder is not None
        index = self._vector_index
        if index is None or index.model != embedder.model_id or index.dim != dim:
            from mnemex.index import ann
            from mnemex.index.vectors import VectorIndex, snapshot_path

            in_memory = str(self.path) == ":memory:"
            snapshot = None if in_memory else snapshot_path(self.path, embedder.model_id)
            index = VectorIndex(self.conn, embedder.model_id, dim, snapshot=snapshot)
            if self.settings.ann != "off" and ann.available():
                index.ann = ann.HnswIndex.load(ann.sidecar(self.path, embedder.model_id), dim)
            self._vector_index = index
        return index

    def _update_ann(self, embedder: Embedder) -> None:
        """Build or extend the HNSW index once the store is past ``ann_threshold`` vectors."""
        from mnemex.index import ann

        if self.settings.ann == "off" or not ann.available():
            return
        with self.connection():
            index = self._vectors(embedder.dim)
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
        with self._lock:
            index.ann = graph

    def embed(
        self, *, progress: Callable[[int], None] | None = None, force: bool = False
    ) -> EmbedReport:
        """Give every memory (all namespaces) a vector for the configured model.

        Only memories without one are embedded unless ``force``, which first
        drops the model's vectors (after a model file changed under the same
        id). Raises :class:`~mnemex.errors.EmbeddingError` when embedding
        fails; what was stored before the failure stays. A configured embedder
        other than the store's becomes the store's once all is embedded; a
        provider skipped after a recent failure is tried again at once.
        """
        from mnemex.index import embeddings as vectors

        self.embedder  # noqa: B018 - resolves the embedder to switch to, too
        embedder = self._wanted
        if embedder is None:
            raise EmbeddingError(
                "no embedder is configured: install mnemex[embed] for the local model, or set "
                "embedder (MNEMEX_EMBEDDER) to sentence-transformers or openai"
            )
        if isinstance(embedder, embedders.Unavailable):
            raise EmbeddingError(embedder.reason)
        breaker = getattr(embedder, "breaker", None)
        if breaker is not None:
            breaker.reset()  # asked for now: try the provider even if it failed a moment ago
        report = vectors.EmbedReport(model=embedder.model_id)
        # The store's lock is held for each use of the connection, not while the model
        # runs: other threads keep searching during a long embedding pass.
        with self.connection() as conn:
            if force:
                with write_transaction(conn):
                    conn.execute("DELETE FROM embeddings WHERE model = ?", (embedder.model_id,))
                self.after_write()
            else:
                self._check_dimension(embedder)
        last = 0
        while True:
            with self.connection() as conn:
                batch = vectors.pending(conn, embedder.model_id, after=last)
            if not batch:
                break
            last = batch[-1].seq
            vectors.embed_and_store(
                self.conn, embedder, batch, report, progress, guard=self.connection
            )
            self.after_write()
        with self.connection() as conn:
            with write_transaction(conn):
                conn.execute("DELETE FROM meta WHERE key = 'embed_backlog'")
            report.pending = vectors.count_pending(conn, embedder.model_id)
        self._record_embedder(embedder)
        if embedder is not self._embedder:
            with self._lock:
                self._embedder = embedder  # the store is switched to it
        self._update_ann(embedder)
        self.last_embedding_error = None
        return report

    def reindex(
        self,
        *,
        progress: Callable[[int], None] | None = None,
        force: bool = False,
        prune: bool = False,
    ) -> EmbedReport | None:
        """Rebuild the full-text index and embed what lacks a vector for the configured model.

        ``force`` re-embeds everything; ``prune`` deletes vectors of other models.
        The embedder configured becomes the store's (recorded once its vectors
        are stored); with none configured, the store's own is used.
        Returns the embedding report, or ``None`` when no embedder is configured.

        The full-text index is compared with a rebuild first, without the
        write lock, and rebuilt (under the lock) only when they differ: the
        triggers keep it in step, so beside other writers a reindex mostly
        only reads.
        """
        self.embedder  # noqa: B018 - resolves the embedder to switch to, too
        target = self._wanted
        if isinstance(target, embedders.Unavailable):
            raise EmbeddingError(target.reason)  # before anything is deleted
        if self._index_differs():
            with self.transaction() as conn:
                conn.execute("INSERT INTO memories_fts (memories_fts) VALUES ('rebuild')")
        if prune and target is not None:
            with self.transaction() as conn:
                conn.execute("DELETE FROM embeddings WHERE model != ?", (target.model_id,))
        if force and target is not None:
            from mnemex.index import ann
            from mnemex.index.vectors import snapshot_path

            ann.sidecar(self.path, target.model_id).unlink(missing_ok=True)
            snapshot_path(self.path, target.model_id).unlink(missing_ok=True)
            if self._vector_index is not None:
                self._vector_index.ann = None
        self.after_write()
        if target is None:
            return None
        return self.embed(progress=progress, force=force)

    def _index_differs(self) -> bool:
        """Whether the full-text index differs from a rebuild (or cannot be read)."""
        with self.connection() as conn:
            try:
                with read_transaction(conn):
                    return any(_index_drift(conn))
            except sqlite3.DatabaseError as exc:
                logger().warning("full-text index unreadable, rebuilding it: %s", exc)
                return True
            finally:
                _drop_check_tables(conn)

    def _check_dimension(self, embedder: Embedder) -> None:
        row = self.conn.execute(
            "SELECT dim FROM embeddings WHERE model = ? AND dim != ? LIMIT 1",
            (embedder.model_id, embedder.dim),
        ).fetchone()
        if row:
            raise IndexMismatch(
                f"the store holds {row[0]}-dimensional vectors for {embedder.model_id}, which now "
                f"gives {embedder.dim} dimensions: run `mnemex reindex --force`"
            )

    def embed_new(
        self,
        seqs: Sequence[int],
        primed: dict[str, Any] | None = None,
        *,
        deadline: float | None = None,
        progress: Callable[[int], None] | None = None,
    ) -> EmbedReport | None:
        """Embed memories just written. On failure they stay stored, marked pending.

        ``primed`` maps texts to vectors already computed (by the duplicate check).
        With a ``deadline`` (``time.monotonic()``), embedding stops once it has
        passed; what is left stays pending for the next sync or ``embed``.
        Returns what was done (``None`` without an embedder or memories).
        """
        embedder = self.embedder
        if embedder is None or not seqs:
            return None
        if primed:
            embedder = _Primed(embedder, primed)
        from mnemex.index import embeddings as vectors

        report = vectors.EmbedReport(model=embedder.model_id)
        try:
            with self.connection() as conn:
                self._check_dimension(embedder)
                rows = vectors.rows_for(conn, seqs, embedder.model_id)
            step = len(rows) if deadline is None else DEADLINE_SLICE
            for start in range(0, len(rows), max(step, 1)):
                if deadline is not None and time.monotonic() > deadline:
                    break
                vectors.embed_and_store(
                    self.conn,
                    embedder,
                    rows[start : start + step],
                    report,
                    progress,
                    self.connection,
                )
            with self.connection() as conn:
                backlog = conn.execute(
                    "SELECT value FROM meta WHERE key = 'embed_backlog'"
                ).fetchone()
            self.after_write()
            if rows:
                self._record_embedder(self.embedder)  # type: ignore[arg-type]
            if backlog and deadline is None:  # an earlier write could not embed: catch up now
                self.embed()
            self.last_embedding_error = None
        except (EmbeddingError, MissingExtra, IndexMismatch) as exc:
            self.after_write()
            self.last_embedding_error = str(exc)
            report.error = str(exc)
            logger().warning("memories stored without vectors (run `mnemex embed`): %s", exc)
            with self.transaction() as conn:
                conn.execute(
                    "INSERT OR REPLACE INTO meta (key, value) VALUES ('embed_backlog', ?)",
                    (str(exc),),
                )
        return report

    # -- writes ----------------------------------------------------------------

    def add(
        self,
        content: str,
        *,
        kind: str = DEFAULT_KIND,
        tags: Iterable[str] | None = None,
        source: str | None = None,
        confidence: float = DEFAULT_CONFIDENCE,
        pinned: bool = False,
        created_at: datetime | str | None = None,
        metadata: Mapping[str, Any] | None = None,
        id: str | None = None,
        namespace: str | None = None,
        embed: bool = True,
        dedup: bool | None = None,
    ) -> str:
        """Store one memory and return its id: see :meth:`remember`, which says more."""
        return self.remember(
            content,
            kind=kind,
            tags=tags,
            source=source,
            confidence=confidence,
            pinned=pinned,
            created_at=created_at,
            metadata=metadata,
            id=id,
            namespace=namespace,
            embed=embed,
            dedup=dedup,
        ).id

    def remember(
        self,
        content: str,
        *,
        kind: str = DEFAULT_KIND,
        tags: Iterable[str] | None = None,
        source: str | None = None,
        confidence: float = DEFAULT_CONFIDENCE,
        pinned: bool = False,
        created_at: datetime | str | None = None,
        metadata: Mapping[str, Any] | None = None,
        id: str | None = None,
        namespace: str | None = None,
        embed: bool = True,
        dedup: bool | None = None,
    ) -> Added:
        """Store one memory unless it repeats one already in the namespace.

        With ``dedup`` (default: the ``dedup`` setting, on) a memory that
        repeats an existing one (same text, normalized BM25 above
        ``dedup_text``, or cosine above ``dedup_cosine`` with embeddings; see
        :mod:`mnemex.dedup`) is merged into it instead of inserted: the result
        has the existing id and ``deduplicated=True``. A memory given its own
        ``id`` is always inserted. Bulk writes (:meth:`add_many`, imports)
        never deduplicate; run :meth:`dedup` after them.
        """
        from mnemex import dedup as dups

        item: dict[str, Any] = {
            "content": content,
            "kind": kind,
            "tags": tags,
            "source": source,
            "confidence": confidence,
            "pinned": pinned,
            "created_at": created_at,
            "metadata": metadata,
            "id": id,
        }
        check = self.settings.dedup if dedup is None else bool(dedup)
        if not check or id is not None:
            return Added(self.add_many([item], namespace=namespace, embed=embed)[0])
        ns = self.resolve_namespace(namespace)
        assert ns is not None
        row = self.prepare_row(item, ns, utcnow(), False)
        text = row[3]
        vector, index = self._dedup_vector(text, row[10]) if embed else (None, None)
        settings = self.settings
        indexed = (text if row[12] is None else row[12], row[4] if row[13] is None else row[13])
        new = dups.NewMemory(ns, text, row[10], indexed)
        seq = 0
        # The lookup runs before the write lock is taken, against a snapshot;
        # under the lock only the rows written since are compared.
        with self.connection() as conn, read_transaction(conn):
            found = dups.lookup(
                conn,
                self._lexicon,
                new,
                text_threshold=settings.dedup_text,
                budget=settings.lexical_budget,
                vector=vector,
                index=index,
                cosine_threshold=settings.dedup_cosine,
            )
        with self.transaction() as conn:
            match = found.match
            seen = found.seen
            if match is not None and not dups.still_there(conn, match, ns):
                match, seen = None, 0  # forgotten or moved since: compare with every row
            if match is None:
                match = dups.recheck(
                    conn, self._lexicon, new, seen, text_threshold=settings.dedup_text
                )
            if match is not None:
                dups.merge(
                    conn,
                    match,
                    content=text,
                    tags=json.loads(row[4]),
                    confidence=row[6],
                    pinned=bool(row[7]),
                    created_at=row[8],
                    source=row[5],
                    duplicate_id=None,
                    max_bytes=settings.max_content_bytes,
                )
            else:
                cursor = conn.execute(
                    f"INSERT INTO memories ({_ROW_COLUMNS}) VALUES ({','.join('?' * 14)})", row
                )
                assert cursor.lastrowid is not None
                seq = cursor.lastrowid
        self.after_write()
        if match is not None:
            logger().info(
                "merged a new memory into %s (%s %.3f)", match.id, match.by, match.similarity
            )
            return Added(match.id, True, match.similarity, match.by)
        if embed:
            self.embed_new([seq], primed=None if vector is None else {text: vector})
        return Added(row[0])

    def _dedup_vector(self, text: str, digest: str) -> tuple[Any, VectorIndex | None]:
        """The new text's vector and the index to compare it with (``None`` without vectors).

        A text already embedded (in any namespace) is not embedded again.
        """
        embedder = self.embedder
        if embedder is None:
            return None, None
        import numpy as np

        from mnemex.embed import embed_checked

        try:
            with self.connection() as conn:
                self._check_dimension(embedder)
                known = conn.execute(
                    "SELECT vector FROM embeddings WHERE model = ? AND content_hash = ? "
                    "AND dim = ? LIMIT 1",
                    (embedder.model_id, digest, embedder.dim),
                ).fetchone()
            if known is not None and len(known[0]) == 4 * embedder.dim:
                vector = np.frombuffer(known[0], dtype=np.float32)
            else:
                vector = embed_checked(embedder, [text])[0]
            return vector, self._vectors(int(vector.shape[0]))
        except (EmbeddingError, MissingExtra, IndexMismatch) as exc:
            # The write that follows reports the embedder's failure; it is not said twice.
            logger().debug("duplicate check without vectors: %s", exc)
            return None, None

    def add_many(
        self,
        items: Iterable[Mapping[str, Any] | str],
        *,
        namespace: str | None = None,
        keep_namespaces: bool = False,
        on_conflict: Conflict = "error",
        embed: bool = True,
    ) -> list[str]:
        """Store many memories in one transaction: all of them, or none on any error.

        Each item is the text of a memory or a mapping with the keyword
        arguments of :meth:`add`. Ids given by the caller must be new unless
        ``on_conflict="skip"``, which leaves existing ids untouched and
        returns them as they are. With ``keep_namespaces`` an item's own
        ``namespace`` key is honoured.

        Once stored, new memories are embedded (when an embedder is
        configured and ``embed`` is true), outside the write transaction. If
        embedding fails the memories stay stored without vectors, the error
        is in :attr:`last_embedding_error`, and the next write or
        :meth:`embed` catches up.
        """
        ns = self.resolve_namespace(namespace)
        assert ns is not None
        now = utcnow()
        now_text = format_time(now)
        if isinstance(items, str | bytes | Mapping) or not isinstance(items, Iterable):
            raise InvalidInput(
                f"items must be a list of memories (text or mappings), got {type(items).__name__}; "
                "store one memory with add()"
            )
        items = items if isinstance(items, Sequence) else list(items)

        def prepared() -> Iterator[list[tuple[Any, ...]]]:
            chunk: list[tuple[Any, ...]] = []
            for index, item in enumerate(items):
                try:
                    chunk.append(self.prepare_row(item, ns, now, keep_namespaces, now_text))
                except InvalidInput as exc:
                    if len(items) > 1:
                        exc.args = (f"item {index}: {exc}",)
                    raise
                if len(chunk) >= WRITE_CHUNK:
                    yield chunk
                    chunk = []
            if chunk:
                yield chunk

        if not items:
            return []
        with self.connection():
            _, ids, seqs = self._write(prepared(), on_conflict)
        self.after_write()
        if embed:
            self.embed_new(seqs)
        return ids

    def prepare_row(
        self,
        item: Mapping[str, Any] | str,
        ns: str,
        now: datetime,
        keep_namespaces: bool,
        now_text: str | None = None,
    ) -> tuple[Any, ...]:
        """Validate one item into a row of ``_ROW_COLUMNS``."""
        if isinstance(item, str):
            item = {"content": item}
        elif not isinstance(item, Mapping):
            raise InvalidInput(f"a memory must be text or a mapping, got {type(item).__name__}")
        if not _INPUT_KEYS.issuperset(item):
            unknown = set(item) - _INPUT_KEYS
            raise InvalidInput(
                f"unknown field(s) {', '.join(sorted(unknown))}; known: "
                f"{', '.join(sorted(_INPUT_KEYS - {'content_hash'}))}"
            )
        if "content" not in item:
            raise InvalidInput("a memory needs a 'content' field")
        get = item.get
        content = clean_content(item["content"], self.settings.max_content_bytes)
        kind = get("kind")
        kind = DEFAULT_KIND if kind is None else clean_label(kind, "kind", 40)
        tags_json, fts_tags = tags_columns(clean_tags(get("tags")))
        source = get("source")
        if source is not None:
            source = _clean_source(source)
        confidence = get("confidence")
        confidence = DEFAULT_CONFIDENCE if confidence is None else clean_confidence(confidence)
        pinned = get("pinned") or False
        if not isinstance(pinned, bool | int):
            raise InvalidInput(f"pinned must be true or false, got {pinned!r}")
        created = get("created_at")
        updated = get("updated_at")
        now_text = now_text or format_time(now)
        if created is None:
            created_text = now_text
        else:
            created_text = format_time(parse_time(created, what="created_at"))
        if updated is not None:
            updated_text = format_time(parse_time(updated, what="updated_at"))
        else:
            updated_text = created_text if created is not None else now_text
        metadata = get("metadata")
        metadata = (
            "{}" if metadata is None else clean_metadata(metadata, self.settings.max_content_bytes)
        )
        ident = get("id")
        ident = new_id() if ident is None else clean_id(ident)
        row_ns = ns
        if keep_namespaces and get("namespace") is not None:
            row_ns = clean_namespace(item["namespace"])
        return (
            ident,
            row_ns,
            kind,
            content,
            tags_json,
            source,
            confidence,
            int(bool(pinned)),
            created_text,
            updated_text,
            content_hash(content),
            metadata,
            segment(content),
            fts_tags,
        )

    def insert_prepared(
        self, rows: Sequence[tuple[Any, ...]], on_conflict: Conflict
    ) -> tuple[int, list[int]]:
        """Insert prepared rows in one transaction; returns how many were new and their seqs."""
        chunks = (list(rows[i : i + WRITE_CHUNK]) for i in range(0, len(rows), WRITE_CHUNK))
        count, _, seqs = self._write(chunks, on_conflict)
        return count, seqs

    def _write(
        self, chunks: Iterable[list[tuple[Any, ...]]], on_conflict: Conflict
    ) -> tuple[int, list[str], list[int]]:
        """Insert chunks of prepared rows in one transaction: all or nothing.

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
            before = conn.execute("SELECT coalesce(max(seq), 0) FROM memories").fetchone()[0]
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
        before = self.conn.execute("SELECT coalesce(max(seq), 0) FROM memories").fetchone()[0]
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
        rows = conn.execute("SELECT count(*) FROM memories").fetchone()[0]
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
            f"INSERT INTO temp.mnemex_staging ({_ROW_COLUMNS}) VALUES ({','.join('?' * 14)})",
            rows,
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
                f"INSERT INTO memories ({_ROW_COLUMNS}) "
                f"SELECT {_ROW_COLUMNS} FROM temp.mnemex_staging ORDER BY rowid"
            )
        else:
            sql = f"""INSERT INTO memories ({_ROW_COLUMNS})
                SELECT {_ROW_COLUMNS} FROM temp.mnemex_staging AS s
                WHERE s.rowid IN (SELECT min(rowid) FROM temp.mnemex_staging GROUP BY id)
                  AND NOT EXISTS (SELECT 1 FROM memories AS m WHERE m.id = s.id)
                ORDER BY s.rowid"""
        # One INSERT ... SELECT per chunk: the FTS5 trigger then buffers the chunk
        # instead of flushing an index segment per row (a statement per row does).
        count = conn.execute(sql).rowcount
        conn.execute("DELETE FROM temp.mnemex_staging")
        return int(count)

    def update(
        self,
        id: str,
        *,
        content: Any = _UNSET,
        kind: Any = _UNSET,
        tags: Any = _UNSET,
        source: Any = _UNSET,
        confidence: Any = _UNSET,
        pinned: Any = _UNSET,
        metadata: Any = _UNSET,
        created_at: Any = _UNSET,
        namespace: str | None = None,
        embed: bool = True,
    ) -> Memory:
        """Change fields of one memory; returns it as stored. Unknown ids raise.

        New content drops the memory's vectors and embeds it again (when an
        embedder is configured and ``embed`` is true). The content of a chunk
        of a workspace file cannot be changed here: its file is the truth.
        """
        ns = self.resolve_namespace(namespace)
        assert ns is not None
        ident = clean_id(id)
        sets: dict[str, Any] = {}
        if content is not _UNSET:
            text = clean_content(content, self.settings.max_content_bytes)
            sets.update(content=text, content_hash=content_hash(text), fts_content=segment(text))
        if kind is not _UNSET:
            sets["kind"] = clean_label(kind, "kind", 40)
        if tags is not _UNSET:
            tags_json, fts_tags = tags_columns(clean_tags(tags))
            sets.update(tags=tags_json, fts_tags=fts_tags)
        if source is not _UNSET:
            sets["source"] = None if source is None else _clean_source(source)
        if confidence is not _UNSET:
            sets["confidence"] = clean_confidence(confidence)
        if pinned is not _UNSET:
            sets["pinned"] = int(bool(pinned))
        if metadata is not _UNSET:
            sets["metadata"] = clean_metadata(metadata, self.settings.max_content_bytes)
        if created_at is not _UNSET:
            sets["created_at"] = format_time(parse_time(created_at, what="created_at"))
        sets["updated_at"] = format_time(utcnow())
        assignments = ", ".join(f"{k} = ?" for k in sets)
        with self.transaction() as conn:
            if "content" in sets:
                place = conn.execute(
                    "SELECT f.path FROM memories AS m JOIN chunks AS c ON c.seq = m.seq "
                    "JOIN files AS f ON f.id = c.file_id WHERE m.id = ? AND m.namespace = ?",
                    (ident, ns),
                ).fetchone()
                if place:
                    raise InvalidInput(
                        f"memory {ident} is a chunk of the workspace file {place[0]}: edit the "
                        "file (the next sync or search indexes it), not the chunk"
                    )
            cursor = conn.execute(
                f"UPDATE memories SET {assignments} WHERE id = ? AND namespace = ?",
                [*sets.values(), ident, ns],
            )
            if cursor.rowcount == 0:
                raise UnknownMemory([ident], ns)
            row = conn.execute(
                f"SELECT {_FIELDS}, seq FROM memories WHERE id = ?", (ident,)
            ).fetchone()
        self.after_write()
        if "content" in sets and embed:
            self.embed_new([row[-1]])
        return _memory(row)

    def dedup(
        self,
        *,
        dry_run: bool = False,
        namespace: str | None = None,
        progress: Callable[[int], None] | None = None,
    ) -> DedupReport:
        """Find memories that repeat an older one in the namespace and merge them.

        Each duplicate is folded into the older memory as a write-time
        duplicate would be (see :mod:`mnemex.dedup`), then moved, unchanged,
        to the namespace ``<namespace>/duplicates`` with ``duplicate_of`` in
        its metadata: it leaves searches but nothing is deleted. With
        ``dry_run`` only the pairs are reported. ``progress`` is called with
        the number of memories checked since the last call.
        """
        from mnemex import dedup as dups

        ns = self.resolve_namespace(namespace)
        assert ns is not None
        moved_to = f"{ns}/duplicates"
        settings = self.settings
        index = None
        embedder = self.embedder
        if embedder is not None:
            try:
                with self.connection():
                    self._check_dimension(embedder)
                index = self._vectors(embedder.dim)
            except IndexMismatch as exc:
                logger().warning("dedup without vectors: %s", exc)
        with self.connection() as conn:
            rows = conn.execute(
                "SELECT seq, id, content, content_hash FROM memories WHERE namespace = ? "
                "AND seq NOT IN (SELECT seq FROM chunks) ORDER BY seq",
                (ns,),
            ).fetchall()
        pairs: list[DuplicatePair] = []
        for count, (seq, ident, content, digest) in enumerate(rows, start=1):
            if progress is not None and count % 100 == 0:
                progress(100)
            with self.transaction() as conn:
                if not conn.execute(
                    "SELECT 1 FROM memories WHERE seq = ? AND namespace = ?", (seq, ns)
                ).fetchone():
                    continue
                vector = None if index is None else index.vectors_of([seq]).get(seq)
                match = dups.find(
                    conn,
                    self._lexicon,
                    seq=seq,
                    content=content,
                    content_hash=digest,
                    namespace=ns,
                    text_threshold=settings.dedup_text,
                    budget=settings.lexical_budget,
                    vector=vector,
                    index=index,
                    cosine_threshold=settings.dedup_cosine,
                    older_only=True,
                )
                if match is None:
                    continue
                pairs.append(DuplicatePair(match.id, ident, match.similarity, match.by))
                if dry_run:
                    continue
                tags, confidence, pinned, created, source = conn.execute(
                    "SELECT tags, confidence, pinned, created_at, source FROM memories "
                    "WHERE seq = ?",
                    (seq,),
                ).fetchone()
                dups.merge(
                    conn,
                    match,
                    content=content,
                    tags=json.loads(tags),
                    confidence=confidence,
                    pinned=bool(pinned),
                    created_at=created,
                    source=source,
                    duplicate_id=ident,
                    max_bytes=settings.max_content_bytes,
                )
                conn.execute(
                    "UPDATE memories SET namespace = ?, "
                    "metadata = json_set(metadata, '$.duplicate_of', ?) WHERE seq = ?",
                    (moved_to, match.id, seq),
                )
                # the vector index keys rows by namespace: have it re-read this one
                conn.execute(
                    "INSERT INTO vector_log (op, embedding_id, seq) VALUES ('touch', NULL, ?)",
                    (seq,),
                )
            self.after_write()
        if progress is not None and len(rows) % 100:
            progress(len(rows) % 100)
        return DedupReport(ns, len(rows), tuple(pairs), dry_run, moved_to)

    def forget(self, ids: Iterable[str] | str, *, namespace: str | None = None) -> ForgetResult:
        """Delete memories by id. Ids not in the namespace are reported in ``missing``."""
        ns = self.resolve_namespace(namespace)
        assert ns is not None
        wanted = _id_list(ids)
        gone: set[str] = set()
        with self.transaction() as conn:
            for chunk in batched(wanted, _CHUNK):
                gone.update(
                    r[0]
                    for r in conn.execute(
                        f"DELETE FROM memories WHERE namespace = ? AND id IN "
                        f"({','.join('?' * len(chunk))}) RETURNING id",
                        [ns, *chunk],
                    ).fetchall()
                )
        self.after_write()
        return ForgetResult(
            forgotten=tuple(i for i in wanted if i in gone),
            missing=tuple(i for i in wanted if i not in gone),
        )

    # -- relations -------------------------------------------------------------

    def relate(
        self,
        subject: str,
        predicate: str,
        object: str,
        *,
        confidence: float = DEFAULT_CONFIDENCE,
        source_memory: str | None = None,
        namespace: str | None = None,
    ) -> Relation:
        """Store ``subject -[predicate]-> object`` in the namespace, or strengthen it.

        Entity names are compared ignoring case and predicates spelled in
        snake_case (``worksOn``, ``works on`` and ``works-on`` are one), so
        relating a known triple again keeps one relation whose confidence is
        the higher of the two. ``source_memory`` names the memory the
        relation was read from; it must be in the namespace.
        """
        ns = self.resolve_namespace(namespace)
        assert ns is not None
        with self.connection():
            return relations_db.relate(
                self.conn, ns, subject, predicate, object, confidence, source_memory
            )

    def neighbors(
        self, entity: str, *, limit: int = 50, namespace: NamespaceArg = None
    ) -> list[Relation]:
        """Relations with ``entity`` (a whole name, any case) as subject or object,
        most confident first."""
        ns = self.resolve_namespace(namespace, allow_all=True)
        with self.connection():
            return relations_db.neighbors(self.conn, entity, ns, limit)

    def forget_relations(
        self, ids: Iterable[str] | str, *, namespace: str | None = None
    ) -> ForgetResult:
        """Delete relations by id; ids not in the namespace are reported in ``missing``."""
        ns = self.resolve_namespace(namespace)
        assert ns is not None
        with self.connection():
            return relations_db.forget_relations(self.conn, ids, ns)

    def iter_relations(self, *, namespace: NamespaceArg = None) -> Iterator[Relation]:
        """Every relation of the namespace (or all), oldest first."""
        ns = self.resolve_namespace(namespace, allow_all=True)
        last = 0
        while True:
            with self.connection():
                rows = relations_db.page(self.conn, ns, last, 1000)
            if not rows:
                return
            yield from (relation for _, relation in rows)
            last = rows[-1][0]

    # -- reads -----------------------------------------------------------------

    def get(self, ids: Iterable[str] | str, *, namespace: str | None = None) -> GetResult:
        """Full memories for ``ids`` (one ``IN`` query per 500 ids), in the order asked."""
        from mnemex.search.pipeline import locations

        ns = self.resolve_namespace(namespace)
        wanted = _id_list(ids)
        found: dict[str, Memory] = {}
        with self._lock, self._errors(), read_transaction(self.conn) as conn:
            for chunk in batched(wanted, _CHUNK):
                rows = conn.execute(
                    f"SELECT {_FIELDS}, seq FROM memories WHERE namespace = ? AND id IN "
                    f"({','.join('?' * len(chunk))})",
                    [ns, *chunk],
                ).fetchall()
                places = locations(conn, [row[-1] for row in rows])
                for row in rows:
                    found[row[0]] = dataclasses.replace(_memory(row), location=places.get(row[-1]))
        return GetResult(
            memories=tuple(found[i] for i in wanted if i in found),
            missing=tuple(i for i in wanted if i not in found),
        )

    def timeline(
        self,
        start: datetime | str | None = None,
        end: datetime | str | None = None,
        *,
        kinds: Iterable[str] | str | None = None,
        tags: Iterable[str] | str | None = None,
        limit: int = 20,
        oldest_first: bool = False,
        around: str | None = None,
        before: int = 5,
        after: int = 5,
        namespace: NamespaceArg = None,
    ) -> list[TimelineEntry]:
        """Memories created in ``[start, end)``, newest first: id, time, kind, tags, summary.

        With ``around`` (a memory id) the result is that memory with up to
        ``before`` memories created just before it and ``after`` just after
        it (those within the filters), in place of the ``limit`` newest. An
        ``around`` id not in the namespace raises
        :class:`~mnemex.errors.UnknownMemory`.
        """
        start = None if start is None else parse_time(start, what="start")
        end = None if end is None else parse_time(end, what="end")
        filters = self._filters(namespace, kinds, tags, start, end)
        where, params = filters.sql()
        order = "ASC" if oldest_first else "DESC"
        columns = "m.id, m.created_at, m.kind, m.tags, substr(m.content, 1, 400), m.namespace"
        if around is None:
            limit = _check_limit(limit)
            with self.connection():
                rows = self.conn.execute(
                    f"""SELECT {columns} FROM memories AS m WHERE 1{where}
                        ORDER BY m.created_at {order}, m.seq {order} LIMIT ?""",
                    [*params, limit],
                ).fetchall()
        else:
            anchor_id = clean_id(around)
            for name, value in (("before", before), ("after", after)):
                if (
                    isinstance(value, bool)
                    or not isinstance(value, int)
                    or not 0 <= value <= MAX_SEARCH_LIMIT
                ):
                    raise InvalidInput(
                        f"{name} must be an integer between 0 and {MAX_SEARCH_LIMIT}, got {value!r}"
                    )
            in_ns, ns_params = Filters(filters.namespace).sql()
            with self._lock, self._errors(), read_transaction(self.conn) as conn:
                anchor = conn.execute(
                    f"SELECT m.seq, {columns} FROM memories AS m WHERE m.id = ?{in_ns}",
                    [anchor_id, *ns_params],
                ).fetchone()
                if anchor is None:
                    raise UnknownMemory([anchor_id], filters.namespace or "*")
                seq, created = anchor[0], anchor[2]
                older = conn.execute(
                    f"""SELECT {columns} FROM memories AS m
                        WHERE m.created_at <= ? AND (m.created_at < ? OR m.seq < ?){where}
                        ORDER BY m.created_at DESC, m.seq DESC LIMIT ?""",
                    [created, created, seq, *params, before],
                ).fetchall()
                newer = conn.execute(
                    f"""SELECT {columns} FROM memories AS m
                        WHERE m.created_at >= ? AND (m.created_at > ? OR m.seq > ?){where}
                        ORDER BY m.created_at ASC, m.seq ASC LIMIT ?""",
                    [created, created, seq, *params, after],
                ).fetchall()
            rows = [*reversed(older), anchor[1:], *newer]
            if not oldest_first:
                rows.reverse()
        return [
            TimelineEntry(
                id=r[0],
                created_at=parse_stored_time(r[1]),
                kind=r[2],
                tags=tuple(json.loads(r[3])),
                summary=summarize(r[4]),
                namespace=r[5],
            )
            for r in rows
        ]

    def search(
        self,
        query: str,
        limit: int | None = None,
        *,
        kinds: Iterable[str] | str | None = None,
        tags: Iterable[str] | str | None = None,
        since: datetime | str | None = None,
        until: datetime | str | None = None,
        mode: str | None = None,
        fusion: str | None = None,
        weights: tuple[float, float] | None = None,
        explain: bool = False,
        raw: bool = False,
        snippets: bool = True,
        decay: bool | None = None,
        confidence: bool | None = None,
        mmr: bool | None = None,
        threshold: bool | None = None,
        expand: bool | None = None,
        relations: int | None = None,
        now: datetime | str | None = None,
        namespace: NamespaceArg = None,
    ) -> SearchResult:
        """The memories that best match ``query``, best first.

        ``query`` is any natural-language text. An argument left ``None`` takes
        its setting (:class:`~mnemex.config.SearchOptions` checks them all):
        ``mode`` (``auto``: hybrid with an embedder, else lexical), ``fusion``
        (``rrf``, ``weighted``, ``adaptive``) with ``weights`` = (vector, text),
        the ranking stages of :mod:`mnemex.search.rank` (``decay`` by age from
        ``now``, ``confidence``, ``mmr``, each arm's minimum score
        ``threshold``), ``expand`` (query expansion) and ``relations``: the
        most relations, ranked by BM25 · confidence, returned apart in
        ``SearchResult.relations`` (the memory filters do not apply to them).
        ``explain`` attaches each hit's rank and score in each arm; with
        ``raw`` the query is an FTS5 expression (syntax errors raise
        :class:`~mnemex.errors.InvalidQuery`); ``snippets=False`` is faster.
        """
        from mnemex.search.pipeline import Engine, run_search

        filters = self._filters(namespace, kinds, tags, since, until)
        options = SearchOptions.of(
            self.settings,
            weights,
            threshold,
            limit=limit,
            mode=mode,
            fusion=fusion,
            relations=relations,
            expand=expand,
            decay=decay,
            confidence=confidence,
            mmr=mmr,
        )
        embedder = self.embedder if options.wants_vectors else None
        request = self._request(query, filters, options, embedder, (raw, explain, snippets), now)
        started = time.perf_counter()
        notes, stale = self._freshen(filters.namespace)
        took = (time.perf_counter() - started) * 1000
        with self.connection():
            engine = Engine(self.conn, self._lexicon, self.settings, embedder, self._vectors)
            result = run_search(engine, request)
            started, wanted = time.perf_counter(), options.relations
            found = tuple(
                relations_db.search_relations(
                    self.conn, self._lexicon, result.query, filters.namespace, wanted
                )
                if wanted
                else ()
            )
            took += (time.perf_counter() - started) * 1000
        return dataclasses.replace(
            result,
            query=_echo(result.query),
            notes=(*notes, *result.notes),
            stale=stale,
            relations=found,
            took_ms=result.took_ms + took,
        )

    def _request(
        self,
        query: str,
        filters: Filters,
        options: SearchOptions,
        embedder: Embedder | None,
        flags: tuple[bool, bool, bool],
        now: datetime | str | None,
    ) -> Request:
        """What the pipeline runs: the options, with ``auto`` resolved by whether there is
        an ``embedder``, and the (raw, explain, snippets) ``flags``."""
        from mnemex.search.pipeline import Request

        s, threshold, (raw, explain, snippets) = self.settings, options.threshold, flags
        ranking = Ranking(
            decay=options.decay,
            half_life_days=s.half_life_days,
            confidence=options.confidence,
            mmr=options.mmr,
            mmr_lambda=s.mmr_lambda,
            mmr_similarity=s.mmr_similarity,
            min_text_score=s.min_text_score if threshold else 0.0,
            min_vector_score=s.min_vector_score if threshold else -1.0,
            floor=s.relevance_floor and threshold,
        )
        return Request(
            query=query,
            limit=options.limit,
            filters=filters,
            mode=options.mode_for(embedder is not None),
            fusion=options.fusion,
            rrf_k=options.rrf_k,
            vector_weight=options.vector_weight,
            text_weight=options.text_weight,
            raw=raw,
            explain=explain,
            snippets=snippets,
            ranking=ranking,
            expand=options.expand,
            now=None if now is None else parse_time(now, what="now"),
        )

    def recall(
        self,
        task: str,
        budget_tokens: int | None = None,
        max_memories: int | None = None,
        *,
        kinds: Iterable[str] | str | None = None,
        tags: Iterable[str] | str | None = None,
        since: datetime | str | None = None,
        until: datetime | str | None = None,
        mode: str | None = None,
        decay: bool | None = None,
        mmr: bool | None = None,
        now: datetime | str | None = None,
        token_counter: str | Callable[[str], int] | None = None,
        namespace: NamespaceArg = None,
    ) -> RecallResult:
        """The best memories for ``task`` as a ``## Relevant Memories`` block for a prompt.

        At most ``max_memories`` memories, best first, in at most ``budget_tokens``
        tokens counted by ``token_counter``: ``chars`` (``len / 4``, one a CJK
        character), ``wordpiece`` (the local model's tokenizer) or any callable
        from text to a count; left ``None``, each is its setting (``recall_max``,
        ``recall_budget``, ``token_counter``: 5, 500, chars). A memory that does
        not fit the room left is replaced by its excerpt, the lines around the
        part that matches ``task`` best (``cut`` is then true), or skipped when
        less than ``MIN_EXCERPT_TOKENS`` are left (see :mod:`mnemex.search.recall`).
        """
        from mnemex.search import recall as packing

        options = RecallOptions.of(self.settings, budget_tokens, max_memories, token_counter)
        moment = utcnow() if now is None else parse_time(now, what="now")
        found = self.search(
            task,
            limit=options.candidates,
            kinds=kinds,
            tags=tags,
            since=since,
            until=until,
            mode=mode,
            decay=decay,
            mmr=mmr,
            now=moment,
            snippets=False,
            relations=0,  # a recall block holds memories only
            namespace=namespace,
        )
        with self.connection() as conn:
            bodies = packing.read_bodies(conn, [hit.id for hit in found.hits])
        echoed = _echo(task if isinstance(task, str) else found.query)
        return packing.recall(echoed, found, bodies, options, moment)

    def stats(self, *, namespace: NamespaceArg = None) -> Stats:
        """What the namespace holds (or, with :data:`ALL`, the whole store).

        ``vectors``, ``pending_vectors`` and ``other_models`` count the
        namespace's memories; ``total_memories`` and ``namespaces`` always
        describe the whole file.
        """
        ns = self.resolve_namespace(namespace, allow_all=True)
        with self._lock, self._errors(), read_transaction(self.conn) as conn:
            per_ns = dict(
                conn.execute(
                    "SELECT namespace, count(*) FROM memories GROUP BY namespace ORDER BY namespace"
                ).fetchall()
            )
            where, params = Filters(ns).sql()
            kinds = dict(
                conn.execute(
                    f"SELECT kind, count(*) FROM memories AS m WHERE 1{where} "
                    "GROUP BY kind ORDER BY count(*) DESC, kind",
                    params,
                ).fetchall()
            )
            oldest, newest = conn.execute(
                f"SELECT min(created_at), max(created_at) FROM memories AS m WHERE 1{where}",
                params,
            ).fetchone()
            pages = conn.execute("PRAGMA page_count").fetchone()[0]
            page_size = conn.execute("PRAGMA page_size").fetchone()[0]
            meta = read_meta(conn)
            version = schema_version(conn)
            scoped = (
                "" if ns is None else " JOIN memories AS m ON m.seq = e.seq WHERE m.namespace = ?"
            )
            models = dict(
                conn.execute(
                    f"SELECT e.model, count(*) FROM embeddings AS e{scoped} GROUP BY e.model",
                    [] if ns is None else [ns],
                ).fetchall()
            )
            relation_count = relations_db.count_relations(conn, ns)
            embedder = self.embedder
            model = embedder.model_id if embedder is not None else None
            vector_count = models.pop(model, 0) if model else 0
        wal = self.path.with_name(self.path.name + "-wal")
        count = sum(per_ns.values()) if ns is None else per_ns.get(ns, 0)
        return Stats(
            path=str(self.path),
            namespace="*" if ns is None else ns,
            memories=count,
            total_memories=sum(per_ns.values()),
            namespaces=per_ns,
            kinds=kinds,
            oldest=parse_stored_time(oldest) if oldest else None,
            newest=parse_stored_time(newest) if newest else None,
            size_bytes=pages * page_size + (wal.stat().st_size if wal.exists() else 0),
            schema_version=version,
            tokenizer=meta.get("tokenizer", ""),
            embedder=model,
            vectors=vector_count,
            pending_vectors=count - vector_count if model else 0,
            other_models=models,
            relations=relation_count,
        )

    def iter_memories(
        self, *, namespace: NamespaceArg = None, batch: int = 1000
    ) -> Iterator[Memory]:
        """Every memory of the namespace (or all), oldest first, read in batches."""
        ns = self.resolve_namespace(namespace, allow_all=True)
        if isinstance(batch, bool) or not isinstance(batch, int) or not 1 <= batch <= 100_000:
            raise InvalidInput(f"batch must be an integer between 1 and 100000, got {batch!r}")
        where, params = Filters(ns).sql()
        last = 0
        while True:
            with self.connection():
                rows = self.conn.execute(
                    f"SELECT seq, {_FIELDS} FROM memories AS m WHERE seq > ?{where} "
                    "ORDER BY seq LIMIT ?",
                    [last, *params, batch],
                ).fetchall()
            if not rows:
                return
            for row in rows:
                yield _memory(row[1:])
            last = rows[-1][0]

    def count(self, *, namespace: NamespaceArg = None) -> int:
        ns = self.resolve_namespace(namespace, allow_all=True)
        where, params = Filters(ns).sql()
        with self.connection():
            return int(
                self.conn.execute(
                    f"SELECT count(*) FROM memories AS m WHERE 1{where}", params
                ).fetchone()[0]
            )

    def check(self) -> dict[str, Any]:
        """Verify the store: SQLite and FTS5 integrity, and that the full-text index
        holds exactly what a rebuild from the memories table would (no ghost rows).

        Reads every row: meant for ``mnemex check`` and tests, not hot paths.
        """

        problems: list[str] = []
        with self.connection():
            conn = self.conn
            result = conn.execute("PRAGMA integrity_check").fetchone()[0]
            if result != "ok":
                problems.append(f"sqlite integrity_check: {result}")
            for table in ("memories_fts", "relations_fts"):
                try:
                    conn.execute(f"INSERT INTO {table} ({table}) VALUES ('integrity-check')")
                except sqlite3.DatabaseError as exc:
                    problems.append(f"fts5 integrity-check of {table}: {exc}")
            try:
                with read_transaction(conn):
                    extra, absent, ghost_docs = _index_drift(conn)
                    tag_rows = (
                        conn.execute(
                            "SELECT count(*) FROM ("
                            "SELECT tag, seq FROM memory_tags EXCEPT "
                            "SELECT j.value, m.seq FROM memories AS m, json_each(m.tags) AS j) "
                        ).fetchone()[0]
                        + conn.execute(
                            "SELECT count(*) FROM ("
                            "SELECT j.value, m.seq FROM memories AS m, json_each(m.tags) AS j EXCEPT "
                            "SELECT tag, seq FROM memory_tags)"
                        ).fetchone()[0]
                    )
                    rows = conn.execute("SELECT count(*) FROM memories").fetchone()[0]
                    orphans, short = conn.execute(
                        """SELECT
                            (SELECT count(*) FROM chunks WHERE file_id NOT IN
                                (SELECT id FROM files)),
                            (SELECT count(*) FROM files AS f WHERE f.chunks !=
                                (SELECT count(*) FROM chunks AS c WHERE c.file_id = f.id))"""
                    ).fetchone()
            finally:
                _drop_check_tables(conn)
        if extra:
            problems.append(f"full-text index has {extra} postings no memory explains")
        if absent:
            problems.append(f"full-text index lacks {absent} postings of stored memories")
        if ghost_docs:
            problems.append(f"full-text index has {ghost_docs} ghost rows")
        if tag_rows:
            problems.append(f"tag index differs from memories in {tag_rows} rows")
        if orphans:
            problems.append(f"{orphans} workspace chunks belong to no file")
        if short:
            problems.append(
                f"{short} workspace files lack chunks they had (forgotten?): run `mnemex sync DIR`"
            )
        return {"ok": not problems, "memories": rows, "problems": problems}

    # -- markdown workspaces ------------------------------------------------------

    def sync(
        self,
        directory: str | os.PathLike[str],
        *,
        globs: Iterable[str] | None = None,
        ignore: Iterable[str] | None = None,
        embed: bool = True,
        progress: Callable[[str, int, int], None] | None = None,
        namespace: str | None = None,
    ) -> SyncReport:
        """Index the markdown workspace in ``directory`` and keep it true to the files.

        The first call registers the folder as a workspace of the namespace
        with ``globs`` (default ``MEMORY.md``, ``memory.md``,
        ``memory/**/*.md``) and ``ignore`` patterns (default hidden files and
        folders); later calls reuse them unless given again. Unchanged files
        are skipped by size and mtime, then by SHA-256; unchanged chunks keep
        their ids and vectors; chunks of deleted files are removed; renamed
        files move without re-embedding (see :mod:`mnemex.ingest.workspace`).
        Files that cannot be indexed (not UTF-8, unreadable) are reported in
        ``problems`` and the rest is indexed. ``progress(phase, done, total)``
        is called while reading files and while embedding chunks.
        """
        from mnemex.ingest import workspace as spaces

        ns = self.resolve_namespace(namespace)
        assert ns is not None
        root = spaces.resolve_root(directory)
        settings = self.settings
        chunking = spaces.chunking_key(settings.chunk_tokens, settings.chunk_overlap)
        with self.transaction() as conn:
            old = spaces.find(conn, root, ns)
            ws = spaces.register(
                conn,
                root,
                ns,
                _patterns(globs, "globs") if globs is not None
                else old.globs if old else settings.workspace_globs,
                _patterns(ignore, "ignore", empty=True) if ignore is not None
                else old.ignore if old else settings.workspace_ignore,
                old.chunking if old else chunking,  # a new chunking once every file has it
            )  # fmt: skip
        rechunk = ws.chunking != chunking
        with self._errors():
            return spaces.sync(
                self,
                dataclasses.replace(ws, chunking=chunking),
                embed=embed,
                progress=progress,
                rechunk=rechunk,
            )

    def remove_workspace(
        self, directory: str | os.PathLike[str], *, namespace: str | None = None
    ) -> int:
        """Stop indexing a workspace: delete its files' records and chunks (never the files).

        Returns the number of chunks removed; raises when the folder is no
        workspace of the namespace.
        """
        from mnemex.ingest import workspace as spaces

        ns = self.resolve_namespace(namespace)
        assert ns is not None
        root = spaces.resolve_root(directory, must_exist=False)
        with self.transaction() as conn:
            ws = spaces.find(conn, root, ns)
            if ws is None:
                raise InvalidInput(f"{root} is not a workspace of namespace {ns!r}")
            removed = spaces.remove(conn, ws)
        self.after_write()
        return removed

    def workspace_status(
        self, directory: str | os.PathLike[str] | None = None, *, namespace: NamespaceArg = None
    ) -> tuple[WorkspaceStatus, ...]:
        """Each workspace of the namespace (or ``ALL``, or only ``directory``): files,
        chunks, problems, pending vectors, the last sync, and how many files differ on
        disk now (a scan of sizes and mtimes)."""
        from mnemex.ingest import workspace as spaces

        ns = self.resolve_namespace(namespace, allow_all=True)
        with self.connection() as conn:
            found = spaces.listed(conn, ns)
        if directory is not None:
            root = spaces.resolve_root(directory, must_exist=False)
            found = [ws for ws in found if ws.root == root]
            if not found:
                raise InvalidInput(
                    f"{root} is not a workspace of namespace {ns or '*'!r}: "
                    f"run `mnemex sync {directory}` first"
                )
        return tuple(spaces.status(self, ws) for ws in found)

    def add_to_workspace(
        self,
        content: str,
        directory: str | os.PathLike[str],
        *,
        kind: str | None = None,
        tags: Iterable[str] | None = None,
        created_at: datetime | str | None = None,
        namespace: str | None = None,
    ) -> Appended:
        """Write a memory through to a workspace: append it to the daily file
        ``memory/YYYY-MM-DD.md`` (local date of ``created_at``, default now) as a
        ``## HH:MM · kind · #tags`` entry, and index that file. The memory is then the
        chunk (or chunks) holding the entry: ``result.ids``. A folder not yet
        synced is synced first."""
        from mnemex.ingest import workspace as spaces

        ns = self.resolve_namespace(namespace)
        assert ns is not None
        root = spaces.resolve_root(directory)
        label = None if kind is None else clean_label(kind, "kind", 40)
        when = utcnow() if created_at is None else parse_time(created_at, what="created_at")
        try:
            when.astimezone()  # the daily file is named by the local date
        except OverflowError:
            raise InvalidInput(
                f"created_at {created_at!r} has no local date: times must fall in the years "
                "1 to 9999 in local time too"
            ) from None
        with self.connection() as conn:
            ws = spaces.find(conn, root, ns)
        if ws is None:
            self.sync(root, namespace=ns)
            with self.connection() as conn:
                ws = spaces.find(conn, root, ns)
            assert ws is not None
        with self._errors():
            return spaces.append(self, ws, content, kind=label, tags=clean_tags(tags), when=when)

    def watch(
        self,
        directory: str | os.PathLike[str],
        *,
        debounce: float | None = None,
        stop: threading.Event | None = None,
        on_sync: Callable[[SyncReport], None] | None = None,
        namespace: str | None = None,
    ) -> None:
        """Sync a workspace, then again after each change (``debounce`` seconds of quiet,
        default 1.5), until ``stop`` is set or the process is interrupted. Needs
        ``mnemex[watch]``; see :mod:`mnemex.ingest.watch`."""
        from mnemex.ingest import watch

        watch.watch(
            self,
            directory,
            debounce=self.settings.watch_debounce if debounce is None else debounce,
            stop=stop,
            on_sync=on_sync,
            namespace=namespace,
        )

    def _freshen(self, namespace: str | None) -> tuple[list[str], bool]:
        """Before a search: sync the workspaces it reads that changed, within
        ``sync_timeout``. Returns notes and whether the results may be stale."""
        where, params = ("WHERE namespace = ?", (namespace,)) if namespace is not None else ("", ())
        with self.connection() as conn:  # most stores have no workspace: skip the module's import
            if conn.execute(f"SELECT 1 FROM workspaces {where} LIMIT 1", params).fetchone() is None:
                return [], False
        from mnemex.ingest import workspace as spaces

        with self.connection() as conn:
            found = spaces.listed(conn, namespace)
        if not found:
            return [], False
        settings = self.settings
        deadline = time.monotonic() + settings.sync_timeout
        notes: list[str] = []
        for ws in found:
            try:
                note = spaces.refresh(self, ws, deadline, settings.sync_on_search)
            except (MnemexError, OSError) as exc:
                note = f"the workspace {ws.root} could not be synced ({exc}): results may be stale"
            if note:
                notes.append(note)
        return notes, bool(notes)

    def _filters(
        self,
        namespace: NamespaceArg,
        kinds: Iterable[str] | str | None,
        tags: Iterable[str] | str | None,
        since: datetime | str | None,
        until: datetime | str | None,
    ) -> Filters:
        return Filters(
            namespace=self.resolve_namespace(namespace, allow_all=True),
            kinds=tuple(
                dict.fromkeys(
                    clean_label(k, "kind", 40)
                    for k in (() if kinds is None else listed(kinds, "kinds"))
                )
            ),
            tags=clean_tags(tags),
            since=None if since is None else parse_time(since, what="since"),
            until=None if until is None else parse_time(until, what="until"),
        )


def _recorded_embedder(conn: sqlite3.Connection) -> dict[str, Any] | None:
    """The embedder the store records it was indexed with, if any.

    A store written before embedders were recorded is taken to be indexed with
    the model most of its vectors are from (known by its id and dimension only).
    """
    row = conn.execute("SELECT value FROM meta WHERE key = 'embedder'").fetchone()
    if row is not None:
        with contextlib.suppress(ValueError, TypeError):
            record = json.loads(row[0])
            if isinstance(record, dict) and record.get("model_id"):
                return record
    legacy = conn.execute(
        "SELECT model, count(*) FROM embeddings GROUP BY model ORDER BY count(*) DESC LIMIT 1"
    ).fetchone()
    if legacy is None:
        return None
    dim = conn.execute("SELECT dim FROM embeddings WHERE model = ? LIMIT 1", (legacy[0],))
    record = {"model_id": legacy[0], "dim": dim.fetchone()[0]}
    from mnemex.embed.local import LocalEmbedder

    local = LocalEmbedder()
    if legacy[0] == local.model_id:
        record.update(local.describe())
    return record


class _Primed:
    """An embedder that answers texts it was given vectors for without the model."""

    def __init__(self, embedder: Embedder, vectors: dict[str, Any]) -> None:
        self._embedder = embedder
        self._vectors = vectors
        self.model_id = embedder.model_id
        self.dim = embedder.dim

    def embed(self, texts: Sequence[str]) -> Any:
        import numpy as np

        if all(t in self._vectors for t in texts):
            return np.stack([self._vectors[t] for t in texts])
        return self._embedder.embed(texts)


def _patterns(values: Iterable[str] | str, what: str, *, empty: bool = False) -> tuple[str, ...]:
    items = [values] if isinstance(values, str) else list(values)
    try:
        patterns = check_patterns(items, what)
    except ValueError as exc:
        raise InvalidInput(str(exc)) from None
    if not patterns and not empty:
        raise InvalidInput(f"{what} needs at least one pattern, such as memory/**/*.md")
    return patterns


def _clean_source(value: object) -> str:
    return clean_name(value, "source", 1000)


def _id_list(ids: Iterable[str] | str) -> list[str]:
    cleaned = [clean_id(i) for i in listed(ids, "ids")]
    if not cleaned:
        raise InvalidInput("no ids given")
    return list(dict.fromkeys(cleaned))


def _echo(given: str) -> str:
    """A query or task as given, or as searched when it is not valid Unicode text (a
    lone surrogate from undecodable command-line bytes would make invalid UTF-8)."""
    try:
        given.encode("utf-8")
    except UnicodeEncodeError:
        return clean_query(given)
    return given


_CHECK_TABLES = ("mnemex_index_v", "mnemex_check_v", "mnemex_check")


def _index_drift(conn: sqlite3.Connection) -> tuple[int, int, int]:
    """How the full-text index differs from a rebuild from the memories table:
    postings no memory explains, postings it lacks, and rows of no memory.

    Reads every row (a fresh tokenization into a temp table) inside the
    caller's read transaction; the temp tables stay until :func:`_drop_check_tables`.
    """
    from mnemex.storage.migrations import TOKENIZER

    _drop_check_tables(conn)
    conn.execute(
        f"CREATE VIRTUAL TABLE temp.mnemex_check USING fts5(content, tags, tokenize='{TOKENIZER}')"
    )
    conn.execute(
        "CREATE VIRTUAL TABLE temp.mnemex_check_v USING fts5vocab(temp, mnemex_check, instance)"
    )
    conn.execute(
        "CREATE VIRTUAL TABLE temp.mnemex_index_v USING fts5vocab(main, memories_fts, instance)"
    )
    conn.execute(
        "INSERT INTO temp.mnemex_check (rowid, content, tags) "
        "SELECT seq, content, tags FROM memories_fts_source"
    )
    extra = conn.execute(
        "SELECT count(*) FROM (SELECT term, doc, col, offset FROM temp.mnemex_index_v "
        "EXCEPT SELECT term, doc, col, offset FROM temp.mnemex_check_v)"
    ).fetchone()[0]
    absent = conn.execute(
        "SELECT count(*) FROM (SELECT term, doc, col, offset FROM temp.mnemex_check_v "
        "EXCEPT SELECT term, doc, col, offset FROM temp.mnemex_index_v)"
    ).fetchone()[0]
    ghost_docs = conn.execute(
        "SELECT count(*) FROM (SELECT DISTINCT doc FROM temp.mnemex_index_v) "
        "WHERE doc NOT IN (SELECT seq FROM memories)"
    ).fetchone()[0]
    return int(extra), int(absent), int(ghost_docs)


def _drop_check_tables(conn: sqlite3.Connection) -> None:
    for table in _CHECK_TABLES:
        conn.execute(f"DROP TABLE IF EXISTS temp.{table}")


def _check_limit(limit: int) -> int:
    return check_count("limit", limit, 1, MAX_SEARCH_LIMIT)


def _memory(row: Sequence[Any]) -> Memory:
    return Memory(
        id=row[0],
        namespace=row[1],
        kind=row[2],
        content=row[3],
        tags=tuple(json.loads(row[4])),
        source=row[5],
        confidence=row[6],
        pinned=bool(row[7]),
        created_at=parse_stored_time(row[8]),
        updated_at=parse_stored_time(row[9]),
        content_hash=row[10],
        metadata=json.loads(row[11]),
    )
