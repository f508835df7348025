"""Relations ``subject -[predicate]-> object``: stored, searched and walked apart from memories.

A relation is a short fact about two entities ("Jared -[works_on]-> engram").
Scoring it against memories would mix two kinds of evidence on one scale, so
relations have their own table and FTS5 index (schema migration 3) and a
search returns them in a list of their own. They are ranked by FTS5's BM25
against the query, with the same query expansion as memories (every term
quoted, OR-joined, stop words left out unless nothing else matches), so a
relation's score says how well it answers the query and is never a constant:
``tanh(bm25 / Σidf) · confidence`` (see
:func:`mnemex.index.query.normalized_score`).

Entity names are compared case-insensitively (Unicode case folding) and
predicates are kept in one snake_case spelling, so ``worksOn``, ``works on``
and ``works-on`` name the same relation; the index holds the predicate's
words apart, so ``works_on`` is found by "works on" (and, stemmed, "work").

The functions take a connection in autocommit mode (as :mod:`mnemex.storage`
opens it) and run their own transactions.
"""

from __future__ import annotations

import re
import sqlite3
import unicodedata
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Final, Protocol

from mnemex.config import DEFAULT_CONFIDENCE, MAX_SEARCH_LIMIT, check_count
from mnemex.engine import engine_of
from mnemex.errors import InvalidInput, UnknownMemory
from mnemex.index.fts import LexicalPlan, Lexicon, counted_plan
from mnemex.index.query import Term, Token, content_terms, expand_terms, normalized_score
from mnemex.index.stopwords import STOPWORDS
from mnemex.models import Relation
from mnemex.results import ForgetResult
from mnemex.storage import IN_CHUNK, marks
from mnemex.storage.connect import Connect, read_transaction, write_transaction
from mnemex.storage.sql import delete_ids
from mnemex.text import (
    batched,
    clean_confidence,
    clean_id,
    clean_label,
    clean_name,
    clean_namespace,
    clean_query,
    format_time,
    listed,
    new_id,
    parse_stored_time,
    segment,
    utcnow,
)

if TYPE_CHECKING:
    from mnemex.engine.sqlite.session import SqliteSession

MAX_ENTITY_CHARS: Final = 256
MAX_PREDICATE_CHARS: Final = 64
POOL_FACTOR: Final = 4  # rows ranked by SQL per wanted result, before exact scoring

COLUMNS: Final = (
    "id, namespace, subject, predicate, object, confidence, source_memory, created_at, updated_at"
)
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

_CAMEL_HUMP = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_PREDICATE_GAPS = re.compile(r"[\s_\-]+")


# -- on a store's session (either engine) -------------------------------------------


def _postgres(session: SqliteSession) -> Any:
    """The PostgreSQL engine's relations (:mod:`mnemex.engine.postgres.relations`) when
    the session is PostgreSQL's, else ``None``: the SQLite code of this module runs."""
    if engine_of(session) == "SQLite":
        return None
    from mnemex.engine.postgres import relations as pg_relations

    return pg_relations


def store_rows(session: SqliteSession, rows: Sequence[tuple[Any, ...]]) -> list[Relation]:
    """Write rows of :func:`relation_row` in one transaction (see :func:`upsert`)."""
    pg = _postgres(session)
    with session.transaction() as conn:
        if pg is None:
            return upsert(conn, rows)
        return [relation_of(row) for row in pg.upsert(conn, rows)]


def relate_in(
    session: SqliteSession,
    namespace: str,
    subject: str,
    predicate: str,
    object: str,
    confidence: float = DEFAULT_CONFIDENCE,
    source_memory: str | None = None,
    now: datetime | None = None,
) -> Relation:
    """:func:`relate` on the session's engine; see :meth:`mnemex.Store.relate`."""
    row = relation_row(namespace, subject, predicate, object, confidence, source_memory, now)
    return store_rows(session, [row])[0]


def forget_in(session: SqliteSession, ids: Iterable[str] | str, namespace: str) -> ForgetResult:
    """:func:`forget_relations` on the session's engine."""
    pg = _postgres(session)
    if pg is None:
        with session.connection() as conn:
            return forget_relations(conn, ids, namespace)
    ns, wanted = clean_namespace(namespace), _id_list(ids)
    with session.transaction() as conn:
        gone = pg.forget(conn, ns, wanted)
    return _forgotten(wanted, gone)


def neighbors_in(
    session: SqliteSession, entity: str, namespace: str | None, limit: int = 50
) -> list[Relation]:
    """:func:`neighbors` on the session's engine."""
    pg = _postgres(session)
    with session.connection() as conn:
        if pg is None:
            return neighbors(conn, entity, namespace, limit)
        key = _entity_key(clean_entity(entity))
        count = check_count("limit", limit, 1, MAX_SEARCH_LIMIT)
        found = pg.neighbors(conn, key, _optional_namespace(namespace), count)
        return [relation_of(row) for row in found]


def read_from_in(session: SqliteSession, memory_id: str, namespace: str) -> list[Relation]:
    """The relations of the namespace read from the memory ``memory_id`` (their
    ``source_memory``), most confident then newest first."""
    ident = clean_id(memory_id)
    pg = _postgres(session)
    with session.connection() as conn:
        if pg is not None:
            return [relation_of(row) for row in pg.read_from(conn, ident, namespace)]
        sql = f"""SELECT {COLUMNS} FROM relations WHERE source_memory = ? AND namespace = ?
                  ORDER BY confidence DESC, updated_at DESC, seq DESC LIMIT ?"""
        rows = conn.execute(sql, (ident, namespace, MAX_SEARCH_LIMIT))
        return [relation_of(r) for r in rows]


def count_in(session: SqliteSession, namespace: str | None) -> int:
    """:func:`count_relations` on the session's engine."""
    pg = _postgres(session)
    with session.connection() as conn:
        if pg is None:
            return count_relations(conn, namespace)
        return int(pg.count(conn, _optional_namespace(namespace)))


def iterate_in(session: SqliteSession, namespace: str | None) -> Iterator[Relation]:
    """:func:`iterate` on the session's engine."""
    pg = _postgres(session)
    if pg is None:
        yield from iterate(session.connection, namespace)
        return
    ns, last = _optional_namespace(namespace), 0
    while True:
        with session.connection() as conn:
            rows = pg.page(conn, ns, last, 1000)
        if not rows:
            return
        yield from (relation_of(row) for _, row in rows)
        last = rows[-1][0]


def search_in(
    session: SqliteSession, conn: Any, text: str, namespace: str | None, limit: int
) -> list[Relation]:
    """:func:`search_relations` on the session's engine, over ``conn`` (held)."""
    pg = _postgres(session)
    if pg is None:
        return search_relations(conn, session.lexicon, text, namespace, limit)
    with session.read() as held:  # the connection the caller holds, in one snapshot
        return search_index(pg.PgRelationIndex(held), text, namespace, limit)


# -- validation -----------------------------------------------------------------


def clean_entity(value: object, what: str = "entity") -> str:
    """An entity name: NFC, inner whitespace collapsed, 1 to ``MAX_ENTITY_CHARS`` characters."""
    if isinstance(value, str):
        stripped = value.strip()
        if not stripped:
            raise InvalidInput(f"{what} is empty: a relation links two named entities")
        if len(stripped) > MAX_ENTITY_CHARS:
            raise InvalidInput(
                f"{what} {stripped[:20]!r}... is longer than {MAX_ENTITY_CHARS} characters; "
                "name the entity, and keep longer text in a memory"
            )
    name = " ".join(clean_name(value, what, MAX_ENTITY_CHARS).split())
    if not name.isascii():
        name = unicodedata.normalize("NFC", name)
    return name


def clean_predicate(value: object) -> str:
    """A predicate in snake_case: one spelling for ``worksOn``, ``Works on`` and ``works-on``."""
    if not isinstance(value, str):
        raise InvalidInput(f"predicate must be text, got {type(value).__name__}")
    words = _PREDICATE_GAPS.sub("_", _CAMEL_HUMP.sub("_", value.strip())).strip("_")
    return clean_label(words, "predicate", MAX_PREDICATE_CHARS)


def _entity_key(name: str) -> str:
    return name.casefold()


def _fts_text(stored: str, indexed: str) -> str | None:
    """What the index holds for a column (CJK segmented), or None when it is the stored text."""
    text = segment(indexed) or indexed
    return None if text == stored else text


def _optional_namespace(namespace: str | None) -> str | None:
    return None if namespace is None else clean_namespace(namespace)


def relation_of(row: Sequence[Any], score: float | None = None) -> Relation:
    """The relation of a row of :data:`COLUMNS` (the order of :class:`Relation`'s fields;
    times as stored text)."""
    ident, namespace, subject, predicate, obj, confidence, source, created, updated = row
    times = parse_stored_time(created), parse_stored_time(updated)
    return Relation(ident, namespace, subject, predicate, obj, confidence, source, *times, score)


# -- writes ---------------------------------------------------------------------


def relate(
    conn: sqlite3.Connection,
    namespace: str,
    subject: str,
    predicate: str,
    object: str,
    confidence: float = DEFAULT_CONFIDENCE,
    source_memory: str | None = None,
    now: datetime | None = None,
) -> Relation:
    """Store the triple, or strengthen it (``updated_at`` moves to ``now``, the first
    spelling and source memory stay); see :meth:`mnemex.Store.relate`."""
    row = relation_row(namespace, subject, predicate, object, confidence, source_memory, now)
    with write_transaction(conn):
        return upsert(conn, [row])[0]


def relation_row(
    namespace: str,
    subject: str,
    predicate: str,
    object: str,
    confidence: float = DEFAULT_CONFIDENCE,
    source_memory: str | None = None,
    now: datetime | None = None,
    *,
    relation_id: str | None = None,
    created_at: datetime | None = None,
) -> tuple[Any, ...]:
    """Validate a relation into a row for :func:`upsert` (``relation_id`` and ``created_at``
    keep an imported relation's own id and time)."""
    ns = clean_namespace(namespace)
    subj = clean_entity(subject, "subject")
    pred = clean_predicate(predicate)
    obj = clean_entity(object, "object")
    stamp = format_time(now or utcnow())
    return (
        new_id() if relation_id is None else clean_id(relation_id),
        ns,
        subj,
        pred,
        obj,
        _entity_key(subj),
        _entity_key(obj),
        clean_confidence(confidence),
        None if source_memory is None else clean_id(source_memory),
        stamp if created_at is None else format_time(created_at),
        stamp,
        _fts_text(subj, subj),
        _fts_text(pred, pred.replace("_", " ")),
        _fts_text(obj, obj),
    )


def upsert(conn: sqlite3.Connection, rows: Sequence[tuple[Any, ...]]) -> list[Relation]:
    """Write rows of :func:`relation_row` inside the caller's write transaction.

    A row whose id is taken (in any namespace) by another relation is skipped
    and left out of the result, as imports skip memories whose id exists.
    Raises :class:`UnknownMemory` (the caller rolls back) when a row's source
    memory is not in its namespace.
    """
    stored = []
    for row in rows:
        namespace, source = row[1], row[8]
        if source is not None and not _memory_exists(conn, source, namespace):
            raise UnknownMemory([source], namespace)
        written = conn.execute(_UPSERT, row).fetchall()
        if written:
            stored.append(relation_of(written[0]))
    return stored


def _memory_exists(conn: sqlite3.Connection, memory_id: str, namespace: str) -> bool:
    sql = "SELECT 1 FROM memories WHERE id = ? AND namespace = ?"
    return conn.execute(sql, (memory_id, namespace)).fetchone() is not None


def forget_relations(
    conn: sqlite3.Connection, ids: Iterable[str] | str, namespace: str
) -> ForgetResult:
    """Delete relations by id; ids not in the namespace are reported in ``missing``."""
    ns, wanted = clean_namespace(namespace), _id_list(ids)
    with write_transaction(conn):
        gone = delete_ids(conn, "relations", ns, wanted)
    return _forgotten(wanted, gone)


def _id_list(ids: Iterable[str] | str) -> list[str]:
    wanted = list(dict.fromkeys(clean_id(i) for i in listed(ids, "ids")))
    if not wanted:
        raise InvalidInput("no relation ids given")
    return wanted


def _forgotten(wanted: list[str], gone: set[str]) -> ForgetResult:
    return ForgetResult(
        forgotten=tuple(i for i in wanted if i in gone),
        missing=tuple(i for i in wanted if i not in gone),
    )


# -- reads ----------------------------------------------------------------------


def count_relations(conn: sqlite3.Connection, namespace: str | None) -> int:
    """Relations in the namespace (``None``: in every namespace)."""
    where, params = _namespace_sql(_optional_namespace(namespace))
    return int(conn.execute(f"SELECT count(*) FROM relations WHERE 1{where}", params).fetchone()[0])


def page(
    conn: sqlite3.Connection, namespace: str | None, after: int, limit: int
) -> list[tuple[int, Relation]]:
    """(seq, relation) of up to ``limit`` relations with ``seq > after``, oldest first."""
    where, params = _namespace_sql(_optional_namespace(namespace))
    sql = f"SELECT seq, {COLUMNS} FROM relations WHERE seq > ?{where} ORDER BY seq LIMIT ?"
    return [(int(r[0]), relation_of(r[1:])) for r in conn.execute(sql, [after, *params, limit])]


def iterate(connection: Connect, namespace: str | None) -> Iterator[Relation]:
    """Every relation of the namespace (``None``: of all), oldest first, a page of 1,000
    per block of ``connection``."""
    last = 0
    while True:
        with connection() as conn:
            rows = page(conn, namespace, last, 1000)
        if not rows:
            return
        yield from (relation for _, relation in rows)
        last = rows[-1][0]


def neighbors(
    conn: sqlite3.Connection, entity: str, namespace: str | None, limit: int = 50
) -> list[Relation]:
    """Relations with ``entity`` as their whole subject or object (ignoring case), most
    confident then newest first."""
    key = _entity_key(clean_entity(entity))
    ns = _optional_namespace(namespace)
    where, params = _namespace_sql(ns)
    sql = f"""SELECT {COLUMNS} FROM relations WHERE (subject_key = ? OR object_key = ?){where}
              ORDER BY confidence DESC, updated_at DESC, seq DESC LIMIT ?"""
    limit = check_count("limit", limit, 1, MAX_SEARCH_LIMIT)
    return [relation_of(r) for r in conn.execute(sql, [key, key, *params, limit])]


def _namespace_sql(namespace: str | None, alias: str = "") -> tuple[str, list[object]]:
    column = f"{alias}.namespace" if alias else "namespace"
    return ("", []) if namespace is None else (f" AND {column} = ?", [namespace])


class RelationIndex(Protocol):
    """What a search of relations reads, on one engine (SQLite's below; PostgreSQL's in
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
        """Rows of :data:`COLUMNS` by seq."""
        ...


def search_relations(
    conn: sqlite3.Connection, lexicon: Lexicon, text: str, namespace: str | None, limit: int
) -> list[Relation]:
    """The relations that best answer ``text``, best first, scored by BM25 · confidence.

    ``lexicon`` is the connection's :class:`~mnemex.index.fts.Lexicon`, used
    only to tokenize ``text`` as the index does. Any text is safe: text with
    no indexed word returns nothing. Stop words are searched only when the
    other words match nothing.
    """
    conn.execute(_VOCAB)
    with read_transaction(conn):
        return search_index(_SqliteIndex(conn, lexicon), text, namespace, limit)


def search_index(
    index: RelationIndex, text: str, namespace: str | None, limit: int
) -> list[Relation]:
    """:func:`search_relations` over an engine's :class:`RelationIndex`."""
    ns = _optional_namespace(namespace)
    count = check_count("limit", limit, 1, MAX_SEARCH_LIMIT)
    if not count or not index.any(ns):
        return []
    terms = expand_terms(index.tokenize(clean_query(text)), STOPWORDS)
    if not terms:
        return []
    kept, dropped = content_terms(terms)
    freqs, n_docs = index.counts([*kept, *dropped])
    lexical = counted_plan(kept, dropped, freqs, n_docs)
    found = _ranked(index, lexical, ns, count)
    if not found and lexical.dropped:
        found = _ranked(index, lexical.with_dropped(), ns, count)
    return found


@dataclass(frozen=True, slots=True)
class _SqliteIndex:
    """The relations' FTS5 index (:class:`RelationIndex`), inside a read transaction."""

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


def _ranked(
    index: RelationIndex, lexical: LexicalPlan, namespace: str | None, limit: int
) -> list[Relation]:
    if lexical.empty:
        return []
    best = _best(index, lexical, namespace, limit)
    if not best:
        return []
    scores = dict(best)
    rows = index.rows([seq for seq, _ in best])
    return [relation_of(rows[seq], scores[seq]) for seq, _ in best if seq in rows]


def _best(
    index: RelationIndex, lexical: LexicalPlan, namespace: str | None, limit: int
) -> list[tuple[int, float]]:
    """(seq, score) of the ``limit`` best matching relations, best first.

    SQL orders by ``bm25 · confidence``, which can differ from the order of
    the score ``tanh(bm25 / Σidf) · confidence``. As tanh is concave and
    confidence at most 1, no relation outscores ``tanh(bm25 · confidence /
    Σidf)``; so when the ``limit``-th best score among the first rows reaches
    that bound for the first row left out, the answer is exact. Otherwise
    (confidences far apart) every matching relation is scored.
    """
    pool = limit * POOL_FACTOR
    rows = index.matches(lexical, namespace, pool + 1)
    if len(rows) > pool:
        top = _scored(rows[:pool], lexical.norm)[:limit]
        bound = normalized_score(rows[pool][1] * rows[pool][2], lexical.norm)
        if len(top) == limit and top[-1][1] >= bound:
            return top
        rows = index.matches(lexical, namespace, None)
    return _scored(rows, lexical.norm)[:limit]


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


def _scored(rows: Sequence[tuple[int, float, float]], norm: float) -> list[tuple[int, float]]:
    """(seq, normalized BM25 · confidence), best first; ties keep the SQL order (newest first)."""
    scored = [(seq, normalized_score(raw, norm) * conf) for seq, raw, conf in rows]
    return sorted(scored, key=lambda item: -item[1])
