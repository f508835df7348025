"""Small SQL builders shared by every module that writes SQL by hand."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Final

IN_CHUNK: Final = 500
"""Values per ``IN (...)`` list: far below SQLite's limit on bound parameters."""
OPTIMIZE_MAX_ROWS: Final = 2_000_000
"""Past this many memories a merge of the full-text index into one segment would hold the
write lock too long: FTS5's own incremental merging does the work."""


def marks(count: int) -> str:
    """``count`` parameter marks for an ``IN (...)`` list or a ``VALUES (...)`` row: ``?,?,?``."""
    if count < 1:
        raise ValueError("an IN list needs at least one value")
    return ",".join("?" * count)


def delete_ids(
    conn: sqlite3.Connection, table: str, namespace: str, ids: Sequence[str]
) -> set[str]:
    """Delete the rows of ``table`` with these ids in the namespace, ``IN_CHUNK`` ids a
    statement, inside the caller's write transaction; returns the ids deleted."""
    gone: set[str] = set()
    for start in range(0, len(ids), IN_CHUNK):
        chunk = ids[start : start + IN_CHUNK]
        gone.update(
            r[0]
            for r in conn.execute(
                f"DELETE FROM {table} WHERE namespace = ? AND id IN ({marks(len(chunk))}) "
                "RETURNING id",
                [namespace, *chunk],
            ).fetchall()
        )
    return gone
