"""SQLite's reads of memories by recency and weight (the start of a session's context)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from mnemex.rows import FIELDS, memory
from mnemex.storage import marks

if TYPE_CHECKING:
    from mnemex.engine.sqlite.session import SqliteSession
    from mnemex.models import Memory


def last_thread(session: SqliteSession, ns: str, kind: str, limit: int) -> list[Memory]:
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


def notable(session: SqliteSession, ns: str, skip: Sequence[str], limit: int) -> list[Memory]:
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
