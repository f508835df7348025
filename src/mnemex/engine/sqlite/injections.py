"""The injection log in SQLite: write an entry and prune the log, read entries and
sessions (what :mod:`mnemex.injections` asks of an engine; PostgreSQL's is
:mod:`mnemex.engine.postgres.injections`). Rows are read back in the column order of
:data:`COLUMNS`, times as stored text."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Final

from mnemex.text import format_time

if TYPE_CHECKING:
    from mnemex.engine.protocol import Session

COLUMNS: Final = (
    "seq, created_at, namespace, agent, session_id, event, prompt, outcome, block, detail"
)
MARK: Final = "?"  # the parameter mark of the conditions mnemex.injections builds


def log(session: Session, row: Sequence[Any], oldest: datetime, keep: int) -> int:
    """Insert ``row`` (the columns after ``seq``; ``detail`` as JSON text) and delete the
    entries older than ``oldest`` and all but the newest ``keep``; the new entry's id."""
    stored = (format_time(row[0]), *row[1:])
    with session.transaction() as conn:
        seq = conn.execute(
            f"INSERT INTO injections ({COLUMNS.split(', ', 1)[1]}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            stored,
        ).lastrowid
        assert seq is not None
        conn.execute("DELETE FROM injections WHERE created_at < ?", (format_time(oldest),))
        conn.execute("DELETE FROM injections WHERE seq <= ?", (seq - keep,))
    return int(seq)


def read(session: Session, parts: str, params: Sequence[Any], limit: int) -> list[Sequence[Any]]:
    """The entries under the conditions ``parts`` (``AND ...``, with ``params``), newest
    first."""
    with session.connection() as conn:
        return list(
            conn.execute(
                f"SELECT {COLUMNS} FROM injections WHERE 1{parts} ORDER BY seq DESC LIMIT ?",
                [*params, limit],
            ).fetchall()
        )


def one(session: Session, seq: int) -> Sequence[Any] | None:
    """The entry with this id, or ``None``."""
    with session.connection() as conn:
        found = conn.execute(f"SELECT {COLUMNS} FROM injections WHERE seq = ?", (seq,))
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
                "sum(outcome = 'injected'), min(created_at), max(created_at) "
                f"FROM injections WHERE 1{parts} GROUP BY session_id, agent, namespace "
                "ORDER BY max(seq) DESC LIMIT ?",
                [*params, limit],
            ).fetchall()
        )
