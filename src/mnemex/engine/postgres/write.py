"""The write path: memories in bulk, one statement per call, with their index terms.

:func:`insert_rows` takes rows already validated (see :mod:`mnemex.text`'s
``clean_*`` functions), computes each row's index terms on the client (see
:mod:`mnemex.engine.postgres.tokens`) and inserts them all with one
``INSERT ... SELECT FROM unnest(...)``: one round trip, and one firing of the
statement triggers that keep the BM25 statistics. Inside a transaction, a large
batch goes as several such statements in one pipeline instead: the client computes
the terms of the next while the server inserts the one before. A row whose id, or whose
content hash in its namespace, is already stored is skipped (``ON CONFLICT
DO NOTHING``): of two processes writing the same text at once, one inserts
it and the other is told which row holds it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from mnemex.engine.postgres.tokens import document_lex
from mnemex.errors import StoreError
from mnemex.records import dataclass
from mnemex.text import parse_stored_time, tags_columns

if TYPE_CHECKING:
    import psycopg

RETRIES = 5  # a statement that deadlocks (several statements in one transaction) is retried
# Rows per statement of a batch written inside a transaction, the statements pipelined:
# on two cores the client's tokenization of the next runs beside the server's insert
# (batches of 1,000 rows: about a fifth more rows per second; RESULTS.md).
PIPELINED = 250


@dataclass(frozen=True, slots=True)
class Row:
    """One memory to store, validated."""

    id: str
    namespace: str
    kind: str
    content: str
    content_hash: str
    created_at: datetime
    updated_at: datetime
    tags: tuple[str, ...] = ()
    source: str | None = None
    confidence: float = 0.8
    pinned: bool = False
    metadata: str = "{}"  # JSON object text
    file_chunk: bool = False  # a chunk of a workspace file: never merged by its text


@dataclass(frozen=True, slots=True)
class Written:
    """What became of one row: the seq and id that hold its text, whether it is new, and
    whether a stored memory held its id already (``taken``)."""

    seq: int
    id: str
    inserted: bool
    taken: bool = False


_INSERT = """
    INSERT INTO memories (id, namespace, kind, content, tags, source, confidence, pinned,
                          created_at, updated_at, content_hash, metadata, lex, lex_len,
                          file_chunk)
    SELECT r.id, r.namespace, r.kind, r.content, r.tags::jsonb, r.source, r.confidence,
           r.pinned, r.created_at, r.updated_at, r.content_hash, r.metadata::jsonb,
           r.lex::tsvector, r.lex_len, r.file_chunk
    FROM unnest(%s::text[], %s::text[], %s::text[], %s::text[], %s::text[], %s::text[],
                %s::float8[], %s::boolean[], %s::timestamptz[], %s::timestamptz[], %s::text[],
                %s::text[], %s::text[], %s::integer[], %s::boolean[])
        WITH ORDINALITY AS r (id, namespace, kind, content, tags, source, confidence, pinned,
                              created_at, updated_at, content_hash, metadata, lex, lex_len,
                              file_chunk, n)
    ORDER BY r.n
    ON CONFLICT DO NOTHING
    RETURNING seq, id"""


def insert_rows(conn: psycopg.Connection[Any], rows: Sequence[Row]) -> list[Written]:
    """Store ``rows`` in one statement, its own transaction, or in the transaction that is
    open (pipelined statements of :data:`PIPELINED` rows); returns, for each row in order,
    the row that holds its text."""
    if not rows:
        return []
    from psycopg import Pipeline, pq

    alone = conn.info.transaction_status == pq.TransactionStatus.IDLE
    # A libpq older than 14 has no pipeline mode: one statement then.
    if len(rows) <= PIPELINED or alone or not Pipeline.is_supported():
        inserted = dict(_retrying(conn, _INSERT, _columns(rows)))
    else:
        inserted = _pipelined(conn, rows)
    return _resolve(conn, rows, {str(i): int(s) for s, i in inserted.items()})


def _pipelined(conn: psycopg.Connection[Any], rows: Sequence[Row]) -> dict[int, str]:
    """Insert ``rows`` in the open transaction, :data:`PIPELINED` rows a statement, each
    sent before the next one's terms are computed; the seq and id of each row inserted."""
    cursors = []
    with conn.pipeline():
        for at in range(0, len(rows), PIPELINED):
            part = _columns(rows[at : at + PIPELINED])
            cursors.append(conn.execute(_INSERT.encode(), part))
    return {seq: ident for cursor in cursors for seq, ident in cursor.fetchall()}


def _columns(rows: Sequence[Row]) -> list[list[Any]]:
    """The parameters of :data:`_INSERT` for ``rows``: a list per column."""
    lex = document_lex([(r.content, tags_columns(r.tags)[0]) for r in rows])
    return [
        [r.id for r in rows],
        [r.namespace for r in rows],
        [r.kind for r in rows],
        [r.content for r in rows],
        [json.dumps(list(r.tags), ensure_ascii=False) for r in rows],
        [r.source for r in rows],
        [r.confidence for r in rows],
        [r.pinned for r in rows],
        [r.created_at for r in rows],
        [r.updated_at for r in rows],
        [r.content_hash for r in rows],
        [r.metadata for r in rows],
        [literal for literal, _ in lex],
        [length for _, length in lex],
        [r.file_chunk for r in rows],
    ]


def _retrying(conn: psycopg.Connection[Any], query: str, params: Sequence[Any]) -> list[Any]:
    from psycopg import errors, pq

    if conn.info.transaction_status != pq.TransactionStatus.IDLE:
        # Inside the caller's transaction, which a failure ends whole: no savepoint (two
        # more round trips) and no retry.
        return conn.execute(query.encode(), params).fetchall()
    for attempt in range(RETRIES):
        try:
            # One statement of an autocommit connection: a transaction of its own, in one
            # round trip (no BEGIN and COMMIT of their own).
            return conn.execute(query.encode(), params).fetchall()
        except errors.DeadlockDetected:
            if attempt == RETRIES - 1:
                raise
    raise AssertionError("unreachable")


def _resolve(
    conn: psycopg.Connection[Any], rows: Sequence[Row], inserted: dict[str, int]
) -> list[Written]:
    """Which stored row holds each input row: the one it inserted, or the one that was
    already there with its id or with its text in its namespace (not a chunk)."""
    missing = [r for r in rows if r.id not in inserted]
    found: dict[tuple[str, str], tuple[int, str]] = {}
    by_id: dict[str, tuple[int, str]] = {}
    if missing:
        for seq, mid, namespace, digest, unique in conn.execute(
            """SELECT m.seq, m.id, m.namespace, m.content_hash,
                      m.kind <> 'chunk' AND NOT m.file_chunk FROM memories AS m
               WHERE m.id = ANY(%s)
                  OR (m.namespace, m.content_hash) IN (
                      SELECT * FROM unnest(%s::text[], %s::text[]))""",
            (
                [r.id for r in missing],
                [r.namespace for r in missing],
                [r.content_hash for r in missing],
            ),
        ):
            by_id[mid] = (seq, mid)
            if unique:
                found[(namespace, digest)] = (seq, mid)
    out: list[Written] = []
    claimed: set[str] = set()
    for r in rows:
        if r.id in inserted and r.id not in claimed:
            claimed.add(r.id)
            out.append(Written(inserted[r.id], r.id, True))
            continue
        holder = found.get((r.namespace, r.content_hash)) or by_id.get(r.id)
        if holder is None:
            raise StoreError(
                f"memory {r.id!r} was neither stored nor found (deleted meanwhile?); write it again"
            )
        out.append(Written(holder[0], holder[1], False, r.id in by_id))
    return out


def pg_row(row: Sequence[Any], *, file_chunk: bool = False) -> Row:
    """A row of :func:`mnemex.rows.prepare` (:data:`mnemex.rows.ROW_COLUMNS`) as the
    PostgreSQL engine writes it (``file_chunk``: a chunk of a workspace file)."""
    return Row(
        id=row[0],
        namespace=row[1],
        kind=row[2],
        content=row[3],
        tags=tuple(json.loads(row[4])),
        source=row[5],
        confidence=float(row[6]),
        pinned=bool(row[7]),
        created_at=parse_stored_time(row[8]),
        updated_at=parse_stored_time(row[9]),
        content_hash=row[10],
        metadata=row[11],
        file_chunk=file_chunk,
    )
