"""Every row of a store as engine-neutral records, read and written in batches: what
:mod:`mnemex.migration` moves between stores and compares.

A record holds what a store keeps of a memory (its fields, its place in a
workspace file, its vectors with their model, window and dimension), of a
relation, a workspace or a workspace file, in the values both engines read back
alike (times as :func:`mnemex.text.format_time` text, metadata as canonical JSON,
vectors as little-endian float16 bytes, the precision a SQLite store keeps, see
:mod:`mnemex.storage.blobs`): records of two stores compare with
``==``. A session's ``copying`` is this class for SQLite and
:class:`mnemex.engine.postgres.copy.PgCopyTables` for PostgreSQL (the engine protocol's
``Session.copying``); statements are
written once with ``?`` marks, as :mod:`mnemex.engine.workspaces`' are.

Writes go through the engines' own write paths (SQLite: the staging table and
the triggers that keep FTS5, the tags and the namespace statistics; PostgreSQL:
:func:`mnemex.engine.postgres.write.insert_rows` and the statement triggers that
keep BM25's postings and statistics), inside the caller's transaction.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import Any, Final, Protocol

from mnemex.engine.workspaces import WorkspaceTables
from mnemex.errors import StoreError
from mnemex.records import dataclass
from mnemex.storage import IN_CHUNK, OPTIMIZE_MAX_ROWS, marks, write_transaction
from mnemex.storage.blobs import half_blob
from mnemex.text import batched

Conn = Any  # a sqlite3.Connection or a psycopg.Connection
STREAM_BATCH: Final = 1_000  # rows fetched at a time by a streaming read


class RowInserter(Protocol):
    """What writing memories needs of the target's session (SQLite's bulk insert)."""

    def insert_rows(self, rows: list[tuple[Any, ...]]) -> list[int]: ...


@dataclass(frozen=True, slots=True)
class Place:
    """Where a chunk memory lives: its workspace (root, in the memory's namespace), file
    and place in the file."""

    root: str
    path: str
    position: int
    heading: str  # JSON list
    start_line: int
    end_line: int


@dataclass(frozen=True, slots=True)
class VectorRecord:
    model: str
    window: int
    dim: int
    content_hash: str
    vector: bytes  # little-endian float16


@dataclass(frozen=True, slots=True)
class MemoryRecord:
    id: str
    namespace: str
    kind: str
    content: str
    tags: tuple[str, ...]
    source: str | None
    confidence: float
    pinned: bool
    created_at: str
    updated_at: str
    content_hash: str
    metadata: str  # canonical JSON
    place: Place | None = None
    vectors: tuple[VectorRecord, ...] = ()

    def item(self) -> dict[str, Any]:
        """The fields as :func:`mnemex.rows.prepare` takes them."""
        return {
            "id": self.id,
            "namespace": self.namespace,
            "kind": self.kind,
            "content": self.content,
            "tags": list(self.tags),
            "source": self.source,
            "confidence": self.confidence,
            "pinned": self.pinned,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "metadata": json.loads(self.metadata),
        }


@dataclass(frozen=True, slots=True)
class RelationRecord:
    id: str
    namespace: str
    subject: str
    predicate: str
    object: str
    subject_key: str
    object_key: str
    confidence: float
    source_memory: str | None
    created_at: str
    updated_at: str


@dataclass(frozen=True, slots=True)
class WorkspaceRecord:
    namespace: str
    root: str
    globs: str
    ignore: str
    chunking: str
    created_at: str
    synced_at: str | None
    last_sync: str


@dataclass(frozen=True, slots=True)
class FileRecord:
    namespace: str
    root: str
    path: str
    size: int
    mtime_ns: int
    read_ns: int
    sha256: str | None
    chunks: int
    error: str | None
    synced_at: str


_MEMORY = """SELECT m.seq, m.id, m.namespace, m.kind, m.content, {tags}, m.source, m.confidence,
        m.pinned, m.created_at, m.updated_at, m.content_hash, {metadata},
        w.root, f.path, c.position, c.heading, c.start_line, c.end_line
    FROM memories AS m LEFT JOIN chunks AS c ON c.seq = m.seq
    LEFT JOIN files AS f ON f.id = c.file_id LEFT JOIN workspaces AS w ON w.id = f.workspace_id"""
_RELATION = """SELECT seq, id, namespace, subject, predicate, object, subject_key, object_key,
        confidence, source_memory, created_at, updated_at FROM relations AS r"""
_COUNTS = """SELECT namespace, 'memories', count(*) FROM memories GROUP BY namespace
    UNION ALL SELECT namespace, 'relations', count(*) FROM relations GROUP BY namespace
    UNION ALL SELECT namespace, 'workspaces', count(*) FROM workspaces GROUP BY namespace
    UNION ALL SELECT w.namespace, 'files', count(*) FROM files AS f
        JOIN workspaces AS w ON w.id = f.workspace_id GROUP BY w.namespace"""
_VECTOR_COUNTS = """SELECT m.namespace, count(*) FROM embeddings AS e
    JOIN memories AS m ON m.seq = e.seq GROUP BY m.namespace"""
_FILE_ID = """SELECT f.id FROM files AS f JOIN workspaces AS w ON w.id = f.workspace_id
    WHERE w.root = ? AND w.namespace = ? AND f.path = ?"""


class CopyTables:
    """Records of a SQLite store, read and written (see the module docstring)."""

    by_id = "m.id"  # the order of ids as Python compares them (code points)
    engine = "SQLite"
    max_dim: int | None = None  # the most dimensions of a vector the engine indexes
    tags_sql = "m.tags"
    metadata_sql = "m.metadata"

    def __init__(self, tables: WorkspaceTables) -> None:
        self.tables = tables

    def sql(self, text: str) -> str:
        return self.tables.sql(text)

    def time_text(self, value: Any) -> str | None:
        return self.tables.time_text(value)

    # -- reads -------------------------------------------------------------------------

    def counts(self, conn: Conn) -> dict[str, dict[str, int]]:
        """Per namespace: its memories, vectors (window rows), relations, workspaces, files."""
        out: dict[str, dict[str, int]] = {}
        for namespace, what, count in conn.execute(_COUNTS).fetchall():
            out.setdefault(str(namespace), {})[str(what)] = int(count)
        for namespace, count in conn.execute(_VECTOR_COUNTS).fetchall():
            out.setdefault(str(namespace), {})["vectors"] = int(count)
        return out

    def holds_anything(self, conn: Conn) -> bool:
        row = conn.execute(
            "SELECT EXISTS (SELECT 1 FROM memories) OR EXISTS (SELECT 1 FROM relations) "
            "OR EXISTS (SELECT 1 FROM workspaces)"
        ).fetchone()
        return bool(row[0])

    def vector_models(self, conn: Conn) -> dict[str, int]:
        """Each model with stored vectors, and its dimension."""
        rows = conn.execute("SELECT model, max(dim) FROM embeddings GROUP BY model").fetchall()
        return {str(m): int(d) for m, d in rows}

    def meta(self, conn: Conn, key: str) -> str | None:
        row = conn.execute(self.sql("SELECT value FROM meta WHERE key = ?"), (key,)).fetchone()
        return None if row is None else str(row[0])

    def set_meta(self, conn: Conn, key: str, value: str | None) -> None:
        """Record ``value`` under ``key`` in the store's meta table (``None``: delete it)."""
        conn.execute(self.sql("DELETE FROM meta WHERE key = ?"), (key,))
        if value is not None:
            conn.execute(self.sql("INSERT INTO meta (key, value) VALUES (?, ?)"), (key, value))

    def _memory_sql(self) -> str:
        return _MEMORY.format(tags=self.tags_sql, metadata=self.metadata_sql)

    def memory_page(self, conn: Conn, after: int, limit: int) -> list[tuple[int, MemoryRecord]]:
        """(seq, record without vectors) of up to ``limit`` memories after seq ``after``."""
        sql = self.sql(f"{self._memory_sql()} WHERE m.seq > ? ORDER BY m.seq LIMIT ?")
        return [(int(r[0]), self.memory(r[1:])) for r in conn.execute(sql, (after, limit))]

    def memories_with_ids(self, conn: Conn, ids: Sequence[str]) -> dict[str, MemoryRecord]:
        """The stored records (with vectors) of those of ``ids`` the store holds."""
        found: dict[str, tuple[int, MemoryRecord]] = {}
        for chunk in batched(ids, IN_CHUNK):
            sql = self.sql(f"{self._memory_sql()} WHERE m.id IN ({marks(len(chunk))})")
            for r in conn.execute(sql, list(chunk)).fetchall():
                found[str(r[1])] = (int(r[0]), self.memory(r[1:]))
        return dict(zip(found, self.with_vectors(conn, list(found.values())), strict=True))

    def memories_by_id(self, conn: Conn, vectors: bool) -> Iterator[MemoryRecord]:
        """Every memory in id order (with its vectors), read a batch at a time."""
        sql = f"{self._memory_sql()} ORDER BY {self.by_id}"
        for rows in self.stream(conn, sql):
            batch = [(int(r[0]), self.memory(r[1:])) for r in rows]
            yield from self.with_vectors(conn, batch) if vectors else (m for _, m in batch)

    def with_vectors(
        self, conn: Conn, batch: Sequence[tuple[int, MemoryRecord]]
    ) -> list[MemoryRecord]:
        """The records of (seq, record) with their vectors, in order."""
        found = self.vectors_of(conn, [seq for seq, _ in batch])
        return [replace(m, vectors=tuple(found.get(seq, ()))) for seq, m in batch]

    def vectors_of(self, conn: Conn, seqs: Sequence[int]) -> dict[int, list[VectorRecord]]:
        """The vectors of each memory, by model and window."""
        found: dict[int, list[VectorRecord]] = {}
        for chunk in batched(seqs, IN_CHUNK):
            rows = conn.execute(
                "SELECT seq, model, window, dim, content_hash, vector FROM embeddings "
                f"WHERE seq IN ({marks(len(chunk))})",
                list(chunk),
            ).fetchall()
            for seq, model, window, dim, digest, vector in rows:
                vector = half_blob(bytes(vector), int(dim))  # float32 rows, from before schema 10
                found.setdefault(int(seq), []).append(
                    VectorRecord(model, int(window), int(dim), digest, vector)
                )
        return {seq: sorted(v, key=lambda r: (r.model, r.window)) for seq, v in found.items()}

    def memory(self, row: Sequence[Any]) -> MemoryRecord:
        """The record of a row of ``_MEMORY`` (seq left out)."""
        place = None
        if row[13] is not None:
            place = Place(
                str(row[12]), str(row[13]), int(row[14]), str(row[15]), int(row[16]), int(row[17])
            )
        return MemoryRecord(
            id=row[0],
            namespace=row[1],
            kind=row[2],
            content=row[3],
            tags=tuple(_json(row[4])),
            source=row[5],
            confidence=float(row[6]),
            pinned=bool(row[7]),
            created_at=str(self.time_text(row[8])),
            updated_at=str(self.time_text(row[9])),
            content_hash=row[10],
            metadata=json.dumps(_json(row[11]), ensure_ascii=False, sort_keys=True),
            place=place,
        )

    def relation_page(self, conn: Conn, after: int, limit: int) -> list[tuple[int, RelationRecord]]:
        sql = self.sql(f"{_RELATION} WHERE seq > ? ORDER BY seq LIMIT ?")
        return [(int(r[0]), self.relation(r[1:])) for r in conn.execute(sql, (after, limit))]

    def relations_by_id(self, conn: Conn) -> Iterator[RelationRecord]:
        for rows in self.stream(conn, f"{_RELATION} ORDER BY {self.by_id.replace('m.', 'r.')}"):
            yield from (self.relation(r[1:]) for r in rows)

    def relation(self, row: Sequence[Any]) -> RelationRecord:
        times = [str(self.time_text(row[9])), str(self.time_text(row[10]))]
        return RelationRecord(*[*row[:7], float(row[7]), row[8], *times])

    def workspaces(self, conn: Conn) -> list[WorkspaceRecord]:
        rows = conn.execute(
            "SELECT namespace, root, globs, ignore, chunking, created_at, synced_at, last_sync "
            "FROM workspaces"
        ).fetchall()
        return sorted(
            (
                WorkspaceRecord(*[*r[:5], str(self.time_text(r[5])), self.time_text(r[6]), r[7]])
                for r in rows
            ),
            key=lambda w: (w.namespace, w.root),
        )

    def files(self, conn: Conn) -> list[FileRecord]:
        rows = conn.execute(
            "SELECT w.namespace, w.root, f.path, f.size, f.mtime_ns, f.read_ns, f.sha256, "
            "f.chunks, f.error, f.synced_at FROM files AS f "
            "JOIN workspaces AS w ON w.id = f.workspace_id"
        ).fetchall()
        records = (
            FileRecord(*[*r[:3], *(int(v) for v in r[3:6]), r[6], int(r[7]), r[8],
                         str(self.time_text(r[9]))])
            for r in rows
        )  # fmt: skip
        return sorted(records, key=lambda f: (f.namespace, f.root, f.path))

    def many(self, conn: Conn, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        """Run ``sql`` (``?`` marks) once per row."""
        conn.executemany(self.sql(sql), rows)

    def stream(self, conn: Conn, sql: str) -> Iterator[list[Any]]:
        """The rows of ``sql``, a batch at a time, from one cursor."""
        cursor = conn.execute(sql)
        while rows := cursor.fetchmany(STREAM_BATCH):
            yield rows

    # -- writes (inside the caller's transaction) ------------------------------------------

    def write_workspaces(
        self, conn: Conn, workspaces: Sequence[WorkspaceRecord], files: Sequence[FileRecord]
    ) -> None:
        """Add the workspaces and files the store lacks (by root and namespace, and path)."""
        for w in workspaces:
            conn.execute(
                self.sql(
                    "INSERT INTO workspaces (root, namespace, globs, ignore, chunking, "
                    "created_at, synced_at, last_sync) VALUES (?, ?, ?, ?, ?, ?, ?, ?) "
                    "ON CONFLICT (root, namespace) DO NOTHING"
                ),
                (w.root, w.namespace, w.globs, w.ignore, w.chunking, w.created_at, w.synced_at,
                 w.last_sync),
            )  # fmt: skip
        for f in files:
            conn.execute(
                self.sql(
                    "INSERT INTO files (workspace_id, path, size, mtime_ns, read_ns, sha256, "
                    "chunks, error, synced_at) SELECT w.id, ?, ?, ?, ?, ?, ?, ?, ? "
                    "FROM workspaces AS w WHERE w.root = ? AND w.namespace = ? "
                    "ON CONFLICT (workspace_id, path) DO NOTHING"
                ),
                (f.path, f.size, f.mtime_ns, f.read_ns, f.sha256, f.chunks, f.error,
                 f.synced_at, f.root, f.namespace),
            )  # fmt: skip

    def write_memories(
        self,
        session: RowInserter,
        conn: Conn,
        rows: list[tuple[Any, ...]],
        records: Sequence[MemoryRecord],
    ) -> dict[str, str]:
        """Insert prepared rows (:func:`mnemex.rows.prepare`, new ids) of ``records``, each
        with its place and vectors. Returns the rows not inserted: id -> the id holding
        its text (SQLite inserts every row)."""
        seqs = session.insert_rows(rows)
        self.write_places(conn, seqs, records)
        self.write_vectors(conn, seqs, records)
        return {}

    def write_places(
        self, conn: Conn, seqs: Sequence[int], records: Sequence[MemoryRecord]
    ) -> None:
        """Chunk rows for the records that are chunks of workspace files (already copied)."""
        file_ids: dict[tuple[str, str, str], int] = {}
        rows = []
        for seq, m in zip(seqs, records, strict=True):
            if m.place is None:
                continue
            p = m.place
            key = (p.root, m.namespace, p.path)
            if key not in file_ids:
                row = conn.execute(self.sql(_FILE_ID), key).fetchone()
                if row is None:
                    raise StoreError(f"the workspace file {p.root}/{p.path} was not copied")
                file_ids[key] = int(row[0])
            rows.append((seq, file_ids[key], p.position, p.heading, p.start_line, p.end_line))
        self.many(
            conn,
            "INSERT INTO chunks (seq, file_id, position, heading, start_line, end_line) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            rows,
        )

    def write_vectors(
        self, conn: Conn, seqs: Sequence[int], records: Sequence[MemoryRecord]
    ) -> None:
        conn.executemany(
            "INSERT INTO embeddings (seq, model, window, dim, content_hash, vector) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            [
                (seq, v.model, v.window, v.dim, v.content_hash, v.vector)
                for seq, m in zip(seqs, records, strict=True)
                for v in m.vectors
            ],
        )

    def write_relations(self, conn: Conn, rows: Sequence[tuple[Any, ...]]) -> set[str]:
        """Insert rows of :func:`mnemex.relations.relation_row`; the ids not inserted (the
        triple is held by another relation)."""
        written = set()
        for row in rows:
            if conn.execute(
                f"INSERT INTO relations (id, namespace, subject, predicate, object, "
                f"subject_key, object_key, confidence, source_memory, created_at, updated_at, "
                f"fts_subject, fts_predicate, fts_object) VALUES ({marks(14)}) "
                "ON CONFLICT DO NOTHING",
                row,
            ).rowcount:
                written.add(row[0])
        return {row[0] for row in rows} - written

    def present(self, conn: Conn, table: str, ids: Sequence[str]) -> set[str]:
        """Which of ``ids`` the table (``memories`` or ``relations``) holds."""
        found: set[str] = set()
        for chunk in batched(ids, IN_CHUNK):
            sql = self.sql(f"SELECT id FROM {table} WHERE id IN ({marks(len(chunk))})")
            found.update(str(r[0]) for r in conn.execute(sql, list(chunk)).fetchall())
        return found

    def finish(self, conn: Conn) -> None:
        """After a copy: what the engine does once (SQLite: merge the full-text indexes
        into one segment each, as a bulk write does when the store has doubled)."""
        rows = int(conn.execute("SELECT count(*) FROM memories").fetchone()[0])
        if rows > OPTIMIZE_MAX_ROWS:
            return  # FTS5's own incremental merging does the work
        with write_transaction(conn):
            conn.execute("INSERT INTO memories_fts (memories_fts) VALUES ('optimize')")
            conn.execute("INSERT INTO relations_fts (relations_fts) VALUES ('optimize')")
            self.set_meta(conn, "fts_optimized_rows", str(rows))


def _json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


SQLITE = CopyTables(WorkspaceTables())
