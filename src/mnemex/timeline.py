"""The timeline: memories by the time they were created, newest first or around one memory."""

from __future__ import annotations

from typing import Final

from mnemex.config import MAX_SEARCH_LIMIT, check_count
from mnemex.engine.sqlite.memories import ENTRY, around_anchor, entry, latest
from mnemex.index.retrieval import Filters
from mnemex.results import TimelineEntry
from mnemex.storage import read_transaction
from mnemex.storage.connect import Connect
from mnemex.text import clean_id

__all__ = ["COLUMNS", "around_anchor", "entry", "latest", "timeline"]

COLUMNS: Final = ENTRY
"""What an entry is read from (SQLite's statements are :mod:`mnemex.engine.sqlite.memories`'s)."""


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
