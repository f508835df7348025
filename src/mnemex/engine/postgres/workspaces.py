"""The workspace tables in PostgreSQL: the statements of
:class:`mnemex.engine.workspaces.WorkspaceTables`, with what differs here.

- Marks are ``%s``; the driver's errors are psycopg's.
- Many machines may sync one folder into one database at once: a write takes
  its workspace's row (:meth:`PgWorkspaceTables.lock`, ``UPDATE ... SET
  version = version + 1``), so writes to one workspace queue as SQLite's do,
  each reading the files rows the one before committed; the bumped
  ``version`` tells every other session that its cached files rows are old.
- A chunk memory is inserted as a chunk of a file (``file_chunk``): exempt
  from the one-memory-per-text rule (two files, or a file and a note, may
  hold the same text), and never merged into another memory.
- Vectors of identical text are copied only from memories of the same
  namespace: a namespace never learns from a sync what another one holds.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mnemex.engine.workspaces import Conn, RowWriter, WorkspaceTables
from mnemex.errors import StoreError
from mnemex.text import format_time

_COPY_VECTORS = """INSERT INTO embeddings (seq, namespace, model, content_hash, vector)
    SELECT m.seq, m.namespace, e.model, e.content_hash, e.vector
    FROM memories AS m CROSS JOIN vector_models AS v
    JOIN LATERAL (
        SELECT x.model, x.content_hash, x.vector FROM embeddings AS x
        WHERE x.model = v.model AND x.content_hash = m.content_hash
            AND x.namespace = m.namespace AND x.seq <> m.seq
        ORDER BY x.id LIMIT 1) AS e ON true
    WHERE m.seq = ANY(%s)
    ORDER BY m.seq, e.model
    ON CONFLICT DO NOTHING
    RETURNING seq"""


class PgWorkspaceTables(WorkspaceTables):
    """The workspace tables of a PostgreSQL database (a pool of connections, many
    processes and machines)."""

    def __init__(self) -> None:
        import psycopg

        super().__init__((psycopg.Error,))

    def sql(self, text: str) -> str:
        return text.replace("?", "%s")

    def _many(self, conn: Conn, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        with conn.cursor() as cursor:
            cursor.executemany(self.sql(sql), rows)

    def time_text(self, value: Any) -> str | None:
        return None if value is None else format_time(value)

    def version(self, conn: Conn, workspace_id: int) -> Any:
        """The workspace's write count (every write bumps it: :meth:`lock`)."""
        return self._one(conn, "SELECT version FROM workspaces WHERE id = ?", (workspace_id,))

    def lock(self, conn: Conn, workspace_id: int) -> None:
        """Hold the workspace's row until the transaction ends (another writer of the
        workspace waits, then reads what this one wrote), and count the write."""
        self._run(conn, "UPDATE workspaces SET version = version + 1 WHERE id = ?", (workspace_id,))

    def _insert_memories(
        self, session: RowWriter, conn: Conn, rows: list[tuple[Any, ...]]
    ) -> list[int]:
        from mnemex.engine.postgres.write import insert_rows, pg_row

        written = insert_rows(conn, [pg_row(r, file_chunk=True) for r in rows])
        for row, w in zip(rows, written, strict=True):
            if not w.inserted:
                raise StoreError(f"the id {row[0]!r} of a new chunk is taken; sync again")
        return [w.seq for w in written]

    def copy_vectors(self, conn: Conn, seqs: Sequence[int]) -> int:
        if not seqs:
            return 0
        rows = conn.execute(_COPY_VECTORS, (list(seqs),)).fetchall()
        return len({r[0] for r in rows})


POSTGRES: PgWorkspaceTables | None = None


def tables() -> PgWorkspaceTables:
    """The one :class:`PgWorkspaceTables` (made on first use: it imports psycopg)."""
    global POSTGRES
    if POSTGRES is None:
        POSTGRES = PgWorkspaceTables()
    return POSTGRES
