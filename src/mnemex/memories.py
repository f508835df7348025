"""Memories by id and by namespace: get, update, forget, count, iterate, and stats."""

from __future__ import annotations

import dataclasses
import sqlite3
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mnemex.config import MAX_SEARCH_LIMIT, check_count
from mnemex.engine import engine_of
from mnemex.engine.sqlite import memories as sqlite_memories
from mnemex.engine.sqlite.session import WRITE_CHUNK, Conflict
from mnemex.errors import InvalidInput, UnknownMemory
from mnemex.index.fts import Filters
from mnemex.models import Memory
from mnemex.results import Added, ForgetResult, GetResult, Stats, TimelineEntry
from mnemex.rows import FIELDS, UNSET, check_items, clean_source, memory, prepare_chunks
from mnemex.storage import IN_CHUNK, marks, read_meta, read_transaction, schema_version
from mnemex.storage.sql import delete_ids
from mnemex.text import (
    batched,
    clean_confidence,
    clean_content,
    clean_id,
    clean_label,
    clean_metadata,
    clean_tags,
    content_hash,
    format_time,
    listed,
    parse_stored_time,
    parse_time,
    segment,
    tags_columns,
    utcnow,
)

if TYPE_CHECKING:
    from mnemex.embed import Embedder
    from mnemex.engine.sqlite.session import SqliteSession


def id_list(ids: Iterable[str] | str) -> list[str]:
    """Memory ids, cleaned, each once, in the order given; at least one."""
    cleaned = [clean_id(i) for i in listed(ids, "ids")]
    if not cleaned:
        raise InvalidInput("no ids given")
    return list(dict.fromkeys(cleaned))


def postgres(session: SqliteSession) -> Any:
    """The PostgreSQL engine's operations (:mod:`mnemex.engine.postgres.memories`) when
    the session is PostgreSQL's, else ``None``: the SQLite code below runs."""
    if engine_of(session) == "SQLite":
        return None
    from mnemex.engine.postgres import memories as pg_memories

    return pg_memories


def get(session: SqliteSession, ns: str | None, ids: Iterable[str] | str) -> GetResult:
    """Full memories for ``ids`` (one ``IN`` query per ``IN_CHUNK`` ids), in the order asked."""
    wanted = id_list(ids)
    found: dict[str, Memory] = {}
    pg = postgres(session)
    if pg is not None:
        found = pg.get(session, ns, wanted)
    else:
        _get(session, ns, wanted, found)
    return GetResult(
        memories=tuple(found[i] for i in wanted if i in found),
        missing=tuple(i for i in wanted if i not in found),
    )


def _get(
    session: SqliteSession, ns: str | None, wanted: list[str], found: dict[str, Memory]
) -> None:
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


def holders(session: SqliteSession, ids: Iterable[str] | str) -> dict[str, str]:
    """The namespace of each of ``ids`` that is a memory (ids are unique in the store)."""
    wanted = id_list(ids)
    out: dict[str, str] = {}
    pg = postgres(session) is not None
    with session.connection() as conn:
        for chunk in batched(wanted, IN_CHUNK):
            which = "= ANY(%s)" if pg else f"IN ({marks(len(chunk))})"
            args: list[Any] = [list(chunk)] if pg else list(chunk)
            sql = f"SELECT id, namespace FROM memories WHERE id {which}"
            out.update((ident, ns) for ident, ns in conn.execute(sql, args))
    return out


def forget(session: SqliteSession, ns: str, ids: Iterable[str] | str) -> ForgetResult:
    """Delete memories by id. Ids not in the namespace are reported in ``missing``."""
    wanted = id_list(ids)
    pg = postgres(session)
    if pg is not None:
        gone = pg.forget(session, ns, wanted)
    else:
        with session.transaction() as conn:
            gone = delete_ids(conn, "memories", ns, wanted)
    session.after_write()
    return ForgetResult(
        forgotten=tuple(i for i in wanted if i in gone),
        missing=tuple(i for i in wanted if i not in gone),
    )


def add_many(
    session: SqliteSession,
    items: Iterable[Mapping[str, Any] | str],
    ns: str,
    keep_namespaces: bool,
    on_conflict: Conflict,
    embed: bool,
) -> list[str]:
    """Insert ``items`` in one transaction, then embed them; see :meth:`mnemex.Store.add_many`."""
    items = check_items(items)
    if not items:
        return []
    max_bytes = session.settings.max_content_bytes
    with session.connection():
        chunks = prepare_chunks(items, ns, keep_namespaces, max_bytes, WRITE_CHUNK)
        _, ids, seqs = session.insert_chunks(chunks, on_conflict)
    session.after_write()
    if embed:
        session.embedding.embed_new(seqs)
    return ids


def update(
    session: SqliteSession, ns: str, id: str, given: Mapping[str, Any], max_bytes: int
) -> tuple[Memory, int | None]:
    """Change the fields ``given`` does not leave :data:`UNSET`: the memory as stored, and
    its seq when its content changed (to embed it again); see :meth:`mnemex.Store.update`."""
    ident = clean_id(id)
    sets = _changes(given, max_bytes)
    pg = postgres(session)
    with session.transaction() as conn:
        if "content" in sets:
            path = session.workspaces.file_of(conn, ns, ident)
            if path is not None:
                raise InvalidInput(
                    f"memory {ident} is a chunk of the workspace file {path}: edit the "
                    "file (the next sync or search indexes it), not the chunk"
                )
        if pg is not None:
            stored, seq = pg.update(session, ns, ident, sets)
            return stored, seq if "content" in sets else None
        assignments = ", ".join(f"{k} = ?" for k in sets)
        cursor = conn.execute(
            f"UPDATE memories SET {assignments} WHERE id = ? AND namespace = ?",
            [*sets.values(), ident, ns],
        )
        if cursor.rowcount == 0:
            raise UnknownMemory([ident], ns)
        row = conn.execute(f"SELECT {FIELDS}, seq FROM memories WHERE id = ?", (ident,)).fetchone()
    return memory(row), row[-1] if "content" in sets else None


def _changes(given: Mapping[str, Any], max_bytes: int) -> dict[str, Any]:
    """The columns to set for the fields given, validated, and ``updated_at``."""
    g = {k: v for k, v in given.items() if v is not UNSET}
    sets: dict[str, Any] = {}
    if "content" in g:
        text = clean_content(g["content"], max_bytes)
        sets.update(content=text, content_hash=content_hash(text), fts_content=segment(text))
    if "kind" in g:
        sets["kind"] = clean_label(g["kind"], "kind", 40)
    if "tags" in g:
        sets["tags"], sets["fts_tags"] = tags_columns(clean_tags(g["tags"]))
    if "source" in g:
        sets["source"] = None if g["source"] is None else clean_source(g["source"])
    if "confidence" in g:
        sets["confidence"] = clean_confidence(g["confidence"])
    if "pinned" in g:
        sets["pinned"] = int(bool(g["pinned"]))
    if "metadata" in g:
        sets["metadata"] = clean_metadata(g["metadata"], max_bytes)
    if "created_at" in g:
        sets["created_at"] = format_time(parse_time(g["created_at"], what="created_at"))
    sets["updated_at"] = format_time(utcnow())
    return sets


def count(session: SqliteSession, ns: str | None) -> int:
    """Memories in the namespace (``None``: in every namespace)."""
    pg = postgres(session)
    if pg is not None:
        return int(pg.count(session, ns))
    where, params = Filters(ns).sql()
    with session.connection() as conn:
        sql = f"SELECT count(*) FROM memories AS m WHERE 1{where}"
        return int(conn.execute(sql, params).fetchone()[0])


def iterate(session: SqliteSession, ns: str | None, batch: int) -> Iterator[Memory]:
    """Every memory of the namespace (or all), oldest first, read ``batch`` at a time."""
    if isinstance(batch, bool) or not isinstance(batch, int) or not 1 <= batch <= 100_000:
        raise InvalidInput(f"batch must be an integer between 1 and 100000, got {batch!r}")
    pg = postgres(session)
    if pg is not None:
        yield from pg.iterate(session, ns, batch)
        return
    where, params = Filters(ns).sql()
    last = 0
    while True:
        with session.connection() as conn:
            rows = conn.execute(
                f"SELECT seq, {FIELDS} FROM memories AS m WHERE seq > ?{where} "
                "ORDER BY seq LIMIT ?",
                [last, *params, batch],
            ).fetchall()
        if not rows:
            return
        for row in rows:
            yield memory(row[1:])
        last = rows[-1][0]


def stats(session: SqliteSession, ns: str | None, embedder: Embedder | None) -> Stats:
    """What the namespace holds (``None``: the whole store), read in one read
    transaction; see :meth:`mnemex.Store.stats`."""
    pg = postgres(session)
    if pg is not None:
        return pg.stats(session, ns, embedder)  # type: ignore[no-any-return]
    with session.read() as conn:
        return _stats(conn, ns, embedder, session.path)


def _stats(
    conn: sqlite3.Connection, ns: str | None, embedder: Embedder | None, path: Path
) -> Stats:
    from mnemex import relations

    per_ns = dict(
        conn.execute(
            "SELECT namespace, count(*) FROM memories GROUP BY namespace ORDER BY namespace"
        ).fetchall()
    )
    where, params = Filters(ns).sql()
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
        relations=relations.count_relations(conn, ns),
    )


def remember(session: SqliteSession, row: tuple[Any, ...], embed: bool) -> Added:
    """One prepared row stored unless it repeats a memory of its namespace; see
    :meth:`mnemex.Store.remember`."""
    from mnemex import dedup as dups

    return dups.remember_row(session, row, embed)


def check(session: SqliteSession) -> dict[str, Any]:
    """See :meth:`mnemex.Store.check`."""
    pg = postgres(session)
    if pg is not None:
        return pg.check(session)  # type: ignore[no-any-return]
    from mnemex.engine.check import check as check_sqlite

    return check_sqlite(session)


def timeline(
    session: SqliteSession,
    filters: Filters,
    *,
    limit: int,
    oldest_first: bool = False,
    around: str | None = None,
    before: int = 5,
    after: int = 5,
) -> list[TimelineEntry]:
    """See :meth:`mnemex.Store.timeline` and :func:`mnemex.timeline.timeline`."""
    pg = postgres(session)
    if pg is None:
        from mnemex import timeline as timelines

        return timelines.timeline(
            session.connection,
            filters,
            limit=limit,
            oldest_first=oldest_first,
            around=around,
            before=before,
            after=after,
        )
    if around is None:
        limit = check_count("limit", limit, 1, MAX_SEARCH_LIMIT)
        return pg.timeline(session, filters, limit, oldest_first, None)  # type: ignore[no-any-return]
    for name, value in (("before", before), ("after", after)):
        check_count(name, value, 0, MAX_SEARCH_LIMIT)
    anchor = (clean_id(around), before, after)
    return pg.timeline(session, filters, limit, oldest_first, anchor)  # type: ignore[no-any-return]


def kind_counts(session: SqliteSession, ns: str | None) -> dict[str, dict[str, int]]:
    """Memories per kind in each namespace (``None``: every namespace): namespaces in
    order, kinds most common first."""
    pg = postgres(session)
    if pg is not None:
        rows = pg.kind_counts(session, ns)
    else:
        where, params = Filters(ns).sql()
        with session.connection() as conn:
            rows = conn.execute(
                f"SELECT namespace, kind, count(*) FROM memories AS m WHERE 1{where} "
                "GROUP BY namespace, kind",
                params,
            ).fetchall()
    out: dict[str, dict[str, int]] = {}
    for namespace, kind, n in sorted(rows, key=lambda r: (r[0], -int(r[2]), r[1])):
        out.setdefault(str(namespace), {})[str(kind)] = int(n)
    return out


def _reads(session: SqliteSession) -> Any:
    """The engine's module of memory reads (SQLite's, or PostgreSQL's)."""
    return postgres(session) or sqlite_memories


def last_thread(session: SqliteSession, ns: str, kind: str, limit: int) -> list[Memory]:
    """The newest ``limit`` memories of ``kind`` from the thread (``source``) of the newest
    one of that kind, newest first."""
    wanted = check_count("limit", limit, 1, MAX_SEARCH_LIMIT)
    return list(_reads(session).last_thread(session, ns, kind, wanted))


def notable(session: SqliteSession, ns: str, skip: Iterable[str], limit: int) -> list[Memory]:
    """Up to ``limit`` memories of kinds other than ``skip``: pinned first, then the most
    confident, the newest first."""
    wanted = check_count("limit", limit, 1, MAX_SEARCH_LIMIT)
    return list(_reads(session).notable(session, ns, list(dict.fromkeys(skip)), wanted))


def thread(
    session: SqliteSession, ns: str, ident: str, before: int, after: int
) -> list[TimelineEntry]:
    """The memory ``ident`` between up to ``before`` memories of its thread (the same
    ``source`` in the namespace) written just before it and ``after`` just after it, in
    the order written; only itself when it has no source."""
    anchor_id = clean_id(ident)
    for name, value in (("before", before), ("after", after)):
        check_count(name, value, 0, MAX_SEARCH_LIMIT)
    pg = postgres(session)
    if pg is not None:
        rows = _thread(session, (pg.ENTRY, pg.entry, "%s"), ns, anchor_id, before, after)
    else:
        from mnemex.timeline import COLUMNS, entry

        rows = _thread(session, (COLUMNS, entry, "?"), ns, anchor_id, before, after)
    if rows is None:
        raise UnknownMemory([anchor_id], ns)
    return rows


def _thread(
    session: SqliteSession,
    engine: tuple[str, Callable[[Any], TimelineEntry], str],
    ns: str,
    ident: str,
    before: int,
    after: int,
) -> list[TimelineEntry] | None:
    """:func:`thread` on either engine: ``engine`` is its entry columns, the function
    reading an entry from them, and its parameter mark."""
    columns, entry, mark = engine
    with session.read() as conn:
        anchor = conn.execute(
            f"SELECT m.seq, m.source, {columns} FROM memories AS m "
            f"WHERE m.id = {mark} AND m.namespace = {mark}",
            (ident, ns),
        ).fetchone()
        if anchor is None:
            return None
        seq, source = anchor[0], anchor[1]
        if source is None:
            return [entry(anchor[2:])]

        def beside(op: str, order: str, count: int) -> list[Any]:
            return list(
                conn.execute(
                    f"SELECT {columns} FROM memories AS m WHERE m.namespace = {mark} "
                    f"AND m.source = {mark} AND m.seq {op} {mark} ORDER BY m.seq {order} "
                    f"LIMIT {mark}",
                    (ns, source, seq, count),
                ).fetchall()
            )

        rows = [*reversed(beside("<", "DESC", before)), anchor[2:], *beside(">", "ASC", after)]
    return [entry(r) for r in rows]
