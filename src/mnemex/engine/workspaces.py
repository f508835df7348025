"""The rows of markdown workspaces: what :mod:`mnemex.ingest.workspace` reads and writes.

A session's ``workspaces`` (this class for SQLite,
:class:`mnemex.engine.postgres.workspaces.PgWorkspaceTables` for PostgreSQL)
holds every statement the shared workspace code runs, over three tables:
``workspaces`` (a folder indexed into a namespace), ``files`` (each file as
last synced: size, mtime, SHA-256, or the error that kept it out) and
``chunks`` (each chunk memory's place in its file, keyed by the memory's
seq). The statements are written once, with ``?`` marks; an engine changes
only what differs: its marks, its driver's errors, what tells that another
connection wrote (:meth:`version`), how a write takes the workspace
(:meth:`lock`), how chunk memories are inserted and how vectors of identical
text are copied. Every method runs on the connection it is given, inside the
caller's transaction or read.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from typing import Any, Protocol

from mnemex.models import Location
from mnemex.storage import IN_CHUNK, marks
from mnemex.text import batched

Conn = Any  # a sqlite3.Connection or a psycopg.Connection

WORKSPACE_COLUMNS = "id, root, namespace, globs, ignore, chunking, synced_at, last_sync"
FILE_DRIFT = """SELECT
    (SELECT count(*) FROM chunks WHERE file_id NOT IN (SELECT id FROM files)),
    (SELECT count(*) FROM files AS f WHERE f.chunks !=
        (SELECT count(*) FROM chunks AS c WHERE c.file_id = f.id))"""
_FILE_PROBLEMS = (
    "{} workspace chunks belong to no file",
    "{} workspace files lack chunks they had (forgotten?): run `mnemex sync DIR`",
)


class RowWriter(Protocol):
    """A session that inserts prepared memory rows in the caller's transaction."""

    def insert_rows(self, rows: list[tuple[Any, ...]]) -> list[int]: ...


class WorkspaceTables:
    """The workspace tables of a SQLite store (one connection, writes under ``BEGIN
    IMMEDIATE``: one writer at a time)."""

    def __init__(self, errors: tuple[type[Exception], ...] = (sqlite3.Error,)) -> None:
        self.errors = errors
        """The driver's errors a write of one file can raise (that file fails, not the sync)."""

    # -- how statements run: what an engine may change ------------------------------------

    def sql(self, text: str) -> str:
        """A statement written with ``?`` marks as this engine's driver takes it."""
        return text

    def _all(self, conn: Conn, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return [tuple(r) for r in conn.execute(self.sql(sql), params).fetchall()]

    def _one(self, conn: Conn, sql: str, params: Sequence[Any] = ()) -> tuple[Any, ...] | None:
        row = conn.execute(self.sql(sql), params).fetchone()
        return None if row is None else tuple(row)

    def _count(self, conn: Conn, sql: str, params: Sequence[Any]) -> int:
        row = self._one(conn, sql, params)
        return int(row[0]) if row else 0

    def _run(self, conn: Conn, sql: str, params: Sequence[Any] = ()) -> int:
        """Run a statement; how many rows it changed."""
        return int(conn.execute(self.sql(sql), params).rowcount)

    def _many(self, conn: Conn, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        conn.executemany(self.sql(sql), rows)

    def time_text(self, value: Any) -> str | None:
        """A time read from a row as the stored text :func:`mnemex.text.format_time` writes."""
        return None if value is None else str(value)

    # -- workspaces --------------------------------------------------------------------------

    def _workspace_row(self, row: tuple[Any, ...]) -> tuple[Any, ...]:
        return (*row[:6], self.time_text(row[6]), row[7])

    def find(self, conn: Conn, root: str, namespace: str) -> tuple[Any, ...] | None:
        """The row (:data:`WORKSPACE_COLUMNS`) of the workspace at ``root`` in the namespace."""
        sql = f"SELECT {WORKSPACE_COLUMNS} FROM workspaces WHERE root = ? AND namespace = ?"
        row = self._one(conn, sql, (root, namespace))
        return None if row is None else self._workspace_row(row)

    def listed(self, conn: Conn, namespace: str | None) -> list[tuple[Any, ...]]:
        """The rows of the namespace's workspaces (every namespace's when ``None``)."""
        where, params = ("WHERE namespace = ?", [namespace]) if namespace is not None else ("", [])
        sql = f"SELECT {WORKSPACE_COLUMNS} FROM workspaces {where} ORDER BY namespace, root"
        return [self._workspace_row(r) for r in self._all(conn, sql, params)]

    def exists(self, conn: Conn, namespace: str | None) -> bool:
        """Whether the namespace (any, when ``None``) has a workspace."""
        where, params = ("WHERE namespace = ?", (namespace,)) if namespace is not None else ("", ())
        return self._one(conn, f"SELECT 1 FROM workspaces {where} LIMIT 1", params) is not None

    def register(
        self,
        conn: Conn,
        root: str,
        namespace: str,
        patterns: tuple[str, str],
        chunking: str,
        now: str,
    ) -> None:
        """Create the workspace, or give it new patterns (JSON lists: globs, ignore) and
        chunking."""
        self._run(
            conn,
            """INSERT INTO workspaces (root, namespace, globs, ignore, chunking, created_at)
               VALUES (?, ?, ?, ?, ?, ?)
               ON CONFLICT (root, namespace) DO UPDATE SET
                   globs = excluded.globs, ignore = excluded.ignore, chunking = excluded.chunking""",
            (root, namespace, *patterns, chunking, now),
        )

    def record_sync(
        self, conn: Conn, workspace_id: int, now: str, report: str, done: bool, chunking: str
    ) -> None:
        """Record a sync's time and report; ``done``: every file is cut as ``chunking`` says."""
        self._run(
            conn,
            "UPDATE workspaces SET synced_at = ?, last_sync = ?, "
            "chunking = CASE WHEN ? THEN ? ELSE chunking END WHERE id = ?",
            (now, report, done, chunking, workspace_id),
        )

    def delete(self, conn: Conn, workspace_id: int) -> None:
        """Delete a workspace, its files' rows and their chunk memories."""
        self._run(conn, "DELETE FROM files WHERE workspace_id = ?", (workspace_id,))
        self._run(conn, "DELETE FROM workspaces WHERE id = ?", (workspace_id,))

    def version(self, conn: Conn, workspace_id: int) -> Any:
        """A value that changes when another connection changes the workspace's files
        (SQLite: ``PRAGMA data_version``, which any other connection's write changes)."""
        return conn.execute("PRAGMA data_version").fetchone()[0]

    def lock(self, conn: Conn, workspace_id: int) -> None:
        """Take the workspace for the rest of the write transaction (SQLite: the
        transaction holds the store's write lock already)."""

    # -- files -------------------------------------------------------------------------------

    def files(self, conn: Conn, workspace_id: int, *, count: bool) -> list[tuple[Any, ...]]:
        """(path, id, size, mtime_ns, read_ns, sha256, chunks, error, actual) of each file;
        ``actual`` its chunk rows counted (with ``count``), else as recorded."""
        actual = (
            "(SELECT count(*) FROM chunks AS c WHERE c.file_id = f.id)" if count else "f.chunks"
        )
        sql = f"""SELECT f.path, f.id, f.size, f.mtime_ns, f.read_ns, f.sha256, f.chunks,
                         f.error, {actual} FROM files AS f WHERE f.workspace_id = ?"""
        return self._all(conn, sql, (workspace_id,))

    def file_count(self, conn: Conn, workspace_id: int) -> int:
        return self._count(
            conn, "SELECT count(*) FROM files WHERE workspace_id = ?", (workspace_id,)
        )

    def recorded_chunks(self, conn: Conn, workspace_id: int) -> int:
        """The chunks the files rows say they have (their real count differs after a forget)."""
        sql = "SELECT coalesce(sum(chunks), 0) FROM files WHERE workspace_id = ?"
        return self._count(conn, sql, (workspace_id,))

    def chunk_count(self, conn: Conn, workspace_id: int) -> int:
        sql = "SELECT count(*) FROM chunks WHERE file_id IN (SELECT id FROM files WHERE workspace_id = ?)"
        return self._count(conn, sql, (workspace_id,))

    def problems(self, conn: Conn, workspace_id: int) -> list[tuple[str, str]]:
        """(path, error) of each file that could not be indexed."""
        sql = "SELECT path, error FROM files WHERE workspace_id = ? AND error IS NOT NULL ORDER BY path"
        return [(str(p), str(e)) for p, e in self._all(conn, sql, (workspace_id,))]

    def file(self, conn: Conn, workspace_id: int, path: str) -> tuple[Any, ...] | None:
        """(id, sha256, error) of the file at ``path``."""
        sql = "SELECT id, sha256, error FROM files WHERE workspace_id = ? AND path = ?"
        return self._one(conn, sql, (workspace_id, path))

    def rename(
        self, conn: Conn, workspace_id: int, file_id: int, path: str
    ) -> tuple[Any, ...] | None:
        """Move a file's row to ``path``; its (id, sha256, error), or ``None`` when it is gone."""
        sql = "UPDATE files SET path = ? WHERE id = ? AND workspace_id = ?"
        if self._run(conn, sql, (path, file_id, workspace_id)) != 1:
            return None
        sql = "SELECT id, sha256, error FROM files WHERE workspace_id = ? AND id = ?"
        return self._one(conn, sql, (workspace_id, file_id))

    def new_file(self, conn: Conn, workspace_id: int, path: str, state: Sequence[Any]) -> int:
        """A new file's row; ``state`` = (size, mtime_ns, read_ns, sha256, error, synced_at)."""
        row = self._one(
            conn,
            """INSERT INTO files (workspace_id, path, size, mtime_ns, read_ns, sha256, error,
                   synced_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?) RETURNING id""",
            (workspace_id, path, *state),
        )
        assert row is not None
        return int(row[0])

    def set_error(self, conn: Conn, file_id: int, error: str | None, now: str) -> None:
        self._run(
            conn, "UPDATE files SET error = ?, synced_at = ? WHERE id = ?", (error, now, file_id)
        )

    def update_file(self, conn: Conn, file_id: int, state: Sequence[Any]) -> None:
        """``state`` = (size, mtime_ns, read_ns, sha256, chunks, error, synced_at)."""
        self._run(
            conn,
            """UPDATE files SET size = ?, mtime_ns = ?, read_ns = ?, sha256 = ?, chunks = ?,
                   error = ?, synced_at = ? WHERE id = ?""",
            (*state, file_id),
        )

    def has_file(self, conn: Conn, file_id: int) -> bool:
        return self._one(conn, "SELECT 1 FROM files WHERE id = ?", (file_id,)) is not None

    def delete_file(self, conn: Conn, file_id: int) -> None:
        """Delete a file's row and its chunk memories (a trigger deletes them)."""
        self._run(conn, "DELETE FROM files WHERE id = ?", (file_id,))

    # -- chunks ------------------------------------------------------------------------------

    def chunks(self, conn: Conn, file_id: int) -> list[tuple[Any, ...]]:
        """(seq, id, content_hash, source, created_at, position, heading, start_line,
        end_line) of a file's chunks in order; times as stored text."""
        sql = """SELECT c.seq, m.id, m.content_hash, m.source, m.created_at, c.position,
                        c.heading, c.start_line, c.end_line
                 FROM chunks AS c JOIN memories AS m ON m.seq = c.seq
                 WHERE c.file_id = ? ORDER BY c.position, c.seq"""
        return [(*r[:4], self.time_text(r[4]), *r[5:]) for r in self._all(conn, sql, (file_id,))]

    def chunk_seqs(self, conn: Conn, file_id: int) -> list[int]:
        return [
            int(r[0])
            for r in self._all(conn, "SELECT seq FROM chunks WHERE file_id = ?", (file_id,))
        ]

    def taken(self, conn: Conn, ids: Sequence[str]) -> set[str]:
        """Which of ``ids`` a memory holds (ids are unique in the whole store)."""
        found: set[str] = set()
        for chunk in batched(ids, IN_CHUNK):
            sql = f"SELECT id FROM memories WHERE id IN ({marks(len(chunk))})"
            found.update(str(r[0]) for r in self._all(conn, sql, chunk))
        return found

    def relabel(self, conn: Conn, seq: int, label: Sequence[Any]) -> None:
        """Give a chunk memory ``label`` = (id, source, created_at, updated_at)."""
        sql = "UPDATE memories SET id = ?, source = ?, created_at = ?, updated_at = ? WHERE seq = ?"
        self._run(conn, sql, (*label, seq))

    def place(self, conn: Conn, seq: int, place: Sequence[Any]) -> None:
        """Move a chunk within its file: ``place`` = (position, heading, start, end)."""
        sql = "UPDATE chunks SET position = ?, heading = ?, start_line = ?, end_line = ? WHERE seq = ?"
        self._run(conn, sql, (*place, seq))

    def insert(
        self,
        session: RowWriter,
        conn: Conn,
        rows: list[tuple[Any, ...]],
        places: Sequence[Sequence[Any]],
    ) -> list[int]:
        """Insert prepared rows (:func:`mnemex.rows.prepare`) as new chunk memories, each
        at its place (file_id, position, heading, start, end); their seqs."""
        if not rows:
            return []
        seqs = self._insert_memories(session, conn, rows)
        self._many(
            conn,
            "INSERT INTO chunks (seq, file_id, position, heading, start_line, end_line) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            [(seq, *place) for seq, place in zip(seqs, places, strict=True)],
        )
        return seqs

    def _insert_memories(
        self, session: RowWriter, conn: Conn, rows: list[tuple[Any, ...]]
    ) -> list[int]:
        return session.insert_rows(rows)

    def delete_memories(self, conn: Conn, seqs: Sequence[int]) -> None:
        """Delete memories (their chunk rows go with them)."""
        for chunk in batched(seqs, IN_CHUNK):
            self._run(conn, f"DELETE FROM memories WHERE seq IN ({marks(len(chunk))})", chunk)

    def copy_vectors(self, conn: Conn, seqs: Sequence[int]) -> int:
        """Give each new memory, for every model, the vectors (every window) stored for
        the same text; how many memories got some."""
        if not seqs:
            return 0
        copied = 0
        for model in self._models(conn):
            for chunk in batched(seqs, IN_CHUNK):
                for windows in ("e.window = 0", "e.window > 0"):  # memories counted once
                    rows = conn.execute(
                        f"""INSERT OR IGNORE INTO embeddings
                                (seq, model, window, dim, content_hash, vector)
                            SELECT m.seq, e.model, e.window, e.dim, e.content_hash, e.vector
                            FROM memories AS m JOIN embeddings AS e ON e.model = ? AND e.seq = (
                                SELECT seq FROM embeddings
                                WHERE model = ? AND content_hash = m.content_hash
                                ORDER BY id LIMIT 1)
                            WHERE m.seq IN ({marks(len(chunk))}) AND {windows}
                            ORDER BY m.seq, e.window""",
                        [model, model, *chunk],
                    ).rowcount
                    copied += rows if windows.endswith("= 0") else 0
        return copied

    def _models(self, conn: Conn) -> list[str]:
        """The models with stored vectors (a skip-scan of the (model, content_hash) index)."""
        sql = """WITH RECURSIVE m(model) AS (
                     SELECT min(model) FROM embeddings
                     UNION ALL
                     SELECT (SELECT min(model) FROM embeddings WHERE model > m.model) FROM m
                     WHERE m.model IS NOT NULL)
                 SELECT model FROM m WHERE model IS NOT NULL"""
        return [str(r[0]) for r in self._all(conn, sql)]

    def pending(self, conn: Conn, workspace_id: int, model: str) -> list[int]:
        """The seqs of the workspace's chunks without a vector of ``model``."""
        sql = """SELECT c.seq FROM chunks AS c JOIN files AS f ON f.id = c.file_id
                 WHERE f.workspace_id = ? AND NOT EXISTS (
                     SELECT 1 FROM embeddings AS e WHERE e.model = ? AND e.seq = c.seq)
                 ORDER BY c.seq"""
        return [int(r[0]) for r in self._all(conn, sql, (workspace_id, model))]

    def ids_at(
        self, conn: Conn, workspace_id: int, path: str, lines: tuple[int, int]
    ) -> tuple[str, ...]:
        """The ids of the file's chunks that overlap the lines (start, end), in order."""
        sql = """SELECT m.id FROM chunks AS c JOIN files AS f ON f.id = c.file_id
                 JOIN memories AS m ON m.seq = c.seq
                 WHERE f.workspace_id = ? AND f.path = ? AND c.start_line <= ?
                   AND c.end_line >= ? ORDER BY c.position"""
        return tuple(
            str(r[0]) for r in self._all(conn, sql, (workspace_id, path, lines[1], lines[0]))
        )

    # -- what the rest of the store asks ------------------------------------------------------

    def locations(self, conn: Conn, seqs: Sequence[int]) -> dict[int, Location]:
        """Where each memory that is a chunk of a workspace file lives."""
        found: dict[int, Location] = {}
        for chunk in batched(seqs, IN_CHUNK):
            sql = (
                "SELECT c.seq, w.root, f.path, c.start_line, c.end_line, c.heading FROM chunks AS c "
                "JOIN files AS f ON f.id = c.file_id JOIN workspaces AS w ON w.id = f.workspace_id "
                f"WHERE c.seq IN ({marks(len(chunk))})"
            )
            for seq, root, path, start, end, heading in self._all(conn, sql, chunk):
                found[int(seq)] = Location(root, path, start, end, tuple(json.loads(heading)))
        return found

    def file_of(self, conn: Conn, namespace: str, ident: str) -> str | None:
        """The path of the file whose chunk is the namespace's memory ``ident``, if any."""
        row = self._one(
            conn,
            "SELECT f.path FROM memories AS m JOIN chunks AS c ON c.seq = m.seq "
            "JOIN files AS f ON f.id = c.file_id WHERE m.id = ? AND m.namespace = ?",
            (ident, namespace),
        )
        return None if row is None else str(row[0])

    def drift(self, conn: Conn) -> list[str]:
        """Problems for the integrity check: chunks of no file, files short of chunks."""
        row = self._one(conn, FILE_DRIFT) or (0, 0)
        return [text.format(n) for n, text in zip(row, _FILE_PROBLEMS, strict=True) if n]


SQLITE = WorkspaceTables()
