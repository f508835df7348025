"""Memories by id and by namespace in PostgreSQL: what :mod:`mnemex.engine.sqlite.memories`
does on SQLite (get, forget, update, count, a page of rows, stats, the timeline), over a
:class:`~mnemex.engine.postgres.session.PostgresSession`.

Inputs arrive validated by the shared code (:mod:`mnemex.rows`, :mod:`mnemex.text`);
rows are read back as :class:`~mnemex.models.Memory` values equal to SQLite's.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from datetime import UTC
from typing import TYPE_CHECKING, Any

from mnemex.engine.postgres.schema import read_meta, schema_version
from mnemex.engine.postgres.tokens import document_lex
from mnemex.errors import InvalidInput, UnknownMemory
from mnemex.index.retrieval import Filters
from mnemex.models import Memory
from mnemex.results import Stats, TimelineEntry
from mnemex.storage import IN_CHUNK
from mnemex.text import batched, parse_stored_time, summarize, tags_columns

if TYPE_CHECKING:
    from mnemex.embed import Embedder
    from mnemex.engine.protocol import PostgresSurface

MARK = "%s"  # the parameter mark of the statements mnemex.memories builds
COLUMNS = (
    "id, namespace, kind, content, tags, source, confidence, pinned, "
    "created_at, updated_at, content_hash, metadata"
)


def memory(row: Sequence[Any]) -> Memory:
    """The :class:`~mnemex.models.Memory` of a row of :data:`COLUMNS`."""
    return Memory(
        id=row[0],
        namespace=row[1],
        kind=row[2],
        content=row[3],
        tags=tuple(row[4]),
        source=row[5],
        confidence=float(row[6]),
        pinned=bool(row[7]),
        created_at=row[8].astimezone(UTC),
        updated_at=row[9].astimezone(UTC),
        content_hash=row[10],
        metadata=dict(row[11]),
    )


def get(session: PostgresSurface, ns: str | None, wanted: list[str]) -> dict[str, Memory]:
    """The memories of the namespace with these ids, by id (a chunk of a workspace file
    with its place)."""
    with session.read() as conn:
        rows = conn.execute(
            f"SELECT {COLUMNS}, seq FROM memories WHERE namespace = %s AND id = ANY(%s)",
            (ns, wanted),
        ).fetchall()
        places = session.workspaces.locations(conn, [row[-1] for row in rows])
    return {row[0]: dataclasses.replace(memory(row), location=places.get(row[-1])) for row in rows}


def holders(session: PostgresSurface, wanted: list[str]) -> dict[str, str]:
    """The namespace of each of ``wanted`` that is a memory."""
    out: dict[str, str] = {}
    with session.connection() as conn:
        for chunk in batched(wanted, IN_CHUNK):
            sql = "SELECT id, namespace FROM memories WHERE id = ANY(%s)"
            out.update((ident, ns) for ident, ns in conn.execute(sql, [list(chunk)]))
    return out


def forget(session: PostgresSurface, ns: str, wanted: list[str]) -> set[str]:
    """Delete the namespace's memories with these ids (their vectors go with them); the
    ids deleted."""
    with session.transaction() as conn:
        rows = conn.execute(
            "DELETE FROM memories WHERE namespace = %s AND id = ANY(%s) RETURNING id",
            (ns, wanted),
        ).fetchall()
    return {r[0] for r in rows}


_AS_STORED = {
    "tags": "%s::jsonb",
    "metadata": "%s::jsonb",
}


def update(
    session: PostgresSurface, ns: str, ident: str, sets: Mapping[str, Any]
) -> tuple[Memory, int]:
    """Set the columns ``sets`` (as :func:`mnemex.memories` validates them for SQLite) of
    one memory; the memory as stored and its seq. A new text already held by another
    memory of the namespace raises :class:`~mnemex.errors.InvalidInput`."""
    from psycopg import errors

    values = {k: v for k, v in sets.items() if not k.startswith("fts_")}
    for key in ("created_at", "updated_at"):
        if key in values:
            values[key] = parse_stored_time(values[key])
    if "pinned" in values:
        values["pinned"] = bool(values["pinned"])
    assignments = ", ".join(f"{k} = {_AS_STORED.get(k, '%s')}" for k in values)
    try:
        with session.transaction() as conn:
            row = conn.execute(
                f"UPDATE memories SET {assignments} WHERE id = %s AND namespace = %s "
                f"RETURNING seq, content, tags::text".encode(),
                [*values.values(), ident, ns],
            ).fetchone()
            if row is None:
                raise UnknownMemory([ident], ns)
            if "content" in values or "tags" in values:
                lex, length = document_lex([(row[1], _fts_tags(row[2]))])[0]
                conn.execute(
                    "UPDATE memories SET lex = %s::tsvector, lex_len = %s WHERE seq = %s",
                    (lex, length, row[0]),
                )
            stored = conn.execute(
                f"SELECT {COLUMNS} FROM memories WHERE seq = %s", (row[0],)
            ).fetchone()
    except errors.UniqueViolation:
        raise InvalidInput(
            f"another memory of namespace {ns!r} holds this text already: "
            "forget one of the two, or keep the text apart"
        ) from None
    return memory(stored), int(row[0])


def _fts_tags(tags_json: str) -> str:
    return tags_columns(tuple(json.loads(tags_json)))[0]


def _where(ns: str | None) -> tuple[str, list[Any]]:
    return ("", []) if ns is None else (" AND namespace = %s", [ns])


def count(session: PostgresSurface, ns: str | None) -> int:
    where, params = _where(ns)
    with session.connection() as conn:
        row = conn.execute(f"SELECT count(*) FROM memories WHERE true{where}", params).fetchone()
    return int(row[0])


def page(session: PostgresSurface, ns: str | None, after: int, limit: int) -> list[Sequence[Any]]:
    """Rows (seq, then :data:`COLUMNS`) of up to ``limit`` memories of the namespace (or
    all) with ``seq > after``, oldest first."""
    where, params = _where(ns)
    with session.connection() as conn:
        return list(
            conn.execute(
                f"SELECT seq, {COLUMNS} FROM memories WHERE seq > %s{where} ORDER BY seq LIMIT %s",
                [after, *params, limit],
            ).fetchall()
        )


def bodies(session: PostgresSurface, ids: Sequence[str]) -> dict[str, tuple[str, float]]:
    """The whole content and the confidence of each memory (for recall)."""
    with session.connection() as conn:
        rows = conn.execute(
            "SELECT id, content, confidence FROM memories WHERE id = ANY(%s)", (list(ids),)
        ).fetchall()
    return {r[0]: (r[1], float(r[2])) for r in rows}


def stats(session: PostgresSurface, ns: str | None, embedder: Embedder | None) -> Stats:
    """What the namespace holds (``None``: the whole database); see :meth:`mnemex.Store.stats`."""
    where, params = _where(ns)
    with session.read() as conn:
        per_ns = dict(
            conn.execute(
                "SELECT namespace, count(*) FROM memories GROUP BY namespace ORDER BY namespace"
            ).fetchall()
        )
        kinds = dict(
            conn.execute(
                f"SELECT kind, count(*) FROM memories WHERE true{where} "
                "GROUP BY kind ORDER BY count(*) DESC, kind",
                params,
            ).fetchall()
        )
        oldest, newest = conn.execute(
            f"SELECT min(created_at), max(created_at) FROM memories WHERE true{where}", params
        ).fetchone()
        models = dict(
            conn.execute(
                f"SELECT model, count(*) FROM embeddings WHERE window_no = 0{where} GROUP BY model",
                params,
            ).fetchall()
        )
        size = conn.execute("SELECT pg_database_size(current_database())").fetchone()[0]
        version, meta = schema_version(conn), read_meta(conn)
        relations = conn.execute(f"SELECT count(*) FROM relations WHERE true{where}", params)
        relation_count = int(relations.fetchone()[0])
    model = embedder.model_id if embedder is not None else None
    vectors = int(models.pop(model, 0)) if model else 0
    total = sum(per_ns.values()) if ns is None else per_ns.get(ns, 0)
    return Stats(
        path=session.path,
        namespace="*" if ns is None else ns,
        memories=total,
        total_memories=sum(per_ns.values()),
        namespaces={str(k): int(v) for k, v in per_ns.items()},
        kinds={str(k): int(v) for k, v in kinds.items()},
        oldest=oldest.astimezone(UTC) if oldest else None,
        newest=newest.astimezone(UTC) if newest else None,
        size_bytes=int(size),
        schema_version=version,
        tokenizer=meta.get("terms", "").removeprefix("fts5 "),
        embedder=model,
        vectors=vectors,
        pending_vectors=total - vectors if model else 0,
        other_models={str(k): int(v) for k, v in models.items()},
        relations=relation_count,
    )


def check(session: PostgresSurface) -> dict[str, Any]:
    """The lexical index and its statistics against a rebuild from the rows
    (:func:`mnemex.engine.postgres.bm25.check`), as :meth:`mnemex.Store.check` reports."""
    from mnemex.engine.postgres.bm25 import check as check_index

    with session.connection() as conn:
        problems = check_index(conn)
        rows = int(conn.execute("SELECT count(*) FROM memories").fetchone()[0])
        problems += session.workspaces.drift(conn)
    return {"ok": not problems, "memories": rows, "problems": problems}


ENTRY = "m.id, m.created_at, m.kind, m.tags, substr(m.content, 1, 400), m.namespace"
"""What a timeline entry is read from, in :func:`entry`'s order."""


def timeline(
    session: PostgresSurface,
    filters: Filters,
    limit: int,
    oldest_first: bool,
    around: tuple[str, int, int] | None,
) -> list[TimelineEntry]:
    """:func:`mnemex.memories.timeline` (arguments checked there): the ``limit`` newest
    (or oldest) within the filters, or ``around`` = (id, before, after)."""
    from mnemex.engine.postgres.retrieval import conditions

    parts, params = conditions(filters)
    if filters.namespace is not None:
        parts.append("m.namespace = %(f_ns)s")
        params["f_ns"] = filters.namespace
    where = "".join(f" AND {p}" for p in parts)
    with session.read() as conn:
        if around is None:
            order = "ASC" if oldest_first else "DESC"
            rows = conn.execute(
                f"SELECT {ENTRY} FROM memories AS m WHERE true{where} "
                f"ORDER BY m.created_at {order}, m.seq {order} LIMIT %(limit)s".encode(),
                {**params, "limit": limit},
            ).fetchall()
            return [entry(r) for r in rows]
        rows = _around(conn, filters.namespace, where, params, around)
    return [entry(r) for r in (rows if oldest_first else reversed(rows))]


def _around(
    conn: Any, ns: str | None, where: str, params: dict[str, Any], around: tuple[str, int, int]
) -> list[Sequence[Any]]:
    ident, before, after = around
    in_ns = "" if ns is None else " AND m.namespace = %(ns)s"
    anchor = conn.execute(
        f"SELECT m.seq, {ENTRY} FROM memories AS m WHERE m.id = %(id)s{in_ns}".encode(),
        {"id": ident, "ns": ns},
    ).fetchone()
    if anchor is None:
        raise UnknownMemory([ident], ns or "*")
    at = {**params, "seq": anchor[0], "at": anchor[2]}
    older = conn.execute(
        f"""SELECT {ENTRY} FROM memories AS m
            WHERE (m.created_at, m.seq) < (%(at)s, %(seq)s){where}
            ORDER BY m.created_at DESC, m.seq DESC LIMIT %(n)s""".encode(),
        {**at, "n": before},
    ).fetchall()
    newer = conn.execute(
        f"""SELECT {ENTRY} FROM memories AS m
            WHERE (m.created_at, m.seq) > (%(at)s, %(seq)s){where}
            ORDER BY m.created_at ASC, m.seq ASC LIMIT %(n)s""".encode(),
        {**at, "n": after},
    ).fetchall()
    return [*reversed(older), anchor[1:], *newer]


def entry(row: Sequence[Any]) -> TimelineEntry:
    return TimelineEntry(
        id=row[0],
        created_at=row[1].astimezone(UTC),
        kind=row[2],
        tags=tuple(row[3]),
        summary=summarize(row[4]),
        namespace=row[5],
    )


def kind_counts(session: PostgresSurface, ns: str | None) -> list[Sequence[Any]]:
    """(namespace, kind, count) of the namespace (``None``: of every namespace)."""
    where, params = _where(ns)
    with session.connection() as conn:
        return list(
            conn.execute(
                f"SELECT namespace, kind, count(*) FROM memories WHERE true{where} "
                "GROUP BY namespace, kind",
                params,
            ).fetchall()
        )


def last_thread(session: PostgresSurface, ns: str, kind: str, limit: int) -> list[Memory]:
    """The newest ``limit`` memories of ``kind`` with the source of the newest one of
    that kind (its thread), newest first; none when that source is empty."""
    with session.read() as conn:
        last = conn.execute(
            "SELECT source FROM memories WHERE namespace = %s AND kind = %s "
            "ORDER BY seq DESC LIMIT 1",
            (ns, kind),
        ).fetchone()
        if last is None or not last[0]:
            return []
        rows = conn.execute(
            f"SELECT {COLUMNS} FROM memories WHERE namespace = %s AND kind = %s "
            "AND source = %s ORDER BY seq DESC LIMIT %s",
            (ns, kind, last[0], limit),
        ).fetchall()
    return [memory(row) for row in rows]


def notable(session: PostgresSurface, ns: str, skip: Sequence[str], limit: int) -> list[Memory]:
    """Up to ``limit`` memories of kinds other than ``skip``: pinned first, then by
    confidence, the newest first."""
    with session.connection() as conn:
        rows = conn.execute(
            f"SELECT {COLUMNS} FROM memories WHERE namespace = %s AND kind <> ALL(%s) "
            "ORDER BY pinned DESC, confidence DESC, seq DESC LIMIT %s",
            (ns, list(skip), limit),
        ).fetchall()
    return [memory(row) for row in rows]
