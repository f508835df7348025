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

The ``*_in`` functions run on a store's session of either engine, through its
statements (``session.relations``: :mod:`mnemex.engine.sqlite.relations`,
:mod:`mnemex.engine.postgres.relations`); the others take a SQLite connection in
autocommit mode (as :mod:`mnemex.storage` opens it) and run their own transactions.
"""

from __future__ import annotations

import re
import sqlite3
import unicodedata
from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Final

from mnemex.config import DEFAULT_CONFIDENCE, MAX_SEARCH_LIMIT, check_count
from mnemex.engine.protocol import RelationIndex
from mnemex.engine.sqlite import relations as sqlite_relations
from mnemex.engine.sqlite.relations import COLUMNS
from mnemex.errors import InvalidInput
from mnemex.index.query import content_terms, expand_terms, normalized_score
from mnemex.index.retrieval import LexicalPlan, counted_plan
from mnemex.index.stopwords import STOPWORDS
from mnemex.models import Relation
from mnemex.results import ForgetResult
from mnemex.storage.connect import write_transaction
from mnemex.text import (
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
    from mnemex.engine.protocol import Session

__all__ = ["COLUMNS", "RelationIndex"]  # re-exported: their home is the engine's

MAX_ENTITY_CHARS: Final = 256
MAX_PREDICATE_CHARS: Final = 64
POOL_FACTOR: Final = 4  # rows ranked by SQL per wanted result, before exact scoring

_CAMEL_HUMP = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_PREDICATE_GAPS = re.compile(r"[\s_\-]+")


# -- on a store's session (either engine) -------------------------------------------


def store_rows(session: Session, rows: Sequence[tuple[Any, ...]]) -> list[Relation]:
    """Write rows of :func:`relation_row` in one transaction (see :func:`upsert`)."""
    with session.transaction() as conn:
        return [relation_of(row) for row in session.relations.upsert(conn, rows)]


def relate_in(
    session: Session,
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


def forget_in(session: Session, ids: Iterable[str] | str, namespace: str) -> ForgetResult:
    """:func:`forget_relations` on the session's engine."""
    ns, wanted = clean_namespace(namespace), _id_list(ids)
    with session.transaction() as conn:
        gone = session.relations.forget(conn, ns, wanted)
    return _forgotten(wanted, gone)


def neighbors_in(
    session: Session, entity: str, namespace: str | None, limit: int = 50
) -> list[Relation]:
    """:func:`neighbors` on the session's engine."""
    with session.connection() as conn:
        key, ns, count = _neighbors_args(entity, namespace, limit)
        return [relation_of(row) for row in session.relations.neighbors(conn, key, ns, count)]


def read_from_in(session: Session, memory_id: str, namespace: str) -> list[Relation]:
    """The relations of the namespace read from the memory ``memory_id`` (their
    ``source_memory``), most confident then newest first."""
    ident = clean_id(memory_id)
    with session.connection() as conn:
        return [relation_of(row) for row in session.relations.read_from(conn, ident, namespace)]


def count_in(session: Session, namespace: str | None) -> int:
    """Relations in the namespace (``None``: in every namespace)."""
    with session.connection() as conn:
        return int(session.relations.count(conn, _optional_namespace(namespace)))


def iterate_in(session: Session, namespace: str | None) -> Iterator[Relation]:
    """Every relation of the namespace (``None``: of all), oldest first, a page of 1,000
    per connection."""
    ns, last = _optional_namespace(namespace), 0
    while True:
        with session.connection() as conn:
            rows = session.relations.page(conn, ns, last, 1000)
        if not rows:
            return
        yield from (relation_of(row) for _, row in rows)
        last = rows[-1][0]


def search_in(
    session: Session, conn: Any, text: str, namespace: str | None, limit: int
) -> list[Relation]:
    """The relations that best answer ``text``, best first, scored by BM25 · confidence,
    over ``conn`` (held).

    Any text is safe: text with no indexed word returns nothing. Stop words are searched
    only when the other words match nothing.
    """
    with session.relations.reading(session, conn) as index:
        return search_index(index, text, namespace, limit)


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
    Raises :class:`~mnemex.errors.UnknownMemory` (the caller rolls back) when a
    row's source memory is not in its namespace.
    """
    return [relation_of(row) for row in sqlite_relations.upsert(conn, rows)]


def forget_relations(
    conn: sqlite3.Connection, ids: Iterable[str] | str, namespace: str
) -> ForgetResult:
    """Delete relations by id; ids not in the namespace are reported in ``missing``."""
    ns, wanted = clean_namespace(namespace), _id_list(ids)
    with write_transaction(conn):
        gone = sqlite_relations.forget(conn, ns, wanted)
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


def neighbors(
    conn: sqlite3.Connection, entity: str, namespace: str | None, limit: int = 50
) -> list[Relation]:
    """Relations with ``entity`` as their whole subject or object (ignoring case), most
    confident then newest first."""
    key, ns, count = _neighbors_args(entity, namespace, limit)
    return [relation_of(r) for r in sqlite_relations.neighbors(conn, key, ns, count)]


def _neighbors_args(entity: str, namespace: str | None, limit: int) -> tuple[str, str | None, int]:
    """The entity's key, the namespace and the limit of a search for neighbors, checked."""
    key = _entity_key(clean_entity(entity))
    ns = _optional_namespace(namespace)
    return key, ns, check_count("limit", limit, 1, MAX_SEARCH_LIMIT)


def search_index(
    index: RelationIndex, text: str, namespace: str | None, limit: int
) -> list[Relation]:
    """The relations that best answer ``text`` over an engine's :class:`RelationIndex`."""
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


def _scored(rows: Sequence[tuple[int, float, float]], norm: float) -> list[tuple[int, float]]:
    """(seq, normalized BM25 · confidence), best first; ties keep the SQL order (newest first)."""
    scored = [(seq, normalized_score(raw, norm) * conf) for seq, raw, conf in rows]
    return sorted(scored, key=lambda item: -item[1])
