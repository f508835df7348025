"""The injection log in PostgreSQL: what :mod:`mnemex.injections` does on SQLite (write
an entry and prune the log, read entries and sessions), over a
:class:`~mnemex.engine.postgres.session.Session`. Rows are read back in the
column order of :data:`COLUMNS`."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mnemex.engine.protocol import Session

COLUMNS = "seq, created_at, namespace, agent, session_id, event, prompt, outcome, block, detail"
MARK = "%s"  # the parameter mark of the conditions mnemex.injections builds


def log(session: Session, row: Sequence[Any], oldest: datetime, keep: int) -> int:
    """Insert ``row`` (the columns after ``seq``; ``detail`` as JSON text) and delete the
    entries older than ``oldest`` and all but the newest ``keep``; the new entry's id."""
    with session.transaction() as conn:
        found = conn.execute(
            f"INSERT INTO injections ({COLUMNS.split(', ', 1)[1]}) "
            "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s::jsonb) RETURNING seq",
            list(row),
        ).fetchone()
        seq = int(found[0])
        conn.execute("DELETE FROM injections WHERE created_at < %s", (oldest,))
        conn.execute("DELETE FROM injections WHERE seq <= %s", (seq - keep,))
    return seq


def read(session: Session, parts: str, params: Sequence[Any], limit: int) -> list[Sequence[Any]]:
    """The entries under the conditions ``parts`` (``AND ...``, with ``params``), newest
    first."""
    with session.connection() as conn:
        return list(
            conn.execute(
                f"SELECT {COLUMNS} FROM injections WHERE true{parts} ORDER BY seq DESC LIMIT %s",
                [*params, limit],
            ).fetchall()
        )


def one(session: Session, seq: int) -> Sequence[Any] | None:
    with session.connection() as conn:
        found = conn.execute(f"SELECT {COLUMNS} FROM injections WHERE seq = %s", (seq,))
        return found.fetchone()  # type: ignore[no-any-return]


def sessions(
    session: Session, parts: str, params: Sequence[Any], limit: int
) -> list[Sequence[Any]]:
    """(session_id, agent, namespace, prompts, injected, first, last) of the sessions under
    the conditions ``parts``, the latest first."""
    with session.connection() as conn:
        return list(
            conn.execute(
                "SELECT session_id, agent, namespace, count(*), "
                "count(*) FILTER (WHERE outcome = 'injected'), min(created_at), max(created_at) "
                f"FROM injections WHERE true{parts} GROUP BY session_id, agent, namespace "
                "ORDER BY max(seq) DESC LIMIT %s",
                [*params, limit],
            ).fetchall()
        )
