"""Memories by id and by namespace: get, update, forget, count, iterate, and stats.

The validation is here; the statements are each engine's (``session.memories``:
:mod:`mnemex.engine.sqlite.memories`, :mod:`mnemex.engine.postgres.memories`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from mnemex.config import MAX_SEARCH_LIMIT, check_count
from mnemex.engine import threads
from mnemex.engine.sqlite.session import WRITE_CHUNK, Conflict
from mnemex.errors import InvalidInput, UnknownMemory
from mnemex.index.retrieval import Filters
from mnemex.models import Memory
from mnemex.results import Added, ForgetResult, GetResult, Stats, TimelineEntry
from mnemex.rows import UNSET, check_items, clean_source, prepare_chunks
from mnemex.text import (
    clean_confidence,
    clean_content,
    clean_id,
    clean_label,
    clean_metadata,
    clean_tags,
    content_hash,
    format_time,
    listed,
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


def get(session: SqliteSession, ns: str | None, ids: Iterable[str] | str) -> GetResult:
    """Full memories for ``ids``, in the order asked."""
    wanted = id_list(ids)
    found = session.memories.get(session, ns, wanted)
    return GetResult(
        memories=tuple(found[i] for i in wanted if i in found),
        missing=tuple(i for i in wanted if i not in found),
    )


def holders(session: SqliteSession, ids: Iterable[str] | str) -> dict[str, str]:
    """The namespace of each of ``ids`` that is a memory (ids are unique in the store)."""
    return session.memories.holders(session, id_list(ids))


def forget(session: SqliteSession, ns: str, ids: Iterable[str] | str) -> ForgetResult:
    """Delete memories by id. Ids not in the namespace are reported in ``missing``."""
    wanted = id_list(ids)
    gone = session.memories.forget(session, ns, wanted)
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
    with session.transaction() as conn:
        if "content" in sets:
            path = session.workspaces.file_of(conn, ns, ident)
            if path is not None:
                raise InvalidInput(
                    f"memory {ident} is a chunk of the workspace file {path}: edit the "
                    "file (the next sync or search indexes it), not the chunk"
                )
        stored, seq = session.memories.update(session, ns, ident, sets)
    return stored, seq if "content" in sets else None


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
    return int(session.memories.count(session, ns))


def iterate(session: SqliteSession, ns: str | None, batch: int) -> Iterator[Memory]:
    """Every memory of the namespace (or all), oldest first, read ``batch`` at a time."""
    if isinstance(batch, bool) or not isinstance(batch, int) or not 1 <= batch <= 100_000:
        raise InvalidInput(f"batch must be an integer between 1 and 100000, got {batch!r}")
    ops, last = session.memories, 0
    while True:
        rows = ops.page(session, ns, last, batch)
        if not rows:
            return
        for row in rows:
            yield ops.memory(row[1:])
        last = rows[-1][0]


def stats(session: SqliteSession, ns: str | None, embedder: Embedder | None) -> Stats:
    """What the namespace holds (``None``: the whole store), read in one read
    transaction; see :meth:`mnemex.Store.stats`."""
    return session.memories.stats(session, ns, embedder)


def remember(session: SqliteSession, row: tuple[Any, ...], embed: bool) -> Added:
    """One prepared row stored unless it repeats a memory of its namespace; see
    :meth:`mnemex.Store.remember`."""
    from mnemex import dedup as dups

    return dups.remember_row(session, row, embed)


def check(session: SqliteSession) -> dict[str, Any]:
    """See :meth:`mnemex.Store.check`."""
    return session.memories.check(session)


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
    """Memories within ``filters``, newest (or ``oldest_first``) first: the ``limit``
    newest, or with ``around`` (a memory id) that memory with up to ``before`` memories
    created just before it and ``after`` just after it; see :meth:`mnemex.Store.timeline`."""
    if around is None:
        limit = check_count("limit", limit, 1, MAX_SEARCH_LIMIT)
        return session.memories.timeline(session, filters, limit, oldest_first, None)
    anchor_id = clean_id(around)
    for name, value in (("before", before), ("after", after)):
        check_count(name, value, 0, MAX_SEARCH_LIMIT)
    anchor = (anchor_id, before, after)
    return session.memories.timeline(session, filters, limit, oldest_first, anchor)


def kind_counts(session: SqliteSession, ns: str | None) -> dict[str, dict[str, int]]:
    """Memories per kind in each namespace (``None``: every namespace): namespaces in
    order, kinds most common first."""
    rows = session.memories.kind_counts(session, ns)
    out: dict[str, dict[str, int]] = {}
    for namespace, kind, n in sorted(rows, key=lambda r: (r[0], -int(r[2]), r[1])):
        out.setdefault(str(namespace), {})[str(kind)] = int(n)
    return out


def last_thread(session: SqliteSession, ns: str, kind: str, limit: int) -> list[Memory]:
    """The newest ``limit`` memories of ``kind`` from the thread (``source``) of the newest
    one of that kind, newest first."""
    wanted = check_count("limit", limit, 1, MAX_SEARCH_LIMIT)
    return list(session.memories.last_thread(session, ns, kind, wanted))


def notable(session: SqliteSession, ns: str, skip: Iterable[str], limit: int) -> list[Memory]:
    """Up to ``limit`` memories of kinds other than ``skip``: pinned first, then the most
    confident, the newest first."""
    wanted = check_count("limit", limit, 1, MAX_SEARCH_LIMIT)
    return list(session.memories.notable(session, ns, list(dict.fromkeys(skip)), wanted))


def thread(
    session: SqliteSession, ns: str, ident: str, before: int, after: int
) -> list[TimelineEntry]:
    """The memory ``ident`` between up to ``before`` memories of its thread (the same
    ``source`` in the namespace) written just before it and ``after`` just after it, in
    the order written; only itself when it has no source."""
    anchor_id = clean_id(ident)
    for name, value in (("before", before), ("after", after)):
        check_count(name, value, 0, MAX_SEARCH_LIMIT)
    ops = session.memories
    rows = threads.around(session, (ops.ENTRY, ops.entry, ops.MARK), ns, anchor_id, before, after)
    if rows is None:
        raise UnknownMemory([anchor_id], ns)
    return rows
