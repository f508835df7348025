"""Memories by id and by namespace in SQLite: the statements :mod:`mnemex.memories`
asks of an engine (get, forget, update, count, iterate, stats, the timeline, reads by
recency and weight); PostgreSQL's are :mod:`mnemex.engine.postgres.memories`. Inputs
arrive validated by the shared code."""

from __future__ import annotations

import dataclasses
import json
import sqlite3
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from mnemex.engine.sqlite import relations
from mnemex.engine.sqlite.fts import filter_sql
from mnemex.errors import UnknownMemory
from mnemex.index.retrieval import Filters
from mnemex.rows import FIELDS
from mnemex.rows import memory as memory  # the engine's reading of a row
from mnemex.storage import IN_CHUNK, marks, read_meta, read_transaction, schema_version
from mnemex.storage.sql import delete_ids
from mnemex.text import batched, clean_namespace, parse_stored_time, summarize

if TYPE_CHECKING:
    from mnemex.embed import Embedder
    from mnemex.engine.sqlite.surface import SqliteSurface
    from mnemex.models import Memory
    from mnemex.results import Stats, TimelineEntry

MARK: Final = "?"  # the parameter mark of the statements mnemex.memories builds
ENTRY: Final = "m.id, m.created_at, m.kind, m.tags, substr(m.content, 1, 400), m.namespace"
"""What a timeline entry is read from, in :func:`entry`'s order."""


def get(session: SqliteSurface, ns: str | None, wanted: list[str]) -> dict[str, Memory]:
    """The memories of the namespace with these ids, by id (a chunk of a workspace file
    with its place); one ``IN`` query per ``IN_CHUNK`` ids."""
    found: dict[str, Memory] = {}
    with session.connection() as conn, read_transaction(conn):
        for chunk in batched(wanted, IN_CHUNK):
            rows = conn.execute(
                f"SELECT {FIELDS}, seq FROM memories WHERE namespace = ? AND id IN "
                f"({marks(len(chunk))})",
                [ns, *chunk],
            ).fetchall()
            places = session.workspaces.locations(conn, [row[-1] for row in rows])
            for row in rows:
                found[row[0]] = dataclasses.replace(memory(row), location=places.get(row[-1]))
    return found


def holders(session: SqliteSurface, wanted: list[str]) -> dict[str, str]:
    """The namespace of each of ``wanted`` that is a memory."""
    out: dict[str, str] = {}
    with session.connection() as conn:
        for chunk in batched(wanted, IN_CHUNK):
            sql = f"SELECT id, namespace FROM memories WHERE id IN ({marks(len(chunk))})"
            out.update((ident, ns) for ident, ns in conn.execute(sql, list(chunk)))
    return out


def forget(session: SqliteSurface, ns: str, wanted: list[str]) -> set[str]:
    """Delete the namespace's memories with these ids; the ids deleted."""
    with session.transaction() as conn:
        return delete_ids(conn, "memories", ns, wanted)


def update(
    session: SqliteSurface, ns: str, ident: str, sets: Mapping[str, Any]
) -> tuple[Memory, int]:
    """Set the columns ``sets`` of one memory inside the caller's write transaction (of
    ``session.transaction()``); the memory as stored and its seq."""
    conn = session.conn
    assignments = ", ".join(f"{k} = ?" for k in sets)
    cursor = conn.execute(
        f"UPDATE memories SET {assignments} WHERE id = ? AND namespace = ?",
        [*sets.values(), ident, ns],
    )
    if cursor.rowcount == 0:
        raise UnknownMemory([ident], ns)
    row = conn.execute(f"SELECT {FIELDS}, seq FROM memories WHERE id = ?", (ident,)).fetchone()
    return memory(row), row[-1]


def count(session: SqliteSurface, ns: str | None) -> int:
    """Memories in the namespace (``None``: in every namespace)."""
    where, params = filter_sql(Filters(ns))
    with session.connection() as conn:
        sql = f"SELECT count(*) FROM memories AS m WHERE 1{where}"
        return int(conn.execute(sql, params).fetchone()[0])


def page(session: SqliteSurface, ns: str | None, after: int, limit: int) -> list[Sequence[Any]]:
    """Rows (seq, then the memory's fields) of up to ``limit`` memories of the namespace
    (or all) with ``seq > after``, oldest first."""
    where, params = filter_sql(Filters(ns))
    sql = f"SELECT seq, {FIELDS} FROM memories AS m WHERE seq > ?{where} ORDER BY seq LIMIT ?"
    return _all(session, sql, [after, *params, limit])


def _all(session: SqliteSurface, sql: str, params: Sequence[Any]) -> list[Sequence[Any]]:
    with session.connection() as conn:
        return list(conn.execute(sql, params).fetchall())


def stats(session: SqliteSurface, ns: str | None, embedder: Embedder | None) -> Stats:
    """What the namespace holds (``None``: the whole store), read in one read
    transaction."""
    with session.read() as conn:
        return _stats(conn, ns, embedder, session.path)


def _stats(
    conn: sqlite3.Connection, ns: str | None, embedder: Embedder | None, path: Path
) -> Stats:
    from mnemex.results import Stats  # not loaded by the prompt hook

    per_ns = dict(
        conn.execute(
            "SELECT namespace, count(*) FROM memories GROUP BY namespace ORDER BY namespace"
        ).fetchall()
    )
    where, params = filter_sql(Filters(ns))
    kinds = dict(
        conn.execute(
            f"SELECT kind, count(*) FROM memories AS m WHERE 1{where} "
            "GROUP BY kind ORDER BY count(*) DESC, kind",
            params,
        ).fetchall()
    )
    oldest, newest = conn.execute(
        f"SELECT min(created_at), max(created_at) FROM memories AS m WHERE 1{where}",
        params,
    ).fetchone()
    pages = conn.execute("PRAGMA page_count").fetchone()[0]
    page_size = conn.execute("PRAGMA page_size").fetchone()[0]
    scoped = "" if ns is None else " JOIN memories AS m ON m.seq = e.seq WHERE m.namespace = ?"
    models = dict(
        conn.execute(
            f"SELECT e.model, count(DISTINCT e.seq) FROM embeddings AS e{scoped} GROUP BY e.model",
            [] if ns is None else [ns],
        ).fetchall()
    )
    model = embedder.model_id if embedder is not None else None
    vector_count = models.pop(model, 0) if model else 0
    wal = path.with_name(path.name + "-wal")
    total = sum(per_ns.values()) if ns is None else per_ns.get(ns, 0)
    return Stats(
        path=str(path),
        namespace="*" if ns is None else ns,
        memories=total,
        total_memories=sum(per_ns.values()),
        namespaces=per_ns,
        kinds=kinds,
        oldest=parse_stored_time(oldest) if oldest else None,
        newest=parse_stored_time(newest) if newest else None,
        size_bytes=pages * page_size + (wal.stat().st_size if wal.exists() else 0),
        schema_version=schema_version(conn),
        tokenizer=read_meta(conn).get("tokenizer", ""),
        embedder=model,
        vectors=vector_count,
        pending_vectors=total - vector_count if model else 0,
        other_models=models,
        relations=relations.count(conn, None if ns is None else clean_namespace(ns)),
    )


def check(session: SqliteSurface) -> dict[str, Any]:
    """See :meth:`mnemex.Store.check`."""
    from mnemex.engine.check import check as check_sqlite

    return check_sqlite(session)


def timeline(
    session: SqliteSurface,
    filters: Filters,
    limit: int,
    oldest_first: bool,
    around: tuple[str, int, int] | None,
) -> list[TimelineEntry]:
    """The entries of :func:`mnemex.memories.timeline`, which checks the arguments: the
    ``limit`` newest (or oldest) within the filters, or those ``around`` = (id, before,
    after) one memory."""
    if around is None:
        with session.connection() as conn:
            return [entry(r) for r in latest(conn, filters, limit, oldest_first)]
    with session.connection() as conn, read_transaction(conn):
        rows = around_anchor(conn, filters, *around)
    return [entry(r) for r in (rows if oldest_first else reversed(rows))]


def latest(
    conn: sqlite3.Connection, filters: Filters, limit: int, oldest_first: bool
) -> list[Sequence[Any]]:
    """Rows of :data:`ENTRY`: the ``limit`` newest within ``filters`` (or oldest)."""
    where, params = filter_sql(filters)
    order = "ASC" if oldest_first else "DESC"
    sql = f"""SELECT {ENTRY} FROM memories AS m WHERE 1{where}
              ORDER BY m.created_at {order}, m.seq {order} LIMIT ?"""
    return conn.execute(sql, [*params, limit]).fetchall()


def around_anchor(
    conn: sqlite3.Connection, filters: Filters, anchor_id: str, before: int, after: int
) -> list[Sequence[Any]]:
    """Rows of :data:`ENTRY`, oldest first: the anchor memory (which need only be in the
    namespace) between up to ``before`` older and ``after`` newer rows within ``filters``."""
    where, params = filter_sql(filters)
    in_ns, ns_params = filter_sql(Filters(filters.namespace))
    anchor = conn.execute(
        f"SELECT m.seq, {ENTRY} FROM memories AS m WHERE m.id = ?{in_ns}",
        [anchor_id, *ns_params],
    ).fetchone()
    if anchor is None:
        raise UnknownMemory([anchor_id], filters.namespace or "*")
    seq, created = anchor[0], anchor[2]

    def beside(op: str, order: str, count: int) -> list[Sequence[Any]]:
        return conn.execute(
            f"""SELECT {ENTRY} FROM memories AS m
                WHERE m.created_at {op}= ? AND (m.created_at {op} ? OR m.seq {op} ?){where}
                ORDER BY m.created_at {order}, m.seq {order} LIMIT ?""",
            [created, created, seq, *params, count],
        ).fetchall()

    return [*reversed(beside("<", "DESC", before)), anchor[1:], *beside(">", "ASC", after)]


def entry(row: Sequence[Any]) -> TimelineEntry:
    """The entry of a row of :data:`ENTRY`."""
    from mnemex.results import TimelineEntry  # not loaded by the prompt hook

    ident, created, kind, tags, text, namespace = row
    return TimelineEntry(
        ident, parse_stored_time(created), kind, tuple(json.loads(tags)), summarize(text), namespace
    )


def kind_counts(session: SqliteSurface, ns: str | None) -> list[Sequence[Any]]:
    """(namespace, kind, count) of the namespace (``None``: of every namespace)."""
    where, params = filter_sql(Filters(ns))
    sql = f"SELECT namespace, kind, count(*) FROM memories AS m WHERE 1{where} GROUP BY namespace, kind"
    return _all(session, sql, params)


def last_thread(session: SqliteSurface, ns: str, kind: str, limit: int) -> list[Memory]:
    """The newest ``limit`` memories of ``kind`` with the source of the newest one of
    that kind (its thread), newest first; none when that source is empty."""
    with session.connection() as conn:
        last = conn.execute(
            "SELECT source FROM memories WHERE namespace = ? AND kind = ? ORDER BY seq DESC "
            "LIMIT 1",
            (ns, kind),
        ).fetchone()
        if last is None or not last[0]:
            return []
        rows = conn.execute(
            f"SELECT {FIELDS} FROM memories WHERE namespace = ? AND kind = ? AND source = ? "
            "ORDER BY seq DESC LIMIT ?",
            (ns, kind, last[0], limit),
        ).fetchall()
    return [memory(row) for row in rows]


def notable(session: SqliteSurface, ns: str, skip: Sequence[str], limit: int) -> list[Memory]:
    """Up to ``limit`` memories of kinds other than ``skip``: pinned first, then by
    confidence, the newest first."""
    with session.connection() as conn:
        rows = conn.execute(
            f"SELECT {FIELDS} FROM memories WHERE namespace = ? "
            f"AND kind NOT IN ({marks(len(skip))}) "
            "ORDER BY pinned DESC, confidence DESC, seq DESC LIMIT ?",
            (ns, *skip, limit),
        ).fetchall()
    return [memory(row) for row in rows]


def bodies(session: SqliteSurface, ids: Sequence[str]) -> dict[str, tuple[str, float]]:
    """The whole content and the confidence of each memory (for recall)."""
    found: dict[str, tuple[str, float]] = {}
    with session.connection() as conn:
        for chunk in batched(ids, IN_CHUNK):
            sql = f"SELECT id, content, confidence FROM memories WHERE id IN ({marks(len(chunk))})"
            found.update((ident, (text, sure)) for ident, text, sure in conn.execute(sql, chunk))
    return found
