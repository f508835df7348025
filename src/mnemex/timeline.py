"""The timeline: memories by the time they were created, newest first or around one memory."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from typing import Any, Final

from mnemex.config import MAX_SEARCH_LIMIT, check_count
from mnemex.errors import UnknownMemory
from mnemex.index.fts import Filters
from mnemex.results import TimelineEntry
from mnemex.storage import read_transaction
from mnemex.storage.connect import Connect
from mnemex.text import clean_id, parse_stored_time, summarize

COLUMNS: Final = "m.id, m.created_at, m.kind, m.tags, substr(m.content, 1, 400), m.namespace"
"""What an entry is read from, in :func:`entry`'s order."""


def timeline(
    connection: Connect,
    filters: Filters,
    *,
    limit: int,
    oldest_first: bool = False,
    around: str | None = None,
    before: int = 5,
    after: int = 5,
) -> list[TimelineEntry]:
    """Memories within ``filters``, newest (or ``oldest_first``) first: the ``limit``
    newest, or with ``around`` (a memory id) that memory with up to ``before``
    memories created just before it and ``after`` just after it."""
    if around is None:
        limit = check_count("limit", limit, 1, MAX_SEARCH_LIMIT)
        with connection() as conn:
            return [entry(r) for r in latest(conn, filters, limit, oldest_first)]
    anchor_id = clean_id(around)
    for name, value in (("before", before), ("after", after)):
        check_count(name, value, 0, MAX_SEARCH_LIMIT)
    with connection() as conn, read_transaction(conn):
        rows = around_anchor(conn, filters, anchor_id, before, after)
    return [entry(r) for r in (rows if oldest_first else reversed(rows))]


def latest(
    conn: sqlite3.Connection, filters: Filters, limit: int, oldest_first: bool
) -> list[Sequence[Any]]:
    """Rows of :data:`COLUMNS`: the ``limit`` newest within ``filters`` (or oldest)."""
    where, params = filters.sql()
    order = "ASC" if oldest_first else "DESC"
    sql = f"""SELECT {COLUMNS} FROM memories AS m WHERE 1{where}
              ORDER BY m.created_at {order}, m.seq {order} LIMIT ?"""
    return conn.execute(sql, [*params, limit]).fetchall()


def around_anchor(
    conn: sqlite3.Connection, filters: Filters, anchor_id: str, before: int, after: int
) -> list[Sequence[Any]]:
    """Rows of :data:`COLUMNS`, oldest first: the anchor memory (which need only be in the
    namespace) between up to ``before`` older and ``after`` newer rows within ``filters``."""
    where, params = filters.sql()
    in_ns, ns_params = Filters(filters.namespace).sql()
    anchor = conn.execute(
        f"SELECT m.seq, {COLUMNS} FROM memories AS m WHERE m.id = ?{in_ns}",
        [anchor_id, *ns_params],
    ).fetchone()
    if anchor is None:
        raise UnknownMemory([anchor_id], filters.namespace or "*")
    seq, created = anchor[0], anchor[2]

    def beside(op: str, order: str, count: int) -> list[Sequence[Any]]:
        return conn.execute(
            f"""SELECT {COLUMNS} FROM memories AS m
                WHERE m.created_at {op}= ? AND (m.created_at {op} ? OR m.seq {op} ?){where}
                ORDER BY m.created_at {order}, m.seq {order} LIMIT ?""",
            [created, created, seq, *params, count],
        ).fetchall()

    return [*reversed(beside("<", "DESC", before)), anchor[1:], *beside(">", "ASC", after)]


def entry(row: Sequence[Any]) -> TimelineEntry:
    """The entry of a row of :data:`COLUMNS`."""
    ident, created, kind, tags, text, namespace = row
    return TimelineEntry(
        ident, parse_stored_time(created), kind, tuple(json.loads(tags)), summarize(text), namespace
    )
