"""Relations in SQLite: the writes and reads :mod:`mnemex.relations` asks of an engine
(PostgreSQL's are :mod:`mnemex.engine.postgres.relations`), over the ``relations`` table
and its FTS5 index ``relations_fts``. Rows are returned in the column order of
:data:`COLUMNS`, times as stored text. The functions taking ``conn`` run inside the
caller's transaction.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Final

from mnemex.config import MAX_SEARCH_LIMIT
from mnemex.errors import UnknownMemory
from mnemex.records import dataclass
from mnemex.storage import IN_CHUNK, marks
from mnemex.storage.connect import read_transaction
from mnemex.storage.sql import delete_ids
from mnemex.text import batched

if TYPE_CHECKING:
    from mnemex.engine.sqlite.fts import Lexicon
    from mnemex.engine.sqlite.surface import SqliteSurface
    from mnemex.index.query import Term, Token
    from mnemex.index.retrieval import LexicalPlan

COLUMNS: Final = (
    "id, namespace, subject, predicate, object, confidence, source_memory, created_at, updated_at"
)
Row = Sequence[Any]

_VOCAB: Final = (
    "CREATE VIRTUAL TABLE IF NOT EXISTS temp.mnemex_relations_vocab "
    "USING fts5vocab(main, relations_fts, row)"
)
_UPSERT: Final = f"""INSERT INTO relations (
        id, namespace, subject, predicate, object, subject_key, object_key, confidence,
        source_memory, created_at, updated_at, fts_subject, fts_predicate, fts_object
    ) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
    ON CONFLICT (namespace, subject_key, predicate, object_key) DO UPDATE SET
        confidence = max(relations.confidence, excluded.confidence),
        source_memory = COALESCE(relations.source_memory, excluded.source_memory),
        updated_at = max(relations.updated_at, excluded.updated_at)
    ON CONFLICT (id) DO NOTHING
    RETURNING {COLUMNS}"""


def upsert(conn: sqlite3.Connection, rows: Sequence[tuple[Any, ...]]) -> list[Row]:
    """Write rows of :func:`mnemex.relations.relation_row` inside the caller's write
    transaction; the rows written. A row whose id is taken (in any namespace) by another
    relation is skipped; a source memory not in the row's namespace raises
    :class:`~mnemex.errors.UnknownMemory` (the caller rolls back)."""
    stored = []
    for row in rows:
        namespace, source = row[1], row[8]
        if source is not None and not _memory_exists(conn, source, namespace):
            raise UnknownMemory([source], namespace)
        written = conn.execute(_UPSERT, row).fetchall()
        if written:
            stored.append(written[0])
    return stored


def _memory_exists(conn: sqlite3.Connection, memory_id: str, namespace: str) -> bool:
    sql = "SELECT 1 FROM memories WHERE id = ? AND namespace = ?"
    return conn.execute(sql, (memory_id, namespace)).fetchone() is not None


def forget(conn: sqlite3.Connection, namespace: str, ids: Sequence[str]) -> set[str]:
    """Delete the namespace's relations with these ids; the ids deleted."""
    return delete_ids(conn, "relations", namespace, ids)


def _namespace_sql(namespace: str | None, alias: str = "") -> tuple[str, list[object]]:
    column = f"{alias}.namespace" if alias else "namespace"
    return ("", []) if namespace is None else (f" AND {column} = ?", [namespace])


def count(conn: sqlite3.Connection, namespace: str | None) -> int:
    """Relations in the namespace (``None``: in every namespace)."""
    where, params = _namespace_sql(namespace)
    return int(conn.execute(f"SELECT count(*) FROM relations WHERE 1{where}", params).fetchone()[0])


def page(
    conn: sqlite3.Connection, namespace: str | None, after: int, limit: int
) -> list[tuple[int, Row]]:
    """(seq, row) of up to ``limit`` relations with ``seq > after``, oldest first."""
    where, params = _namespace_sql(namespace)
    sql = f"SELECT seq, {COLUMNS} FROM relations WHERE seq > ?{where} ORDER BY seq LIMIT ?"
    return [(int(r[0]), r[1:]) for r in conn.execute(sql, [after, *params, limit])]


def read_from(conn: sqlite3.Connection, memory_id: str, namespace: str) -> list[Row]:
    """The relations of the namespace whose ``source_memory`` is ``memory_id``, most
    confident then newest first."""
    sql = f"""SELECT {COLUMNS} FROM relations WHERE source_memory = ? AND namespace = ?
                  ORDER BY confidence DESC, updated_at DESC, seq DESC LIMIT ?"""
    return list(conn.execute(sql, (memory_id, namespace, MAX_SEARCH_LIMIT)))


def neighbors(conn: sqlite3.Connection, key: str, namespace: str | None, limit: int) -> list[Row]:
    """Relations with the entity ``key`` as subject or object, most confident then newest
    first."""
    where, params = _namespace_sql(namespace)
    sql = f"""SELECT {COLUMNS} FROM relations WHERE (subject_key = ? OR object_key = ?){where}
              ORDER BY confidence DESC, updated_at DESC, seq DESC LIMIT ?"""
    return list(conn.execute(sql, [key, key, *params, limit]))


@contextmanager
def reading(session: SqliteSurface, conn: sqlite3.Connection) -> Iterator[SqliteRelationIndex]:
    """The relations' index over ``conn`` (held by the caller), in one read transaction."""
    conn.execute(_VOCAB)
    with read_transaction(conn):
        yield SqliteRelationIndex(conn, session.lexicon)


@dataclass(frozen=True, slots=True)
class SqliteRelationIndex:
    """The relations' FTS5 index (:class:`mnemex.engine.protocol.RelationIndex`), inside a
    read transaction."""

    conn: sqlite3.Connection
    lexicon: Lexicon

    def tokenize(self, text: str) -> list[Token]:
        return self.lexicon.tokenize(text)

    def any(self, namespace: str | None) -> bool:
        where, params = _namespace_sql(namespace)
        sql = f"SELECT 1 FROM relations WHERE 1{where} LIMIT 1"
        return self.conn.execute(sql, params).fetchone() is not None

    def counts(self, terms: Sequence[Term]) -> tuple[list[int], int]:
        n_docs = int(self.conn.execute("SELECT count(*) FROM relations").fetchone()[0])
        return _doc_freqs(self.conn, terms), n_docs

    def matches(
        self, lexical: LexicalPlan, namespace: str | None, limit: int | None
    ) -> list[tuple[int, float, float]]:
        return _matches(self.conn, lexical.match, namespace, limit)

    def rows(self, seqs: Sequence[int]) -> dict[int, Sequence[Any]]:
        rows: dict[int, Sequence[Any]] = {}
        for chunk in batched(list(seqs), IN_CHUNK):
            sql = f"SELECT seq, {COLUMNS} FROM relations WHERE seq IN ({marks(len(chunk))})"
            rows.update((r[0], r[1:]) for r in self.conn.execute(sql, chunk))
        return rows


def _doc_freqs(conn: sqlite3.Connection, terms: Sequence[Term]) -> list[int]:
    """Relations containing each term: from the index's vocabulary, phrases by a count query."""
    found: dict[str, int] = {}
    words = sorted({t.key for t in terms if not t.phrase})
    for chunk in batched(words, IN_CHUNK):
        sql = (
            f"SELECT term, doc FROM temp.mnemex_relations_vocab WHERE term IN ({marks(len(chunk))})"
        )
        found.update(conn.execute(sql, chunk).fetchall())
    for term in terms:
        if term.phrase and term.key not in found:
            found[term.key] = conn.execute(
                "SELECT count(*) FROM relations_fts WHERE relations_fts MATCH ?", (term.match,)
            ).fetchone()[0]
    return [int(found.get(t.key, 0)) for t in terms]


def _matches(
    conn: sqlite3.Connection, match: str, namespace: str | None, limit: int | None
) -> list[tuple[int, float, float]]:
    """(seq, bm25, confidence) of matching relations by ``bm25 · confidence``, best first."""
    where, params = _namespace_sql(namespace, "r")
    sql = f"""SELECT r.seq, -bm25(relations_fts) AS raw, r.confidence
              FROM relations_fts CROSS JOIN relations AS r ON r.seq = relations_fts.rowid
              WHERE relations_fts MATCH ?{where}
              ORDER BY raw * r.confidence DESC, r.seq DESC LIMIT ?"""
    rows = conn.execute(sql, [match, *params, -1 if limit is None else limit])
    return [(int(seq), float(raw), float(conf)) for seq, raw, conf in rows]
