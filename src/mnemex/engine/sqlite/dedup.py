"""What the duplicate checks of :mod:`mnemex.dedup` read and write in SQLite (PostgreSQL's
are :mod:`mnemex.engine.postgres.dedup`): rows by seq, hash and namespace, a text's own
BM25, the writes of a merge and of a move to the duplicates namespace. Each runs on the
caller's connection, inside its transaction."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any, Final

from mnemex.rows import ROW_COLUMNS
from mnemex.storage import marks

_BM25: Final = "bm25(memories_fts, 1.0, 1.0)"


def own_score(conn: sqlite3.Connection, match: str, seq: int) -> Any:
    """Row ``seq``'s BM25 for the FTS5 query ``match`` (a row of one value, or ``None``)."""
    sql = f"SELECT -{_BM25} FROM memories_fts WHERE memories_fts MATCH ? AND rowid = ?"
    return conn.execute(sql, (match, seq)).fetchone()


def last_seq(conn: sqlite3.Connection) -> int:
    return int(conn.execute("SELECT coalesce(max(seq), 0) FROM memories").fetchone()[0])


def written_since(
    conn: sqlite3.Connection, match: str, seen: int, namespace: str, limit: int
) -> list[int]:
    """The namespace's rows after ``seen`` that match ``match``, oldest first."""
    sql = (
        "SELECT m.seq FROM memories_fts CROSS JOIN memories AS m "
        "ON m.seq = memories_fts.rowid WHERE memories_fts MATCH ? "
        "AND memories_fts.rowid > ? AND m.namespace = ? ORDER BY m.seq LIMIT ?"
    )
    return [r[0] for r in conn.execute(sql, (match, seen, namespace, limit))]


def still_there(conn: sqlite3.Connection, seq: int, ident: str, namespace: str) -> bool:
    sql = "SELECT 1 FROM memories WHERE seq = ? AND id = ? AND namespace = ?"
    return conn.execute(sql, (seq, ident, namespace)).fetchone() is not None


def same_text_after(conn: sqlite3.Connection, namespace: str, digest: str, after: int) -> Any:
    """(seq, id) of the namespace's first memory after ``after`` with this text, no file
    chunk, or ``None``."""
    return conn.execute(
        "SELECT seq, id FROM memories WHERE namespace = ? AND content_hash = ? AND seq > ? "
        "AND seq NOT IN (SELECT seq FROM chunks) ORDER BY seq LIMIT 1",
        (namespace, digest, after),
    ).fetchone()


def same_text_before(conn: sqlite3.Connection, namespace: str, digest: str, before: int) -> Any:
    """(seq, id) of the namespace's first memory before ``before`` with this text, no
    file chunk, or ``None``."""
    return conn.execute(
        "SELECT seq, id FROM memories WHERE namespace = ? AND content_hash = ? AND seq < ? "
        "AND seq NOT IN (SELECT seq FROM chunks) ORDER BY seq LIMIT 1",
        (namespace, digest, before),
    ).fetchone()


def no_longer(conn: sqlite3.Connection, seqs: Sequence[int], most: int) -> list[int]:
    """Those of ``seqs`` whose text is at most ``most`` characters."""
    sql = f"SELECT seq FROM memories WHERE seq IN ({marks(len(seqs))}) AND length(content) <= ?"
    return [r[0] for r in conn.execute(sql, [*seqs, most])]


def contents(conn: sqlite3.Connection, seqs: Sequence[int]) -> dict[int, str]:
    sql = f"SELECT seq, content FROM memories WHERE seq IN ({marks(len(seqs))})"
    return dict(conn.execute(sql, list(seqs)).fetchall())


def texts(conn: sqlite3.Connection, seqs: Sequence[int]) -> dict[int, tuple[str, str]]:
    """(id, content) of each memory."""
    sql = f"SELECT seq, id, content FROM memories WHERE seq IN ({marks(len(seqs))})"
    return {seq: (ident, text) for seq, ident, text in conn.execute(sql, list(seqs))}


def file_chunks(conn: sqlite3.Connection, seqs: list[int]) -> set[int]:
    """Which of these memories are chunks of workspace files."""
    if not seqs:
        return set()
    sql = f"SELECT seq FROM chunks WHERE seq IN ({marks(len(seqs))})"
    return {r[0] for r in conn.execute(sql, seqs)}


def for_merge(conn: sqlite3.Connection, seq: int) -> Any:
    """(content, tags JSON, confidence, pinned, metadata JSON) of a memory."""
    sql = "SELECT content, tags, confidence, pinned, metadata FROM memories WHERE seq = ?"
    return conn.execute(sql, (seq,)).fetchone()


def apply_merge(conn: sqlite3.Connection, seq: int, values: Sequence[Any]) -> None:
    """Write a merge's (tags, fts_tags, confidence, pinned, metadata, updated_at)."""
    conn.execute(
        "UPDATE memories SET tags = ?, fts_tags = ?, confidence = ?, pinned = ?, metadata = ?, "
        "updated_at = ? WHERE seq = ?",
        (*values, seq),
    )


def vector_of_text(conn: sqlite3.Connection, model: str, digest: str, dim: int) -> Any:
    """The stored first-window vector (bytes, in a row) of ``model`` for a text, or ``None``."""
    where = "model = ? AND content_hash = ? AND dim = ? AND window = 0 LIMIT 1"
    sql = f"SELECT vector FROM embeddings WHERE {where}"
    return conn.execute(sql, (model, digest, dim)).fetchone()


def insert(conn: sqlite3.Connection, row: Sequence[Any]) -> int:
    """Insert a row of :func:`mnemex.rows.prepare`; its seq."""
    insert = f"INSERT INTO memories ({ROW_COLUMNS}) VALUES ({marks(len(row))})"
    cursor = conn.execute(insert, row)
    assert cursor.lastrowid is not None
    return cursor.lastrowid


def namespace_rows(conn: sqlite3.Connection, namespace: str) -> list[Any]:
    """(seq, id, content, content_hash) of the namespace's memories (no file chunks),
    oldest first."""
    return conn.execute(
        "SELECT seq, id, content, content_hash FROM memories WHERE namespace = ? "
        "AND seq NOT IN (SELECT seq FROM chunks) ORDER BY seq",
        (namespace,),
    ).fetchall()


def present(conn: sqlite3.Connection, seq: int, namespace: str) -> bool:
    present = "SELECT 1 FROM memories WHERE seq = ? AND namespace = ?"
    return conn.execute(present, (seq, namespace)).fetchone() is not None


def stored_row(conn: sqlite3.Connection, seq: int) -> Any:
    """(tags JSON, source, confidence, pinned, created_at) of a memory."""
    return conn.execute(
        "SELECT tags, source, confidence, pinned, created_at FROM memories WHERE seq = ?", (seq,)
    ).fetchone()


def move(conn: sqlite3.Connection, seq: int, namespace: str, duplicate_of: str) -> None:
    """Move memory ``seq`` unchanged to ``namespace``, noting ``duplicate_of`` in its
    metadata."""
    conn.execute(
        "UPDATE memories SET namespace = ?, "
        "metadata = json_set(metadata, '$.duplicate_of', ?) WHERE seq = ?",
        (namespace, duplicate_of, seq),
    )
    # the vector index keys rows by namespace: have it re-read this one
    conn.execute("INSERT INTO vector_log (op, embedding_id, seq) VALUES ('touch', NULL, ?)", (seq,))
