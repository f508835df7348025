"""Relations in PostgreSQL: what :mod:`mnemex.relations` stores and reads on SQLite.

Validation, ranking and the search's plan are the shared code's
(:func:`mnemex.relations.relation_row`, :func:`mnemex.relations.search_index`);
here are the writes and reads. A relation's index terms are its subject,
predicate (underscores as spaces) and object as FTS5 indexes them
(:mod:`mnemex.engine.postgres.tokens`), kept in ``relation_postings`` and
per-namespace statistics by statement triggers, as the memories' are. Scores
are FTS5's ``bm25()`` over every relation (the statistics of all namespaces,
as SQLite's one FTS5 table has them), so both engines rank relations alike.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Final

from mnemex.engine.postgres import bm25
from mnemex.engine.postgres.tokens import document_lex, lexicon, query_key
from mnemex.errors import UnknownMemory
from mnemex.index.query import Term, Token
from mnemex.index.retrieval import LexicalPlan
from mnemex.records import dataclass
from mnemex.text import format_time, parse_stored_time

if TYPE_CHECKING:
    from mnemex.engine.protocol import Session

INDEX: Final = "relation_"  # the prefix of the relations' index tables
COLUMNS: Final = "id, namespace, subject, predicate, object, confidence, source_memory, created_at, updated_at"  # as mnemex.relations.COLUMNS; rows are returned in that order, times as stored text
Row = tuple[Any, ...]

_UPSERT: Final = f"""
    INSERT INTO relations (
        id, namespace, subject, predicate, object, subject_key, object_key, confidence,
        source_memory, created_at, updated_at, lex, lex_len
    ) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s::tsvector, %s)
    ON CONFLICT (namespace, subject_key, predicate, object_key) DO UPDATE SET
        confidence = greatest(relations.confidence, excluded.confidence),
        source_memory = coalesce(relations.source_memory, excluded.source_memory),
        updated_at = greatest(relations.updated_at, excluded.updated_at)
    RETURNING {COLUMNS}"""


def _row(row: Sequence[Any]) -> Row:
    """A row of :data:`COLUMNS` with its times as text, as SQLite stores them."""
    return (*row[:7], format_time(row[7]), format_time(row[8]))


def upsert(conn: Any, rows: Sequence[tuple[Any, ...]]) -> list[Row]:
    """Write rows of :func:`mnemex.relations.relation_row` inside the caller's
    transaction, as :func:`mnemex.relations.upsert` does on SQLite: a row whose id is
    taken by another relation is skipped; a source memory not in the row's namespace
    raises :class:`~mnemex.errors.UnknownMemory`."""
    lex = document_lex([(r[2], r[3].replace("_", " "), r[4]) for r in rows])
    stored = []
    for row, (literal, length) in zip(rows, lex, strict=True):
        ident, namespace, source = row[0], row[1], row[8]
        if (
            source is not None
            and not conn.execute(
                "SELECT 1 FROM memories WHERE id = %s AND namespace = %s", (source, namespace)
            ).fetchone()
        ):
            raise UnknownMemory([source], namespace)
        taken = conn.execute(
            "SELECT namespace, subject_key, predicate, object_key FROM relations WHERE id = %s",
            (ident,),
        ).fetchone()
        if taken is not None and tuple(taken) != (row[1], row[5], row[3], row[6]):
            continue
        values = (*row[:9], parse_stored_time(row[9]), parse_stored_time(row[10]))
        written = conn.execute(_UPSERT, (*values, literal, length)).fetchone()
        stored.append(_row(written))
    return stored


def forget(conn: Any, namespace: str, ids: Sequence[str]) -> set[str]:
    """Delete the namespace's relations with these ids; the ids deleted."""
    rows = conn.execute(
        "DELETE FROM relations WHERE namespace = %s AND id = ANY(%s) RETURNING id",
        (namespace, list(ids)),
    ).fetchall()
    return {r[0] for r in rows}


def _where(namespace: str | None) -> tuple[str, list[Any]]:
    return ("", []) if namespace is None else (" AND namespace = %s", [namespace])


def count(conn: Any, namespace: str | None) -> int:
    where, params = _where(namespace)
    row = conn.execute(f"SELECT count(*) FROM relations WHERE true{where}", params).fetchone()
    return int(row[0])


def page(conn: Any, namespace: str | None, after: int, limit: int) -> list[tuple[int, Row]]:
    """(seq, row) of up to ``limit`` relations with ``seq > after``, oldest first."""
    where, params = _where(namespace)
    rows = conn.execute(
        f"SELECT seq, {COLUMNS} FROM relations WHERE seq > %s{where} ORDER BY seq LIMIT %s",
        [after, *params, limit],
    ).fetchall()
    return [(int(r[0]), _row(r[1:])) for r in rows]


def read_from(conn: Any, memory_id: str, namespace: str) -> list[Row]:
    """The relations of the namespace whose ``source_memory`` is ``memory_id``, most
    confident then newest first."""
    from mnemex.config import MAX_SEARCH_LIMIT

    rows = conn.execute(
        f"""SELECT {COLUMNS} FROM relations WHERE source_memory = %s AND namespace = %s
            ORDER BY confidence DESC, updated_at DESC, seq DESC LIMIT %s""",
        (memory_id, namespace, MAX_SEARCH_LIMIT),
    ).fetchall()
    return [_row(r) for r in rows]


def neighbors(conn: Any, key: str, namespace: str | None, limit: int) -> list[Row]:
    """Relations with the entity ``key`` as subject or object, most confident then newest
    first."""
    where, params = _where(namespace)
    rows = conn.execute(
        f"""SELECT {COLUMNS} FROM relations WHERE (subject_key = %s OR object_key = %s){where}
            ORDER BY confidence DESC, updated_at DESC, seq DESC LIMIT %s""",
        [key, key, *params, limit],
    ).fetchall()
    return [_row(r) for r in rows]


@contextmanager
def reading(session: Session, conn: Any) -> Iterator[PgRelationIndex]:
    """The relations' index over the connection the caller holds (``conn``), in one
    snapshot; a database without relations is told so by one statement, with no
    snapshot to begin and end (three round trips fewer for each search)."""
    if not PgRelationIndex(conn).any(None):
        yield PgRelationIndex(conn, empty=True)
        return
    with session.read() as held:
        yield PgRelationIndex(held)


@dataclass(frozen=True, slots=True)
class PgRelationIndex:
    """The relations' index in PostgreSQL (:class:`mnemex.engine.protocol.RelationIndex`)."""

    conn: Any
    empty: bool = False  # known to hold no relation

    def tokenize(self, text: str) -> list[Token]:
        return lexicon().tokenize(text)

    def any(self, namespace: str | None) -> bool:
        if self.empty:
            return False
        where, params = _where(namespace)
        sql = f"SELECT 1 FROM relations WHERE true{where} LIMIT 1"
        return self.conn.execute(sql, params).fetchone() is not None

    def counts(self, terms: Sequence[Term]) -> tuple[list[int], int]:
        keys = [query_key(t) for t in terms]
        stats = bm25.statistics(self.conn, None, keys, INDEX)
        return [stats.doc_freqs.get(k, 0) for k in keys], stats.docs

    def matches(
        self, lexical: LexicalPlan, namespace: str | None, limit: int | None
    ) -> list[tuple[int, float, float]]:
        terms = [t for t, df in zip(lexical.terms, lexical.doc_freqs, strict=True) if df]
        stats, weights = bm25.term_weights(self.conn, terms, None, INDEX)
        if not weights:
            return []
        scores, params = bm25.scores_sql(stats, weights, namespace, None, index=INDEX)
        rows = self.conn.execute(
            b"SELECT s.seq, s.score, r.confidence FROM (" + scores + b") AS s "
            b"JOIN relations AS r ON r.seq = s.seq "
            b"ORDER BY s.score * r.confidence DESC, s.seq DESC LIMIT %(outer)s",
            {**params, "outer": limit},
        ).fetchall()
        return [(int(seq), float(raw), float(conf)) for seq, raw, conf in rows]

    def rows(self, seqs: Sequence[int]) -> dict[int, Sequence[Any]]:
        rows = self.conn.execute(
            f"SELECT seq, {COLUMNS} FROM relations WHERE seq = ANY(%s)", (list(seqs),)
        ).fetchall()
        return {int(r[0]): _row(r[1:]) for r in rows}
