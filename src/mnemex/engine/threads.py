"""A memory's thread (the memories of its ``source`` in its namespace, in the order
written), read with statements both engines take."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mnemex.engine.protocol import Session
    from mnemex.results import TimelineEntry


def around(
    session: Session,
    engine: tuple[str, Callable[[Any], TimelineEntry], str],
    ns: str,
    ident: str,
    before: int,
    after: int,
) -> list[TimelineEntry] | None:
    """The memory ``ident`` of ``ns`` between up to ``before`` memories of its thread
    written just before it and ``after`` just after it (:func:`mnemex.memories.thread`),
    or ``None`` when the namespace has no such memory. On either engine: ``engine`` is its
    entry columns, the function reading an entry from them, and its parameter mark."""
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
